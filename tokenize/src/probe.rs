//! The texts a fast encoder must encode exactly as the reference before it is used (by
//! `encoder`): scripts, numbers, whitespace runs, code, emoji and control characters;
//! every added token alone, doubled and inside words; and runs of the vocabulary's own tokens
//! decoded back to text (the odd byte strings that merges are made of).

use std::fmt::Write;

/// Texts that pull on the pre-tokenizer's regex and the normalizer.
const SAMPLES: &[&str] = &[
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; don't, won't, I'll, we've, THEY'RE.",
    "fn main() {\n    let x: Vec<u32> = (0..10).map(|i| i * 2).collect();\n\tprintln!(\"{x:?}\");\n}\n",
    "def f(a, b=2, *args, **kw):\n    return {'a': a, \"b\": [b, None, True]}  # comment\n\n\n",
    "12345678901234567890 3.14159265 1,000,000.00 -42 +7e-10 0x1F 2026-12-04T18:05:16Z 10:30pm",
    "深度求索是一家人工智能公司。日本語のテキスト、カタカナとひらがな。한국어 문장입니다. 繁體中文，標點符號！",
    "Привет, мир! Ελληνικά κείμενα. مرحبا بالعالم. שלום עולם. नमस्ते दुनिया। สวัสดีชาวโลก ພາສາລາວ",
    "👍🏽 👨‍👩‍👧‍👦 🇫🇷🇯🇵 ❤️‍🔥 ☃ ★☆ ✓✗ → ← ∑∫√∞ ≤≥≠ €£¥ ©®™ ½¾ ℕℤℚ",
    "Ångström café naïve façade résumé coöperate e\u{301} n\u{303} Å ﬁ ﬂ Ⅻ ① ｆｕｌｌｗｉｄｔｈ",
    "a  b   c    d\t\te\n\n\nf\r\n g \u{a0}h\u{2003}i\u{3000}j   \n   \n\t \t",
    "   leading spaces",
    "trailing spaces   ",
    "\n\nnew lines first",
    "!!!???...---___***~~~```'''\"\"\"((()))[[[]]]{{{}}}<<<>>>|||///\\\\\\@@@###$$$%%%^^^&&&",
    "https://example.com/path?q=1&r=%20x#frag user@example.org C:\\Users\\me\\file.txt ~/.bashrc",
    "{\"model\": \"m\", \"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"stream\": true}",
    "| a | b |\n|---|---|\n| 1 | 2 |\n\n# Title\n\n- item\n  - nested\n1. first\n> quote\n",
    "\u{0}\u{1}\u{7}\u{1b}[31mred\u{1b}[0m\u{7f}\u{ad}a\u{200b}b\u{200d}c\u{feff}d\u{fffd}",
    "x",
    " ",
    "",
];

/// Plain English and code: the token bytes of a byte-level BPE tile these.
pub(crate) const PLAIN: &[&str] = &[SAMPLES[0], SAMPLES[1]];

/// At most this many vocabulary ids are decoded into probe texts.
const VOCAB_SAMPLE: usize = 4096;
/// Vocabulary tokens per probe text.
const TOKENS_PER_TEXT: usize = 48;

/// The probe texts for `reference`.
pub(crate) fn texts(reference: &tokenizers::Tokenizer) -> Vec<String> {
    let mut texts: Vec<String> = SAMPLES.iter().map(|s| (*s).to_owned()).collect();
    texts.push("a".repeat(700));
    texts.push("9".repeat(300));
    texts.push(SAMPLES.concat());
    // In id order: the probe, and so the decision, is the same on every start.
    let mut by_id: Vec<_> = reference.get_added_tokens_decoder().into_iter().collect();
    by_id.sort_by_key(|(id, _)| *id);
    let added: Vec<String> = by_id.into_iter().map(|(_, t)| t.content).filter(|c| !c.is_empty()).collect();
    for token in &added {
        texts.push(format!("{token}{token} x{token}y\n{token} word {token}"));
    }
    let mut mixed = String::new();
    for (sample, token) in SAMPLES.iter().zip(added.iter().cycle()) {
        let _ = write!(mixed, "{sample}{token}");
    }
    texts.push(mixed);
    let bound = crate::token_bytes::id_bound(reference) as usize;
    let step = (bound / VOCAB_SAMPLE).max(1);
    let ids: Vec<u32> = (0..bound).step_by(step).map(|id| id as u32).collect();
    for (n, chunk) in ids.chunks(TOKENS_PER_TEXT).enumerate() {
        let pieces = chunk.iter().filter_map(|&id| reference.decode(&[id], false).ok());
        let joiner = if n % 2 == 0 { "" } else { " " };
        texts.push(pieces.collect::<Vec<_>>().join(joiner));
    }
    texts
}

/// The start of `text`, for a message.
pub(crate) fn excerpt(text: &str) -> String {
    text.chars().take(60).collect()
}
