//! Small tokenizers and chat templates made at run time, for tests and benchmarks: BPE models
//! trained with the `tokenizers` trainer on deterministic English-like text, with ChatML
//! special tokens, and templates in the three shapes that matter for system messages (ChatML
//! with tools; one that raises on a system role; one that folds the system text into the first
//! user turn). Nothing is downloaded.

use serde_json::{Value, json};
use tokenizers::models::TrainerWrapper;
use tokenizers::models::bpe::{BPE, BpeTrainerBuilder};
use tokenizers::pre_tokenizers::byte_level::ByteLevel;
use tokenizers::pre_tokenizers::metaspace::{Metaspace, PrependScheme};
use tokenizers::{AddedToken, Tokenizer};

/// The ChatML special tokens.
pub const SPECIAL_TOKENS: [&str; 3] = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"];

/// A ChatML template with tools and tool calls (the shape of Qwen2.5's).
pub const CHATML: &str = r#"{%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0]['role'] == 'system' %}
        {{- messages[0]['content'] }}
    {%- else %}
        {{- 'You are a helpful assistant.' }}
    {%- endif %}
    {{- "\n\n# Tools\n\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools><|im_end|>\n" }}
{%- elif messages[0]['role'] == 'system' %}
    {{- '<|im_start|>system\n' + messages[0]['content'] + '<|im_end|>\n' }}
{%- endif %}
{%- for message in messages %}
    {%- if message.role == 'system' and loop.first %}
        {%- continue %}
    {%- elif message.role == 'assistant' and message.tool_calls is defined %}
        {{- '<|im_start|>assistant' }}
        {%- if message.content %}
            {{- '\n' + message.content }}
        {%- endif %}
        {%- for tool_call in message.tool_calls %}
            {{- '\n<tool_call>\n{"name": "' + tool_call.function.name + '", "arguments": ' }}
            {{- tool_call.function.arguments | tojson }}
            {{- '}\n</tool_call>' }}
        {%- endfor %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {{- '<|im_start|>user\n<tool_response>\n' + message.content + '\n</tool_response><|im_end|>\n' }}
    {%- else %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>\n' }}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}
"#;

/// A template without system support that raises on a system message (the shape of Gemma 1's
/// and early Mistral templates).
pub const RAISES_ON_SYSTEM: &str = r#"{{ bos_token }}{% for message in messages %}{% if message['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"#;

/// A template that folds a leading system message into the first user turn (the shape of
/// Gemma 2's and 3's).
pub const FOLDS_SYSTEM: &str = r#"{{ bos_token }}{% if messages[0]['role'] == 'system' %}{% set first_user_prefix = messages[0]['content'] + '\n\n' %}{% set loop_messages = messages[1:] %}{% else %}{% set first_user_prefix = '' %}{% set loop_messages = messages %}{% endif %}{% for message in loop_messages %}{% if (message['role'] == 'user') != (loop.index0 % 2 == 0) %}{{ raise_exception('Conversation roles must alternate user/assistant/user/assistant/...') }}{% endif %}{{ '<|im_start|>' + message['role'] + '\n' + (first_user_prefix if loop.first else '') + message['content'] | trim + '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"#;

const WORDS: &[&str] = &[
    "the",
    "request",
    "router",
    "token",
    "prefix",
    "cache",
    "worker",
    "decode",
    "prefill",
    "page",
    "hash",
    "session",
    "model",
    "answer",
    "question",
    "system",
    "user",
    "assistant",
    "tool",
    "call",
    "result",
    "time",
    "latency",
    "throughput",
    "batch",
    "memory",
    "queue",
    "load",
    "score",
    "pick",
    "release",
    "stream",
    "chunk",
    "server",
    "client",
    "proxy",
    "control",
    "ledger",
    "reservation",
    "lease",
    "rank",
    "target",
    "pool",
    "event",
    "index",
    "block",
    "store",
    "remove",
    "clear",
    "weight",
    "cost",
    "demand",
    "policy",
    "random",
    "round",
    "robin",
    "power",
    "two",
    "choices",
    "of",
    "and",
    "a",
    "to",
    "in",
    "is",
    "it",
    "that",
    "for",
    "on",
    "with",
    "as",
    "was",
    "be",
    "by",
    "this",
    "are",
    "from",
    "or",
    "have",
    "an",
    "not",
    "but",
    "what",
    "all",
    "were",
    "when",
    "we",
    "there",
    "can",
    "more",
    "if",
    "no",
    "out",
    "so",
    "said",
    "up",
    "its",
    "about",
    "into",
    "than",
    "them",
    "only",
    "other",
    "new",
    "some",
    "could",
    "these",
    "two",
    "may",
    "then",
    "first",
    "any",
    "like",
    "über",
    "naïve",
    "café",
    "日本語",
    "données",
    "emoji🙂",
    "fn",
    "let",
    "mut",
    "impl",
    "struct",
    "Vec<u32>",
];

/// A deterministic pseudo-random generator (64-bit LCG), so fixtures are the same every run.
#[derive(Debug, Clone)]
pub struct Lcg(u64);

impl Lcg {
    /// Seeded.
    pub fn new(seed: u64) -> Self {
        Self(seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407))
    }

    /// The next value in `0..n`.
    pub fn below(&mut self, n: usize) -> usize {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ((self.0 >> 33) as usize) % n.max(1)
    }
}

/// `words` words of English-like text with punctuation, numbers, some non-ASCII and code.
pub fn text(rng: &mut Lcg, words: usize) -> String {
    let mut out = String::with_capacity(words * 6);
    for i in 0..words {
        if i > 0 {
            out.push(match rng.below(20) {
                0 => '\n',
                1 => '\t',
                _ => ' ',
            });
        }
        out.push_str(WORDS[rng.below(WORDS.len())]);
        match rng.below(12) {
            0 => out.push('.'),
            1 => out.push(','),
            2 => out.push_str(&format!(" {}", rng.below(100_000))),
            3 => out.push_str("  "),
            _ => {}
        }
    }
    out
}

/// The training text: ChatML-shaped conversations, so merges form inside and around turns.
fn corpus() -> Vec<String> {
    let mut rng = Lcg::new(7);
    (0..600)
        .map(|_| {
            let words = 20 + rng.below(60);
            // Words glued to pieces of the special tokens, so that merges across them exist and
            // a prompt cut in the wrong place encodes differently.
            let glued = ["", "", "", " token<|im_endless", " pick<|im_", " page<|"][rng.below(6)];
            format!("<|im_start|>user\n{}{glued}<|im_end|>\n<|im_start|>assistant\n", text(&mut rng, words))
        })
        .collect()
}

fn train(mut tokenizer: Tokenizer, vocab_size: usize, alphabet: Vec<char>) -> Tokenizer {
    let specials: Vec<AddedToken> = SPECIAL_TOKENS.iter().map(|t| AddedToken::from(*t, true)).collect();
    let trainer = BpeTrainerBuilder::new()
        .vocab_size(vocab_size)
        .min_frequency(2)
        .show_progress(false)
        .special_tokens(specials.clone())
        .initial_alphabet(alphabet.into_iter().collect())
        .build();
    let mut trainer: TrainerWrapper = trainer.into();
    tokenizer.train(&mut trainer, corpus().into_iter()).expect("training a fixture BPE");
    tokenizer.add_special_tokens(&specials);
    tokenizer
}

/// A byte-level BPE (GPT-2/Qwen style) of `vocab_size` tokens with the ChatML special tokens.
pub fn byte_level_bpe(vocab_size: usize) -> Tokenizer {
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(ByteLevel::new(false, true, true)));
    tokenizer.with_decoder(Some(ByteLevel::default()));
    train(tokenizer, vocab_size, ByteLevel::alphabet().into_iter().collect())
}

/// A SentencePiece-style BPE (Metaspace, `prepend_scheme: first`, Llama style) with the ChatML
/// special tokens: its first piece of a sequence is treated differently from the others.
pub fn metaspace_bpe(vocab_size: usize) -> Tokenizer {
    let mut tokenizer = Tokenizer::new(BPE::default());
    tokenizer.with_pre_tokenizer(Some(Metaspace::new('▁', PrependScheme::First, true)));
    train(tokenizer, vocab_size, Vec::new())
}

/// A conversation of `turns` user/assistant exchanges of about `words` words per message,
/// optionally opened by a system message, ending with a user message.
pub fn conversation(seed: u64, turns: usize, words: usize, system: bool) -> Vec<Value> {
    let mut rng = Lcg::new(seed);
    let mut messages = Vec::new();
    if system {
        messages.push(json!({"role": "system", "content": text(&mut rng, words)}));
    }
    for turn in 0..turns {
        messages.push(json!({"role": "user", "content": text(&mut rng, words)}));
        if turn + 1 < turns {
            messages.push(json!({"role": "assistant", "content": text(&mut rng, words)}));
        }
    }
    messages
}

/// A `/v1/chat/completions` body for `messages`.
pub fn chat_body(messages: &[Value]) -> serde_json::Map<String, Value> {
    let body = json!({"model": "m", "messages": messages, "stream": true});
    body.as_object().cloned().unwrap_or_default()
}

/// Writes a model directory the way Hugging Face ships one: `tokenizer.json` (a byte-level BPE of
/// `vocab_size` tokens) and `tokenizer_config.json` with the ChatML template and its special
/// tokens. Returns the `tokenizer.json` path; the directory itself works as a `--model-path` or
/// `--tokenizer-path`.
///
/// # Errors
/// When a file cannot be written.
pub fn write_model_dir(dir: &std::path::Path, vocab_size: usize) -> std::io::Result<std::path::PathBuf> {
    std::fs::create_dir_all(dir)?;
    let tokenizer = dir.join("tokenizer.json");
    byte_level_bpe(vocab_size).save(&tokenizer, false).map_err(|e| std::io::Error::other(e.to_string()))?;
    let config = json!({
        "chat_template": CHATML,
        "bos_token": null,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
    });
    std::fs::write(dir.join("tokenizer_config.json"), config.to_string())?;
    Ok(tokenizer)
}
