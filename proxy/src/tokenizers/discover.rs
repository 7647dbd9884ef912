//! Tokenizers found from the workers: every second, each listed model without a tokenizer from
//! the command line, never asked (or not found for [`RETRY`]), has its first listed worker asked
//! for SGLang's `GET /model_info` (`/get_model_info` before 0.5.23 renamed it:
//! python/sglang/srt/entrypoints/http_server.py). Its `tokenizer_path` (else `model_path`) is
//! loaded, on the blocking pool, when it is a `tokenizer.json` or a directory holding one on this
//! host; a Hugging Face hub id or a path on the worker's host only is not, and the model's
//! prompts keep routing on load. The outcome is logged the first time per model.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::Request;
use serde_json::Value;
use tokio::sync::watch;

use super::{Loaded, Source, Tokenizers, tokenizer_json};
use crate::targets::Endpoint;
use crate::upstream::{Upstreams, worker_json};

/// How long a model whose workers gave no tokenizer waits before they are asked again.
pub const RETRY: Duration = Duration::from_secs(60);

/// Why a model got no tokenizer from its worker.
#[derive(Debug, thiserror::Error)]
pub enum NotFound {
    /// The worker did not answer `/model_info` usably.
    #[error("worker {worker}: /model_info: {reason}")]
    NoAnswer {
        /// The worker asked.
        worker: String,
        /// What went wrong.
        reason: String,
    },
    /// The answer names no path.
    #[error("/model_info names neither tokenizer_path nor model_path")]
    NoPath,
    /// The path is not a tokenizer on this host (a hub id, or the worker's own disk).
    #[error("{0}: no tokenizer.json there on this host")]
    NotHere(PathBuf),
    /// The files do not load.
    #[error(transparent)]
    Load(#[from] infera_tokenize::LoadError),
}

/// Asks for the due models' tokenizers every second until `stop` fires.
pub fn spawn(tokenizers: Arc<Tokenizers>, up: Upstreams, mut stop: watch::Receiver<()>) {
    tokio::spawn(async move {
        loop {
            discover_due(&tokenizers, &up).await;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_secs(1)) => {}
                _ = stop.changed() => return,
            }
        }
    });
}

async fn discover_due(tokenizers: &Arc<Tokenizers>, up: &Upstreams) {
    let list = up.link.targets();
    for model in list.models() {
        if !tokenizers.due(&model, RETRY) {
            continue;
        }
        let Some(endpoint) = list.workers_of(&model).into_iter().next() else { continue };
        let first = !tokenizers.asked(&model);
        match find(tokenizers, up, &endpoint).await {
            Ok(loaded) => {
                if let Source::Worker { worker, path } = &loaded.source {
                    tracing::info!(
                        model = model.as_str(),
                        %worker,
                        path = %path.display(),
                        encoder = ?loaded.tokenizer.encoder(),
                        "tokenizer: loaded from the path the model's worker names"
                    );
                }
                tokenizers.found(&model, loaded);
            }
            Err(why) => {
                if first {
                    tracing::info!(model = model.as_str(), %why, "tokenizer: none for this model; its prompts route on load");
                } else {
                    tracing::debug!(model = model.as_str(), %why, "tokenizer: still none for this model");
                }
                tokenizers.missing(&model, Instant::now());
            }
        }
    }
}

/// `endpoint`'s tokenizer, from the path its `/model_info` names.
async fn find(tokenizers: &Tokenizers, up: &Upstreams, endpoint: &Endpoint) -> Result<Loaded, NotFound> {
    let no_answer = |reason: String| NotFound::NoAnswer { worker: endpoint.worker_id.to_string(), reason };
    let info = match model_info(up, endpoint, "/model_info").await {
        Ok(info) => info,
        Err(_) => model_info(up, endpoint, "/get_model_info").await.map_err(no_answer)?,
    };
    let path = local_tokenizer(&info)?;
    let settings = tokenizers.settings();
    let at = path.clone();
    let tokenizer = tokio::task::spawn_blocking(move || settings.load(&at, None))
        .await
        .map_err(|e| no_answer(format!("loading the tokenizer failed: {e}")))??;
    let source = Source::Worker { worker: endpoint.worker_id.clone(), path };
    Ok(Loaded { tokenizer: Arc::new(tokenizer), source })
}

/// The `tokenizer.json` on this host that a `/model_info` answer names: its `tokenizer_path`
/// (SGLang's `--tokenizer-path`, which defaults to the model path), else its `model_path`.
pub fn local_tokenizer(info: &Value) -> Result<PathBuf, NotFound> {
    let named = |key: &str| info.get(key).and_then(Value::as_str).filter(|p| !p.is_empty());
    let path = named("tokenizer_path").or_else(|| named("model_path")).ok_or(NotFound::NoPath)?;
    let json = tokenizer_json(std::path::Path::new(path));
    if json.is_file() { Ok(json) } else { Err(NotFound::NotHere(PathBuf::from(path))) }
}

/// `endpoint`'s answer to `GET path`.
async fn model_info(up: &Upstreams, endpoint: &Endpoint, path: &str) -> Result<Value, String> {
    let req = Request::get(format!("{}{path}", endpoint.url))
        .body(http_body_util::Full::new(Bytes::new()))
        .map_err(|e| e.to_string())?;
    worker_json(&up.client, req).await
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_tokenizer_path_a_worker_names_is_used_when_it_is_on_this_host() {
        let dir = tempfile::tempdir().unwrap();
        let json_path = infera_tokenize::fixture::write_model_dir(dir.path(), 300).unwrap();
        let d = dir.path().to_str().unwrap();
        let j = json_path.to_str().unwrap();
        assert_eq!(
            local_tokenizer(&json!({"tokenizer_path": d, "model_path": "org/model"})).unwrap(),
            json_path
        );
        assert_eq!(local_tokenizer(&json!({"tokenizer_path": j})).unwrap(), json_path);
        assert_eq!(local_tokenizer(&json!({"tokenizer_path": null, "model_path": d})).unwrap(), json_path);
        // A hub id, or a path only the worker has: none.
        let hub = local_tokenizer(&json!({"tokenizer_path": "deepseek-ai/DeepSeek-V3", "model_path": d}));
        assert!(
            matches!(hub, Err(NotFound::NotHere(p)) if p == std::path::Path::new("deepseek-ai/DeepSeek-V3"))
        );
        let empty = tempfile::tempdir().unwrap();
        let elsewhere = local_tokenizer(&json!({"model_path": empty.path().to_str().unwrap()}));
        assert!(matches!(elsewhere, Err(NotFound::NotHere(_))));
        assert!(matches!(local_tokenizer(&json!({"served_model_name": "m"})), Err(NotFound::NoPath)));
    }
}
