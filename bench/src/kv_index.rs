//! `infera-bench kv-index`: the KV prefix index on events generated from a Mooncake trace.
//!
//! Each trace request's 512-token hash blocks become token ids (equal block ids, equal tokens),
//! requests are spread round-robin over the prefill targets, and each target's `BlockStored`
//! events carry the pages it does not hold yet, chained on the pages it does, exactly as an
//! engine's radix cache publishes them. Measured, each against a baseline in the same run:
//!
//! - ingest: stored and removed blocks per second, against SHA-256 over the same pages alone
//!   (the rehash an opaquely namespaced engine's blocks need, `--namespace`; SGLang's own hashes,
//!   salted or not (`--cache-salt`), need none below a chain's first page);
//! - overlap queries for 2,000-page prompts over all targets: p50/p99, idle, while another
//!   thread ingests flat out and while it ingests at `--ingest-rate`, against hashing the
//!   prompt's pages (what the proxy does per request);
//! - the cost a KV-aware prefill pick adds: pick + release with 2,000 page hashes against the
//!   same pick without them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args as ClapArgs;
use infera_control::kv_feed::{COMMIT_PART_BLOCKS, SharedIndex};
use infera_control::routing::KvIndex;
use infera_control::target::TargetKey;
use infera_kv::event::{KvEvent, Medium};
use infera_kv::hash::{PageHash, chain_page, salted_page_hashes};

use crate::replay::trace::{Format, Source};

mod picks;

use picks::pick_costs;

/// Tokens per Mooncake hash block.
const BLOCK_TOKENS: usize = 512;

/// Flags of `infera-bench kv-index`.
#[derive(ClapArgs, Debug)]
pub(crate) struct Args {
    /// A Mooncake-format trace (`.jsonl` or `.jsonl.gz`); the default is the bench's built-in
    /// synthetic one (the real ones: `cargo xtask traces`, into `traces/mooncake/`).
    #[arg(long, env = "INFERA_BENCH_TRACE", default_value = "builtin:mooncake")]
    trace: Source,
    /// Trace requests turned into events.
    #[arg(long, env = "INFERA_BENCH_KV_REQUESTS", default_value_t = 3_000)]
    requests: usize,
    /// Prefill targets the requests are spread over.
    #[arg(long, env = "INFERA_BENCH_KV_TARGETS", default_value_t = 8)]
    targets: u32,
    /// KV page size in tokens.
    #[arg(long, env = "INFERA_BENCH_KV_PAGE_SIZE", default_value_t = 16)]
    page_size: usize,
    /// Pages per query prompt.
    #[arg(long, env = "INFERA_BENCH_KV_QUERY_PAGES", default_value_t = 2_000)]
    query_pages: usize,
    /// Blocks a second the paced ingest row applies while it queries (a busy prefill fleet
    /// publishes tens of thousands).
    #[arg(long, env = "INFERA_BENCH_KV_INGEST_RATE", default_value_t = 1e6)]
    ingest_rate: f64,
    /// XORed into every published block hash: non-zero plays an engine whose hashes no router can
    /// compute (a LoRA adapter's namespace, `format: "dynamo"`), whose blocks the index keys by
    /// hashing their tokens and keeps a digest for.
    #[arg(long, env = "INFERA_BENCH_KV_NAMESPACE", default_value_t = 0)]
    namespace: i64,
    /// Every request carries this `cache_salt`: its pages are hashed after the salt's seed (in
    /// the events and the queries alike), as SGLang's KV events and the proxy hash them.
    #[arg(long, env = "INFERA_BENCH_KV_CACHE_SALT")]
    cache_salt: Option<String>,
    /// Timed queries (and picks) per measurement: a p99 rests on the slowest 1 % of them.
    #[arg(long, env = "INFERA_BENCH_KV_QUERIES", default_value_t = 10_000)]
    queries: usize,
}

impl Args {
    /// A prompt's page hashes, as the proxy computes them for a request of this run.
    fn page_hashes(&self, tokens: &[u32]) -> Vec<PageHash> {
        salted_page_hashes(self.cache_salt.as_deref(), tokens, self.page_size)
    }
}

/// One target's stores, as the engine would publish them.
struct Store {
    target: TargetKey,
    event: KvEvent,
    pages: usize,
}

/// Runs the benchmark and prints its report.
pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    anyhow::ensure!(args.targets > 0 && args.page_size > 0, "--targets and --page-size must be positive");
    args.trace.announce();
    let prompts = load_prompts(&args)?;
    let stores = events(&prompts, &args);
    let pages: usize = stores.iter().map(|s| s.pages).sum();
    println!(
        "kv-index: {} requests, {} targets, page size {}, {} stored pages in {} events, {}",
        prompts.len(),
        args.targets,
        args.page_size,
        pages,
        stores.len(),
        match (args.namespace, &args.cache_salt) {
            (0, None) => "SGLang's own hashes",
            (0, Some(_)) => "SGLang's own hashes under a cache_salt",
            (_, None) => "opaquely namespaced hashes",
            (_, Some(_)) => "opaquely namespaced hashes under a cache_salt",
        },
    );

    // Ingest, against the SHA-256 of the same pages.
    let sha = time(|| {
        let mut d = None;
        for s in &stores {
            if let KvEvent::BlockStored { token_ids, block_size, .. } = &s.event {
                for page in token_ids.chunks(*block_size as usize) {
                    d = Some(chain_page(d.as_ref(), page));
                }
            }
        }
        d
    });
    let mut index = KvIndex::new(usize::MAX);
    let rss0 = resident_bytes();
    let (mut prepare, mut commit) = (Duration::ZERO, Duration::ZERO);
    let ingest = time(|| {
        for s in &stores {
            let t0 = Instant::now();
            let mut prepared = index.prepare(s.target, std::slice::from_ref(&s.event));
            let t1 = Instant::now();
            while !index.commit_some(s.target, &mut prepared, COMMIT_PART_BLOCKS) {}
            prepare += t1 - t0;
            commit += t1.elapsed();
        }
    });
    let rss = resident_bytes().zip(rss0).map(|(a, b)| a.saturating_sub(b));
    let stats = index.stats();
    println!(
        "ingest   {:>10.0} blocks/s {:>8.0} events/s  ({:.2}× the SHA-256 alone: {:.0} blocks/s)  index {} blocks",
        pages as f64 / ingest.as_secs_f64(),
        stores.len() as f64 / ingest.as_secs_f64(),
        ingest.as_secs_f64() / sha.as_secs_f64(),
        pages as f64 / sha.as_secs_f64(),
        stats.blocks,
    );
    println!(
        "         prepare (hash + parent lookup) {:.0} ns/block, commit (maps) {:.0} ns/block",
        prepare.as_secs_f64() * 1e9 / pages as f64,
        commit.as_secs_f64() * 1e9 / pages as f64
    );
    println!(
        "memory   maps {:.1} MiB = {:.1} bytes/block; resident grew {}",
        stats.bytes as f64 / (1 << 20) as f64,
        stats.bytes as f64 / stats.blocks.max(1) as f64,
        rss.map_or("(unknown)".into(), |r| format!(
            "{:.1} MiB = {:.1} bytes/block",
            r as f64 / (1 << 20) as f64,
            r as f64 / stats.blocks.max(1) as f64
        ))
    );

    // Queries over all targets, against hashing the prompt.
    let long: Vec<&Vec<u32>> =
        prompts.iter().filter(|p| p.len() >= args.query_pages * args.page_size).collect();
    anyhow::ensure!(
        !long.is_empty(),
        "no request of the trace has {} pages; lower --query-pages",
        args.query_pages
    );
    let queries: Vec<Vec<PageHash>> =
        long.iter().map(|p| args.page_hashes(&p[..args.query_pages * args.page_size])).collect();
    let keys: Vec<TargetKey> = (0..args.targets).map(TargetKey::from_index).collect();
    let hash_us = samples(args.queries, |i| {
        let p = long[i % long.len()];
        std::hint::black_box(args.page_hashes(&p[..args.query_pages * args.page_size]));
    });
    let mut out = Vec::new();
    let idle = samples(args.queries, |i| index.overlaps(&queries[i % queries.len()], &keys, &mut out));
    let hits = queries.iter().filter(|q| keys.iter().any(|k| index.overlap(q, *k) > 0)).count();
    let shared = Arc::new(SharedIndex::new(index));
    let query_all = || {
        let mut out = Vec::new();
        samples(args.queries, |i| {
            let index = shared.read();
            index.overlaps(&queries[i % queries.len()], &keys, &mut out);
        })
    };
    let busy = under_ingest(&shared, &stores, None, query_all);
    let paced = under_ingest(&shared, &stores, Some(args.ingest_rate), query_all);
    let (h50, h99) = p50_p99(&hash_us);
    println!(
        "hash     {} pages: p50 {h50:>8.1} µs  p99 {h99:>8.1} µs  (baseline: what the proxy does)",
        args.query_pages
    );
    for (name, s) in [("query", &idle), ("query*", &busy.measured), ("query~", &paced.measured)] {
        let (p50, p99) = p50_p99(s);
        println!(
            "{name:<8} {} pages × {} targets: p50 {p50:>8.1} µs  p99 {p99:>8.1} µs  ({:.2}× / {:.2}× the hash)",
            args.query_pages,
            args.targets,
            p50 / h50,
            p99 / h99
        );
    }
    println!(
        "         (* while another thread ingests flat out, which reached {:.2} M blocks/s in parts of {COMMIT_PART_BLOCKS} \
         blocks; ~ while it ingests at {:.1} M blocks/s; {hits} of {} query prompts overlap some target)",
        busy.blocks_per_s / 1e6,
        args.ingest_rate / 1e6,
        queries.len()
    );

    // What a KV-aware prefill pick costs over a plain one.
    let index = Arc::try_unwrap(shared).expect("no other owner").into_inner();
    let costs = pick_costs(&index, &queries, &args);
    let ((p50, p99), (k50, k99)) = (p50_p99(&costs.plain), p50_p99(&costs.kv));
    println!(
        "pick     plain p50 {p50:>6.1} µs p99 {p99:>6.1} µs; with {} page hashes p50 {k50:>6.1} µs p99 {k99:>6.1} µs ({:.1}× / {:.1}×)",
        args.query_pages,
        k50 / p50,
        k99 / p99
    );
    let ((o50, o99), (b50, b99)) = (p50_p99(&costs.lookup), p50_p99(&costs.booking));
    println!(
        "         as control does it: overlaps outside the routing lock p50 {o50:>6.1} µs p99 {o99:>6.1} µs, then pick + release under it p50 {b50:>6.1} µs p99 {b99:>6.1} µs"
    );

    // Removal: every block, deepest first per request.
    let removals = removals(&stores);
    let mut index = index;
    let remove = time(|| {
        for (target, event) in &removals {
            index.apply(*target, event);
        }
    });
    println!(
        "remove   {:>10.0} blocks/s; index empty afterwards: {}",
        pages as f64 / remove.as_secs_f64(),
        index.stats().blocks == 0
    );
    Ok(())
}

/// The token ids of the first `--requests` trace requests.
fn load_prompts(args: &Args) -> anyhow::Result<Vec<Vec<u32>>> {
    let mut prompts = Vec::with_capacity(args.requests);
    for session in args.trace.open(Format::Mooncake)?.take(args.requests) {
        let session = session?;
        for turn in &session.turns {
            let mut tokens = Vec::with_capacity(turn.input_tokens as usize);
            for block in &turn.blocks {
                let left = (turn.input_tokens as usize - tokens.len()).min(BLOCK_TOKENS);
                tokens.extend((0..left as u64).map(|k| token(block.id, k)));
            }
            prompts.push(tokens);
        }
    }
    Ok(prompts)
}

fn token(block: u64, k: u64) -> u32 {
    let mut z = block.wrapping_mul(0x9e37_79b9_7f4a_7c15) ^ k.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z ^= z >> 31;
    (z % 151_552) as u32
}

/// The stores each target publishes: the pages it lacks, chained on the ones it holds.
fn events(prompts: &[Vec<u32>], args: &Args) -> Vec<Store> {
    let mut held: Vec<std::collections::HashSet<PageHash>> = vec![Default::default(); args.targets as usize];
    let mut out = Vec::new();
    for (i, p) in prompts.iter().enumerate() {
        let t = i % args.targets as usize;
        let hashes = args.page_hashes(p);
        let have = hashes.iter().take_while(|h| held[t].contains(h)).count();
        if have == hashes.len() {
            continue;
        }
        held[t].extend(hashes[have..].iter().copied());
        out.push(Store {
            target: TargetKey::from_index(t as u32),
            event: KvEvent::BlockStored {
                block_hashes: hashes[have..].iter().map(|h| h.0 ^ args.namespace).collect(),
                parent_block_hash: have.checked_sub(1).map(|i| hashes[i].0 ^ args.namespace),
                token_ids: p[have * args.page_size..hashes.len() * args.page_size]
                    .iter()
                    .map(|&t| u64::from(t))
                    .collect(),
                block_size: args.page_size as u32,
                medium: Medium::Gpu,
                cache_salt: args.cache_salt.clone(),
                lora_name: None,
            },
            pages: hashes.len() - have,
        });
    }
    out
}

/// One `BlockRemoved` per store, newest first (children before their parents).
fn removals(stores: &[Store]) -> Vec<(TargetKey, KvEvent)> {
    stores
        .iter()
        .rev()
        .filter_map(|s| match &s.event {
            KvEvent::BlockStored { block_hashes, .. } => Some((
                s.target,
                KvEvent::BlockRemoved {
                    block_hashes: block_hashes.iter().rev().copied().collect(),
                    medium: Medium::Gpu,
                },
            )),
            _ => None,
        })
        .collect()
}

/// What `measure` returned while another thread ingested, and the blocks a second it ingested.
struct UnderIngest<T> {
    measured: T,
    blocks_per_s: f64,
}

/// Runs `measure` while a second thread keeps applying `stores` to a spare target, as fast as it
/// can or paced to `rate` blocks a second.
fn under_ingest<T>(
    index: &Arc<SharedIndex>,
    stores: &[Store],
    rate: Option<f64>,
    measure: impl FnOnce() -> T,
) -> UnderIngest<T> {
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    std::thread::scope(|scope| {
        let (stop2, index2) = (stop.clone(), index.clone());
        let ingest = scope.spawn(move || {
            let spare = TargetKey::from_index(u32::MAX - 1);
            let (start, mut blocks) = (Instant::now(), 0usize);
            while !stop2.load(std::sync::atomic::Ordering::Relaxed) {
                for s in stores.iter().take(64) {
                    // As control's feed does it.
                    index2.ingest(spare, std::slice::from_ref(&s.event), || true);
                    blocks += s.pages;
                    if let Some(rate) = rate {
                        let due = start + Duration::from_secs_f64(blocks as f64 / rate);
                        std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    }
                }
                index2.clear(&[spare]);
            }
            blocks as f64 / start.elapsed().as_secs_f64()
        });
        let measured = measure();
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let blocks_per_s = ingest.join().expect("the ingest thread panicked");
        UnderIngest { measured, blocks_per_s }
    })
}

fn micros(f: impl FnOnce()) -> f64 {
    let t0 = Instant::now();
    f();
    t0.elapsed().as_secs_f64() * 1e6
}

/// The process's resident set, from `/proc/self/statm` (Linux); `None` elsewhere.
fn resident_bytes() -> Option<usize> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: usize = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4096)
}

fn time<T>(f: impl FnOnce() -> T) -> Duration {
    let t0 = Instant::now();
    std::hint::black_box(f());
    t0.elapsed()
}

/// Microseconds of `n` runs of `f(i)`.
fn samples(n: usize, mut f: impl FnMut(usize)) -> Vec<f64> {
    (0..n)
        .map(|i| {
            let t0 = Instant::now();
            f(i);
            t0.elapsed().as_secs_f64() * 1e6
        })
        .collect()
}

fn p50_p99(v: &[f64]) -> (f64, f64) {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    (v[v.len() / 2], v[(v.len() * 99 / 100).min(v.len() - 1)])
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::replay::trace::{Builtin, Source};

    #[test]
    fn without_a_trace_the_defaults_run_on_the_builtin_mooncake_trace() {
        let parsed = crate::Args::try_parse_from(["infera-bench", "kv-index"]).unwrap();
        let crate::Cmd::KvIndex(args) = parsed.command else { panic!("not kv-index") };
        assert_eq!(args.trace, Source::Builtin(Builtin::Mooncake));
        let prompts = super::load_prompts(&args).unwrap();
        let long = prompts.iter().filter(|p| p.len() >= args.query_pages * args.page_size).count();
        assert!(long > 0, "no prompt of {} pages for the default query", args.query_pages);
    }
}
