//! How the study writes numbers for people: integers with thousands separators, as the original study's
//! tables print them. The arms' labels, the tables and SMG's counters all print the same way,
//! so the rule lives apart from each of them.

/// `1000000` → `1,000,000` (integers; others as they are).
pub(crate) fn thousands(v: f64) -> String {
    if v.fract() != 0.0 || v.abs() >= 1e15 {
        return v.to_string();
    }
    let digits = format!("{}", v.abs() as u64);
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i) % 3 == 0 {
            out.push(',');
        }
        out.push(c);
    }
    if v < 0.0 { format!("-{out}") } else { out }
}
