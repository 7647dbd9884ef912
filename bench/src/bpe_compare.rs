//! BPE implementations side by side: the proxy's encoder (Hugging Face `tokenizers`, as SGLang's
//! Python wheels) against `kitoken`, a faster BPE that reads the same `tokenizer.json`. For each
//! tokenizer file: are the ids identical on every prompt-sized piece of a corpus (plain text, and
//! text with the tokenizer's special tokens between pieces), and how fast each encodes, in MB/s,
//! measured alternately in the same run; and what the proxy's `Tokenizer::load` costs with each
//! encoder (the fast one is checked against `tokenizers` on a probe at load) and which it chose.
//!
//! The tokenizers: the suite's fixture (a byte-level BPE trained at start, ChatML specials) and
//! every `--tokenizer` file, e.g. DeepSeek's `tokenizer.json` as the PyPI `litellm` wheel ships it
//! (manual/features/kv_aware_routing.md says how to get it). The corpus: this repository's manual
//! and sources, or `--corpus` folders.

use std::path::{Path, PathBuf};
use std::time::Instant;

/// Bytes per prompt-sized piece of the corpus.
const PIECE: usize = 8192;

#[derive(clap::Args, Debug)]
pub(crate) struct Args {
    /// `tokenizer.json` files to compare on, besides the fixture.
    #[arg(long, env = "INFERA_BENCH_TOKENIZER", value_delimiter = ',')]
    tokenizer: Vec<PathBuf>,
    /// Folders whose files make the corpus (default: the repository's manual and sources).
    #[arg(long, env = "INFERA_BENCH_CORPUS", value_delimiter = ',')]
    corpus: Vec<PathBuf>,
    /// Timed passes over the corpus per implementation.
    #[arg(long, env = "INFERA_BENCH_ROUNDS", default_value_t = 3)]
    rounds: usize,
}

/// What one file gave.
struct Compared {
    pieces: usize,
    tokens: usize,
    different: usize,
    first_difference: Option<String>,
}

pub(crate) fn run(args: Args) -> anyhow::Result<()> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let folders = if args.corpus.is_empty() {
        ["manual", "proxy/src", "control/src", "sim/src", "launcher/src"].map(|d| root.join(d)).to_vec()
    } else {
        args.corpus.clone()
    };
    let text = corpus(&folders);
    let fixture = tempfile::tempdir()?;
    let mut files = vec![infera_tokenize::fixture::write_model_dir(fixture.path(), 4_000)?];
    files.extend(args.tokenizer.iter().cloned());
    println!(
        "BPE encoders on {:.1} MB of {} (pieces of {PIECE} bytes)",
        text.len() as f64 / 1e6,
        folders.len()
    );
    for file in files {
        let hf = tokenizers::Tokenizer::from_file(&file)
            .map_err(|e| anyhow::anyhow!("{}: {e}", file.display()))?;
        let ki = kitoken::Kitoken::from_tokenizers_file(&file)
            .map_err(|e| anyhow::anyhow!("{}: {e:?}", file.display()))?;
        let specials: Vec<String> =
            hf.get_added_tokens_decoder().values().map(|t| t.content.clone()).collect();
        let plain = pieces(&text, &[]);
        let with_specials = pieces(&text, &specials);
        println!("\n{}", file.display());
        let started = Instant::now();
        let reference =
            infera_tokenize::Tokenizer::load_with(&file, None, infera_tokenize::EncoderChoice::Reference)?;
        let reference_ms = started.elapsed().as_secs_f64() * 1e3;
        drop(reference);
        let started = Instant::now();
        let proxy = infera_tokenize::Tokenizer::load(&file, None)?;
        println!(
            "  the proxy's load: {reference_ms:.0} ms with tokenizers alone, {:.0} ms with kitoken and its probe: {:?}",
            started.elapsed().as_secs_f64() * 1e3,
            proxy.encoder()
        );
        for (what, pieces) in [("plain text", &plain), ("with special tokens", &with_specials)] {
            let c = compare(&hf, &ki, pieces)?;
            println!(
                "  {what}: {} pieces, {} tokens: identical ids in {}, different in {}{}",
                c.pieces,
                c.tokens,
                c.pieces - c.different,
                c.different,
                c.first_difference.map(|d| format!(" (first: {d})")).unwrap_or_default()
            );
        }
        for round in 0..args.rounds {
            let hf_s = time(|p| drop(hf.encode(p, false)), &plain);
            let ki_s = time(|p| drop(ki.encode(p, true)), &plain);
            let mb = text.len() as f64 / 1e6;
            println!(
                "  round {round}: tokenizers {:.2} MB/s, kitoken {:.2} MB/s: kitoken takes {:.3}× the time",
                mb / hf_s,
                mb / ki_s,
                ki_s / hf_s
            );
        }
    }
    Ok(())
}

fn compare(hf: &tokenizers::Tokenizer, ki: &kitoken::Kitoken, pieces: &[String]) -> anyhow::Result<Compared> {
    let mut c = Compared { pieces: pieces.len(), tokens: 0, different: 0, first_difference: None };
    for piece in pieces {
        let a = hf.encode(piece.as_str(), false).map_err(|e| anyhow::anyhow!("{e}"))?.get_ids().to_vec();
        let b: Vec<u32> = ki.encode(piece, true).map_err(|e| anyhow::anyhow!("{e:?}"))?;
        c.tokens += a.len();
        if a != b {
            c.different += 1;
            let at = a.iter().zip(&b).position(|(x, y)| x != y).unwrap_or(a.len().min(b.len()));
            c.first_difference.get_or_insert_with(|| {
                format!(
                    "token {at}: {:?} vs {:?}",
                    &a[at..(at + 4).min(a.len())],
                    &b[at..(at + 4).min(b.len())]
                )
            });
        }
    }
    Ok(c)
}

fn time(encode: impl Fn(&str), pieces: &[String]) -> f64 {
    let t = Instant::now();
    for piece in pieces {
        encode(std::hint::black_box(piece));
    }
    t.elapsed().as_secs_f64()
}

/// The corpus cut into pieces of about [`PIECE`] bytes (on character boundaries), each followed
/// by one of `specials` in turn when there are any.
fn pieces(text: &str, specials: &[String]) -> Vec<String> {
    let mut out = Vec::new();
    let mut start = 0;
    while start < text.len() {
        let mut end = (start + PIECE).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        let mut piece = text[start..end].to_owned();
        if !specials.is_empty() {
            piece.push_str(&specials[out.len() % specials.len()]);
        }
        out.push(piece);
        start = end;
    }
    out
}

/// Every file under `folders`, in path order, that reads as UTF-8.
fn corpus(folders: &[PathBuf]) -> String {
    fn walk(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() { walk(&path, out) } else { out.push(path) }
        }
    }
    let mut files = Vec::new();
    for folder in folders {
        walk(folder, &mut files);
    }
    files.sort();
    files.iter().filter_map(|f| std::fs::read_to_string(f).ok()).collect()
}
