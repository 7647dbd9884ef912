//! The pooling routes of SGLang 0.5.23 (python/sglang/srt/entrypoints/http_server.py):
//! `POST /v1/embeddings`, `POST /v1/classify`, `POST|PUT /v1/rerank`, answered in one JSON body
//! in the shapes of python/sglang/srt/entrypoints/openai/serving_embedding.py,
//! serving_classify.py and serving_rerank.py.
//!
//! Every input of a request (each string or token list; each document of a rerank) runs in the
//! engine as one prefill-only request, as SGLang sends it to its scheduler: `max_new_tokens = 0`
//! (`EmbeddingReqInput.normalize_batch_and_arguments`, python/sglang/srt/managers/io_struct.py),
//! so it waits in the prefill queue, is prefilled chunk by chunk like any prompt, shows in
//! `/v1/loads` and `/sim/requests` (with the client's `rid`), can be aborted, and leaves the
//! engine when its prefill ends, emitting no token. The numbers it yields come from [`heads`]:
//! deterministic in the input, never computed.

mod classify;
mod embeddings;
mod heads;
mod input;
mod rerank;

use std::sync::Arc;

use hyper::body::Incoming;
use hyper::{Request, Response, StatusCode};
use infera_proto::types::Api;
use serde_json::{Value, json};

use super::input::{GenRequest, InputError, PdFields, Sampling, TraceHeaders};
use crate::app::App;
use crate::error::ApiError;
use crate::flow::{self, Finish, FlowEvent, Run};
use crate::server::{self, Body};

/// Largest request body read.
const BODY_LIMIT: usize = 64 << 20;

/// Serves one pooling request on `route` (`Embeddings`, `Classify` or `Rerank`).
pub(super) async fn handle(app: Arc<App>, route: Api, req: Request<Incoming>) -> Response<Body> {
    let trace = TraceHeaders::of(req.headers());
    let body = match server::read_body(req, BODY_LIMIT).await {
        Ok(b) => b,
        Err(e) => return ApiError::Input(InputError::Body(e)).response(route),
    };
    let value: Value = match serde_json::from_slice(&body) {
        Ok(v @ Value::Object(_)) => v,
        Ok(_) => return ApiError::Input(InputError::NotObject).response(route),
        Err(e) => return ApiError::Input(InputError::Json(e)).response(route),
    };
    let answer = match route {
        Api::Embeddings => embeddings::serve(&app, &value, &trace).await,
        Api::Classify => classify::serve(&app, &value, &trace).await,
        Api::Rerank => rerank::serve(&app, &value, &trace).await,
        // The generation routes go to `super::data`.
        Api::ChatCompletions | Api::Completions | Api::Generate | Api::Responses | Api::Messages => {
            Err(Failure::Error(ApiError::NotGenerative))
        }
    };
    match answer {
        Ok(body) => server::json(StatusCode::OK, &body),
        Err(Failure::Error(e)) => e.response(route),
        // Let hyper's connection break as it does for a generation request.
        Err(Failure::Died) => server::broken(StatusCode::OK),
    }
}

/// Why a pooling request has no body to answer with.
#[derive(Debug)]
enum Failure {
    /// An error response.
    Error(ApiError),
    /// The die fault, or the engine dropped the request: the connection breaks.
    Died,
}

impl From<ApiError> for Failure {
    fn from(e: ApiError) -> Self {
        Self::Error(e)
    }
}

impl From<InputError> for Failure {
    fn from(e: InputError) -> Self {
        Self::Error(ApiError::Input(e))
    }
}

/// One input of a pooling request: what the engine prefills.
#[derive(Debug, Clone, PartialEq)]
struct Item {
    /// Prompt token ids.
    prompt: Vec<u32>,
    /// The client's `rid` for it.
    rid: Option<String>,
}

/// One input after its prefill.
#[derive(Debug, Clone, PartialEq)]
struct Pooled {
    /// Its request id (the client's, or a fresh one).
    rid: String,
    /// Prompt tokens.
    prompt_tokens: u32,
    /// The DP rank it ran on.
    rank: u32,
    /// Seconds from arrival to the end of its prefill.
    e2e_latency: f64,
    /// Whether it was aborted (`/abort_request`) instead of prefilled.
    aborted: bool,
}

/// What the route asks of the served model.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Needs {
    /// A pooling model (`--is-embedding`): embeddings, classify, a cross-encoder rerank.
    PoolingModel,
    /// Either kind (a rerank picks its path by the model).
    AnyModel,
}

/// SGLang's per-input checks before admission, in its order (`_validate_one_request` in
/// python/sglang/srt/managers/tokenizer_manager.py): the length, then whether the model pools,
/// then the route's own (`extra`, e.g. the Matryoshka dimensions).
fn check(
    app: &App,
    route: Api,
    items: &[Item],
    needs: Needs,
    extra: impl Fn() -> Result<(), ApiError>,
) -> Result<(), ApiError> {
    let sampling = Sampling::of(route, &Value::Null);
    for item in items {
        sampling
            .check_length(item.prompt.len(), app.config.context_length)
            .map_err(|m| ApiError::Input(InputError::Invalid(m)))?;
        if needs == Needs::PoolingModel && app.config.generates() {
            return Err(ApiError::NotEmbedding);
        }
        extra()?;
    }
    Ok(())
}

/// Runs `items` through the engine together, as SGLang's scheduler gets a batch's inputs, and
/// waits for every one to leave it.
async fn run(
    app: &Arc<App>,
    route: Api,
    items: Vec<Item>,
    trace: &TraceHeaders,
) -> Result<Vec<Pooled>, Failure> {
    let mut runs = Vec::with_capacity(items.len());
    for item in items {
        let request = GenRequest {
            rid: item.rid,
            prompt: item.prompt,
            max_new_tokens: 0,
            sampling: Sampling::of(route, &Value::Null),
            stream: false,
            include_usage: false,
            model: None,
            cache_salt: None,
            pd: PdFields::default(),
            trace: trace.clone(),
        };
        // A refusal drops the runs started so far: their requests leave the engine.
        runs.push(flow::start(app, route, request)?);
    }
    let mut pooled = Vec::with_capacity(runs.len());
    for run in runs {
        pooled.push(wait(run).await?);
    }
    Ok(pooled)
}

/// The end of one input's run.
async fn wait(mut run: Run) -> Result<Pooled, Failure> {
    while let Some(event) = run.events.recv().await {
        match event {
            FlowEvent::Tokens { .. } => {}
            FlowEvent::Done { finish, .. } => {
                return Ok(Pooled {
                    rid: run.rid,
                    prompt_tokens: run.prompt_tokens,
                    rank: run.rank,
                    e2e_latency: run.started.elapsed().as_secs_f64(),
                    aborted: finish == Finish::Abort,
                });
            }
            FlowEvent::Failed(e) => return Err(Failure::Error(e)),
            FlowEvent::Died => return Err(Failure::Died),
        }
    }
    Err(Failure::Died)
}

/// SGLang's `UsageInfo` of a pooling answer: the prompt tokens of every input, no completion.
fn usage(pooled: &[Pooled]) -> Value {
    let prompt: u64 = pooled.iter().map(|p| u64::from(p.prompt_tokens)).sum();
    json!({
        "prompt_tokens": prompt,
        "total_tokens": prompt,
        "completion_tokens": 0,
        "prompt_tokens_details": null,
        "reasoning_tokens": 0,
        "completion_tokens_details": null,
    })
}

/// An input's `meta_info` as SGLang's tokenizer manager writes it for a pooling output
/// (`_handle_batch_output`): its prefill ended at `max_new_tokens = 0`.
fn meta_info(app: &App, p: &Pooled) -> Value {
    json!({
        "id": p.rid,
        "finish_reason": {"type": "length", "length": 0},
        "prompt_tokens": p.prompt_tokens,
        "weight_version": "default",
        "num_retractions": 0,
        // The scheduler reports a rank only when there are several (`dp_ranks`).
        "dp_rank": if app.config.ranks > 1 { json!(p.rank) } else { Value::Null },
        "e2e_latency": p.e2e_latency,
    })
}
