//! The longest held prefix of a prompt, by galloping then bisecting.
//!
//! When a target's held pages are prefix-closed ([`super::pages`]), "holds page `i`" is true for
//! `i < overlap` and false after, so the leading run is found with about `2 log2(overlap)` probes:
//! double the probed length until a page is missing, then bisect between the last hit and that
//! miss. Short runs (a shared system prompt) cost a few probes into pages every prompt touches,
//! which stay in cache; only long runs reach into cold memory.

/// The leading run of `0..n` for which `held` is true, given that `held` is true on a prefix of
/// `0..n` and false after it.
pub(super) fn leading_run(n: usize, held: impl Fn(usize) -> bool) -> usize {
    if n == 0 || !held(0) {
        return 0;
    }
    // held(lo - 1) is known true; the run ends at or before hi.
    let (mut lo, mut hi) = (1, n);
    while lo < hi {
        let next = (lo * 2).min(hi);
        if held(next - 1) {
            lo = next;
        } else {
            hi = next - 1;
            break;
        }
    }
    while lo < hi {
        let mid = lo + (hi - lo).div_ceil(2);
        if held(mid - 1) {
            lo = mid;
        } else {
            hi = mid - 1;
        }
    }
    lo
}

#[cfg(test)]
mod tests {
    use std::cell::Cell;

    use super::leading_run;

    #[test]
    fn finds_every_run_length_in_few_probes() {
        for n in 0..70 {
            for run in 0..=n {
                let probes = Cell::new(0);
                let found = leading_run(n, |i| {
                    probes.set(probes.get() + 1);
                    assert!(i < n, "probed past the prompt");
                    i < run
                });
                assert_eq!(found, run, "n {n} run {run}");
                let bound = 2 * (usize::BITS - run.leading_zeros()) as usize + 2;
                assert!(probes.get() <= bound, "n {n} run {run}: {} probes", probes.get());
            }
        }
    }
}
