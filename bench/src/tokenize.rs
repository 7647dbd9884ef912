//! Tokenizer benchmark: what `--tokenizer` adds to a request in the proxy, against baselines
//! measured in the same run.
//!
//! A byte-level BPE with ChatML special tokens is trained at start (`infera_tokenize::fixture`,
//! nothing downloaded) and the ChatML template renders synthetic multi-turn chats of about 1k,
//! 8k and 32k prompt tokens. For each size, timed one request at a time:
//!
//! - `json`: `serde_json` parsing the request body, which the proxy does for every request
//!   already (the baseline the tokenizer's cost is read against);
//! - `full`: render + encode + page hashes (page size 64) of the whole prompt, no session;
//! - `cached`: the same for the session's next turn (the previous turn's prompt plus an answer
//!   and a new question) with the previous turn in the session cache.
//!
//! Reported: p50/p99 in µs, the encoder's throughput in MB of prompt text per second, and the
//! ratios cached/full and full/json; all of it once per encoder (`tokenizers`, the reference,
//! then the fast one the proxy uses when it agrees), then the fast/reference ratios.

use std::time::{Duration, Instant};

use infera_proto::types::Api;
use infera_tokenize::fixture::{self, Lcg};
use infera_tokenize::{CacheUse, EncoderChoice, EncoderKind, Outcome, SpecialTokens, Tokenizer};
use serde_json::{Map, Value, json};

#[derive(clap::Args, Debug)]
pub(crate) struct TokenizeArgs {
    /// Prompt sizes in tokens.
    #[arg(long, env = "INFERA_BENCH_SIZES", value_delimiter = ',', default_value = "1000,8000,32000")]
    sizes: Vec<usize>,
    /// Time budget per measurement (each runs at least 20 requests).
    #[arg(long, env = "INFERA_BENCH_ROUND_MS", default_value_t = 2_000)]
    round_ms: u64,
    /// Vocabulary of the trained BPE.
    #[arg(long, env = "INFERA_BENCH_VOCAB", default_value_t = 4_000)]
    vocab: usize,
    /// Tokens per KV page for the page hashes.
    #[arg(long, env = "INFERA_BENCH_PAGE_SIZE", default_value_t = 64)]
    page_size: usize,
}

/// Latencies of one measurement, in µs.
struct Sample(Vec<f64>);

impl Sample {
    fn percentile(&self, p: f64) -> f64 {
        let mut v = self.0.clone();
        v.sort_by(f64::total_cmp);
        let rank = p / 100.0 * (v.len() - 1) as f64;
        let (lo, hi) = (rank.floor() as usize, rank.ceil() as usize);
        v[lo] + (v[hi] - v[lo]) * (rank - lo as f64)
    }
}

/// Runs `f` for about `budget` (at least 20 times) and records each call.
fn measure(budget: Duration, mut f: impl FnMut(u64)) -> Sample {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut i = 0u64;
    while out.len() < 20 || started.elapsed() < budget {
        let t = Instant::now();
        f(i);
        out.push(t.elapsed().as_secs_f64() * 1e6);
        i += 1;
    }
    Sample(out)
}

/// One size's p50s with one encoder, in µs.
struct Row {
    tokens: usize,
    full: f64,
    cached: f64,
}

pub(crate) fn run(args: TokenizeArgs) -> anyhow::Result<()> {
    let trained = Instant::now();
    let backend = fixture::byte_level_bpe(args.vocab);
    println!(
        "tokenizer: byte-level BPE, {} tokens, trained in {:.1} s; ChatML template; page size {}",
        backend.get_vocab_size(true),
        trained.elapsed().as_secs_f64(),
        args.page_size
    );
    let mut rows = Vec::new();
    for choice in [EncoderChoice::Reference, EncoderChoice::Auto] {
        let special = SpecialTokens { bos: Some("<|endoftext|>".into()), ..SpecialTokens::default() };
        let tokenizer = Tokenizer::new(backend.clone(), Some(fixture::CHATML), special)?
            .with_encoder(choice)
            .with_session_cache(1 << 30);
        match tokenizer.encoder() {
            EncoderKind::Reference(_) if choice == EncoderChoice::Reference => {
                println!("\nencoder: tokenizers (the reference)")
            }
            EncoderKind::Reference(reason) => anyhow::bail!("the fast encoder is not used: {reason}"),
            EncoderKind::Fast { offsets_from_bytes } => {
                println!(
                    "\nencoder: kitoken, checked against tokenizers (offsets from bytes: {offsets_from_bytes})"
                )
            }
        }
        rows.push(one_encoder(&tokenizer, &args)?);
    }
    println!("\nfast / reference, p50 µs (full: render + encode + hashes; cached: the session's next turn)");
    println!(
        "{:>7} {:>15} {:>10} {:>8} {:>17} {:>10} {:>8}",
        "tokens", "full reference", "fast", "ratio", "cached reference", "fast", "ratio"
    );
    for (r, f) in rows[0].iter().zip(&rows[1]) {
        println!(
            "{:>7} {:>15.0} {:>10.0} {:>8.3} {:>17.0} {:>10.0} {:>8.3}",
            r.tokens,
            r.full,
            f.full,
            f.full / r.full,
            r.cached,
            f.cached,
            f.cached / r.cached
        );
    }
    Ok(())
}

/// The table for one encoder.
fn one_encoder(tokenizer: &Tokenizer, args: &TokenizeArgs) -> anyhow::Result<Vec<Row>> {
    let mut rows = Vec::new();
    println!(
        "{:>7} {:>8} {:>9} {:>10} {:>17} {:>9} {:>17} {:>8} {:>8}",
        "tokens",
        "KiB",
        "json µs",
        "full MB/s",
        "full µs p50/p99",
        "reused",
        "cached µs p50/p99",
        "cached/",
        "full/"
    );
    println!("{:>89} {:>8}", "full", "json");
    let budget = Duration::from_millis(args.round_ms);
    let mut breakdown = Vec::new();
    for &size in &args.sizes {
        let (turn1, turn2) = conversation(tokenizer, size)?;
        let (body1, body2) = (fixture::chat_body(&turn1), fixture::chat_body(&turn2));
        let bytes2 = serde_json::to_vec(&body2)?;
        let ids2 = token_ids(tokenizer, &body2, None)?;
        let prompt_bytes = rendered_len(tokenizer, &body2)?;

        let json = measure(budget, |_| {
            let v: Value = serde_json::from_slice(&bytes2).unwrap_or_default();
            std::hint::black_box(v);
        });
        let full = measure(budget, |_| {
            let ids = token_ids(tokenizer, &body2, None).unwrap_or_default();
            std::hint::black_box(infera_kv::hash::page_hashes(&ids, args.page_size));
        });
        // Where the full path's time goes: rendering, encoding, hashing.
        let text2 = rendered_text(tokenizer, &body2)?;
        let render = measure(budget / 4, |_| {
            std::hint::black_box(rendered_text(tokenizer, &body2).unwrap_or_default());
        });
        let encode = measure(budget / 4, |_| {
            std::hint::black_box(tokenizer.encode(&text2, false).unwrap_or_default());
        });
        let hash = measure(budget / 4, |_| {
            std::hint::black_box(infera_kv::hash::page_hashes(&ids2, args.page_size));
        });
        breakdown.push((
            ids2.len(),
            prompt_bytes,
            render.percentile(50.0),
            encode.percentile(50.0),
            hash.percentile(50.0),
        ));
        let mut reused = 0;
        let cached = measure_cached(budget, tokenizer, &body1, &body2, args.page_size, &mut reused)?;

        let (json50, full50, cached50) =
            (json.percentile(50.0), full.percentile(50.0), cached.percentile(50.0));
        rows.push(Row { tokens: ids2.len(), full: full50, cached: cached50 });
        println!(
            "{:>7} {:>8.1} {:>9.1} {:>10.1} {:>8.0}/{:<8.0} {:>8.0}% {:>8.0}/{:<8.0} {:>8.3} {:>8.1}",
            ids2.len(),
            bytes2.len() as f64 / 1024.0,
            json50,
            prompt_bytes as f64 / full50,
            full50,
            full.percentile(99.0),
            100.0 * reused as f64 / ids2.len() as f64,
            cached50,
            cached.percentile(99.0),
            cached50 / full50,
            full50 / json50,
        );
    }
    println!(
        "full path, p50 µs: {:>7} {:>10} {:>10} {:>12} {:>14}",
        "tokens", "render", "encode", "page hashes", "encode MB/s"
    );
    for (tokens, bytes, render, encode, hash) in breakdown {
        println!("{tokens:>26} {render:>10.0} {encode:>10.0} {hash:>12.0} {:>14.1}", bytes as f64 / encode);
    }
    let stats = tokenizer.cache_stats();
    println!(
        "session cache: {} hits, {} misses, {} entries, {:.1} MiB",
        stats.hits,
        stats.misses,
        stats.entries,
        stats.bytes as f64 / (1 << 20) as f64
    );
    Ok(rows)
}

/// The next turn of a fresh session each time: its previous turn is encoded first (not timed),
/// then the timed call encodes the new turn with the previous one in the cache.
fn measure_cached(
    budget: Duration,
    tokenizer: &Tokenizer,
    body1: &Map<String, Value>,
    body2: &Map<String, Value>,
    page_size: usize,
    reused: &mut usize,
) -> anyhow::Result<Sample> {
    let started = Instant::now();
    let mut out = Vec::new();
    let mut session = 0u64;
    while out.len() < 20 || started.elapsed() < budget {
        let key = format!("bench-{session}");
        session += 1;
        tokenizer.tokenize(Api::ChatCompletions, body1, Some(&key))?;
        let t = Instant::now();
        let outcome = tokenizer.tokenize(Api::ChatCompletions, body2, Some(&key))?;
        let Outcome::Tokens(tokens) = outcome else { anyhow::bail!("no tokens: {outcome:?}") };
        std::hint::black_box(infera_kv::hash::page_hashes(&tokens.ids, page_size));
        out.push(t.elapsed().as_secs_f64() * 1e6);
        let CacheUse::Hit(n) = tokens.cache else { anyhow::bail!("the second turn missed the cache") };
        *reused = n;
    }
    Ok(Sample(out))
}

fn token_ids(
    tokenizer: &Tokenizer,
    body: &Map<String, Value>,
    session: Option<&str>,
) -> anyhow::Result<Vec<u32>> {
    match tokenizer.tokenize(Api::ChatCompletions, body, session)? {
        Outcome::Tokens(t) => Ok(t.ids.to_vec()),
        other => anyhow::bail!("no tokens: {other:?}"),
    }
}

fn rendered_len(tokenizer: &Tokenizer, body: &Map<String, Value>) -> anyhow::Result<usize> {
    Ok(rendered_text(tokenizer, body)?.len())
}

fn rendered_text(tokenizer: &Tokenizer, body: &Map<String, Value>) -> anyhow::Result<String> {
    match tokenizer.render(Api::ChatCompletions, body)? {
        infera_tokenize::Rendered::Chat { text, .. } => Ok(text),
        other => anyhow::bail!("not a chat prompt: {other:?}"),
    }
}

/// A chat of about `size` prompt tokens (system prompt, then exchanges of ~120-word messages)
/// and its next turn (an answer and a new question appended).
fn conversation(tokenizer: &Tokenizer, size: usize) -> anyhow::Result<(Vec<Value>, Vec<Value>)> {
    let mut rng = Lcg::new(size as u64);
    let mut messages = vec![json!({"role": "system", "content": fixture::text(&mut rng, 200)})];
    loop {
        messages.push(json!({"role": "user", "content": fixture::text(&mut rng, 120)}));
        if token_ids(tokenizer, &fixture::chat_body(&messages), None)?.len() >= size {
            break;
        }
        messages.push(json!({"role": "assistant", "content": fixture::text(&mut rng, 120)}));
    }
    let mut next = messages.clone();
    next.push(json!({"role": "assistant", "content": fixture::text(&mut rng, 120)}));
    next.push(json!({"role": "user", "content": fixture::text(&mut rng, 60)}));
    Ok((messages, next))
}
