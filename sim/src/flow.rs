//! One data-plane request from admission to its last event, independent of the route's
//! wire shape. [`start`] validates and admits synchronously (so rejections are plain error
//! responses), then a task drives the request and sends [`FlowEvent`]s to the handler:
//!
//! - aggregated: prefill, then decode, relaying token counts;
//! - decode: long-poll the prefill's bootstrap listener for the room's KV, then decode;
//! - prefill: prefill (one token), publish the room, answer once the decode has pulled the KV.
//!
//! If the handler goes away (client disconnected), the task stops and drops its [`Ticket`]
//! and room claim: the engine slot is freed and a waiting decode fails.

use std::sync::Arc;

use infera_proto::types::Api;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::api::input::GenRequest;
use crate::app::App;
use crate::disaggregation::DisaggregationMode;
use crate::engine::{End, Progress, Ticket};
use crate::error::ApiError;
use crate::faults::RequestFaults;
use crate::prefix_cache::PromptPages;
use crate::ranks::{self, RankRequest};
use crate::request_log::{Entry, Outcome, Seq};
use crate::rooms::{KvInfo, RoomClaim};
use crate::scheduler::{Admission, Work};
use crate::stop::StopScanner;

/// `bootstrap_host` of SGLang's health-check generations: no peer, no transfer.
pub const FAKE_BOOTSTRAP_HOST: &str = "2.2.2.2";

/// What the handler hears.
#[derive(Debug)]
pub enum FlowEvent {
    /// More tokens (cumulative count).
    Tokens {
        /// Tokens so far.
        tokens: u32,
        /// Cached prompt tokens.
        cached: u32,
    },
    /// The end, and why.
    Done {
        /// Tokens in total.
        tokens: u32,
        /// Cached prompt tokens.
        cached: u32,
        /// How it ended.
        finish: Finish,
    },
    /// Failed after admission.
    Failed(ApiError),
    /// The die fault: close the connection abruptly.
    Died,
}

/// How a request ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Finish {
    /// All tokens generated (`length`).
    Length,
    /// Aborted before all tokens were generated (`abort`).
    Abort,
    /// A stop string matched (`stop`, with the string).
    Stop(String),
}

/// An admitted request, as its handler sees it.
#[derive(Debug)]
pub struct Run {
    /// Request id.
    pub rid: String,
    /// DP rank used.
    pub rank: u32,
    /// Prompt tokens.
    pub prompt_tokens: u32,
    /// Whether this runs on a PD prefill (SGLang reports `length: 0`).
    pub prefill_leg: bool,
    /// The prompt ids whose logprobs were asked for (`logprob_start_len`) from the first, and
    /// its position; empty on a PD decode, which computes no prompt (SGLang's decode leaves
    /// `input_token_logprobs` empty: python/sglang/srt/disaggregation/decode.py).
    pub prompt_logprobs: PromptSpan,
    /// Events, ending with `Done`, `Failed` or `Died`.
    pub events: mpsc::Receiver<FlowEvent>,
    /// Arrival (for `e2e_latency`).
    pub started: Instant,
}

/// Prompt positions whose logprobs a request asked for.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PromptSpan {
    /// The first position (`logprob_start_len`).
    pub from: u32,
    /// The prompt's ids from there.
    pub ids: Vec<u32>,
}

/// The decode's bootstrap peer.
#[derive(Debug, Clone)]
struct Peer {
    host: String,
    port: u16,
    room: u64,
    expect_rank: Option<u32>,
}

/// Validates and admits `req`; the request runs in its own task from here on.
pub fn start(app: &Arc<App>, route: Api, req: GenRequest) -> Result<Run, ApiError> {
    let started = Instant::now();
    let rid = req.rid.clone().unwrap_or_else(|| app.new_rid());
    let prompt_tokens = req.prompt.len() as u32;
    let prompt_logprobs = match req.sampling.logprobs.and_then(|l| l.prompt_from) {
        Some(from) if app.config.mode != DisaggregationMode::Decode => {
            let from = from.min(prompt_tokens);
            PromptSpan { from, ids: req.prompt[from as usize..].to_vec() }
        }
        _ => PromptSpan::default(),
    };
    let seq = app.log.push(Entry {
        rid: rid.clone(),
        path: route.path().to_owned(),
        room: req.pd.bootstrap_room,
        routed_dp_rank: req.pd.routed_dp_rank,
        disagg_prefill_dp_rank: req.pd.disagg_prefill_dp_rank,
        bootstrap_host: req.pd.bootstrap_host.clone(),
        bootstrap_port: req.pd.bootstrap_port,
        prompt_tokens,
        traceparent: req.trace.traceparent.clone(),
        tracestate: req.trace.tracestate.clone(),
        x_request_id: req.trace.x_request_id.clone(),
        authorization: req.trace.authorization,
        ..Entry::default()
    });
    let job = match admit(app, &rid, req, started) {
        Ok(job) => job,
        Err(e) => {
            app.log.update(seq, |entry| entry.outcome = Outcome::Failed);
            return Err(e);
        }
    };
    app.log.update(seq, |entry| entry.dp_rank_used = Some(job.rank));
    let (tx, events) = mpsc::channel(64);
    let prefill_leg = app.config.mode == DisaggregationMode::Prefill;
    let run = Run { rid, rank: job.rank, prompt_tokens, prefill_leg, prompt_logprobs, events, started };
    tokio::spawn(drive(job, tx, seq, started));
    Ok(run)
}

fn admit(app: &Arc<App>, rid: &str, req: GenRequest, started: Instant) -> Result<Job, ApiError> {
    let mode = app.config.mode;
    let pd = &req.pd;
    let fake = pd.bootstrap_host.as_deref() == Some(FAKE_BOOTSTRAP_HOST);
    let peer = match (mode, &pd.bootstrap_host, pd.bootstrap_room) {
        (DisaggregationMode::Null, _, _) => None,
        _ if fake => None,
        (_, Some(host), Some(room)) => Some(Peer {
            host: host.clone(),
            port: pd.bootstrap_port.unwrap_or(app.config.bootstrap_port),
            room,
            expect_rank: pd.disagg_prefill_dp_rank.and_then(|r| u32::try_from(r).ok()),
        }),
        _ => return Err(ApiError::MissingBootstrap { rid: rid.to_owned() }),
    };
    let claim = match (&peer, mode) {
        (Some(peer), DisaggregationMode::Prefill) => Some(app.rooms.claim(peer.room)?),
        _ => None,
    };
    let failed = |e: ApiError| {
        if let Some(claim) = &claim {
            claim.fail(e.to_string());
        }
        e
    };
    let RequestFaults::Run { stall_after, die_after } = app.faults.admit() else {
        return Err(failed(ApiError::Injected));
    };
    let rank_req = RankRequest {
        routed: pd.routed_dp_rank,
        room: pd.bootstrap_room,
        has_disagg_prefill_rank: pd.disagg_prefill_dp_rank.is_some(),
    };
    let rank =
        ranks::choose(app.config.ranks, mode, app.config.rank_choice, rank_req, || app.next_round_robin())
            .map_err(|e| failed(e.into()))?;
    let (max_new_tokens, work) = match mode {
        DisaggregationMode::Null => {
            (req.max_new_tokens, Work::Prefill { pages: pages(app, &req), hold: false })
        }
        DisaggregationMode::Prefill => {
            (req.max_new_tokens.min(1), Work::Prefill { pages: pages(app, &req), hold: claim.is_some() })
        }
        DisaggregationMode::Decode => (req.max_new_tokens, Work::AwaitKv),
    };
    let admission = Admission {
        rank: rank as usize,
        prompt_tokens: req.prompt.len() as u32,
        max_new_tokens,
        stall_after,
        work,
    };
    let ticket = app.engine.submit(rid, admission);
    let peer = peer.filter(|_| mode == DisaggregationMode::Decode);
    let decode_without_peer = mode == DisaggregationMode::Decode && peer.is_none();
    Ok(Job {
        app: app.clone(),
        ticket,
        claim,
        peer,
        decode_without_peer,
        rank,
        prompt_tokens: req.prompt.len() as u32,
        want: max_new_tokens,
        die_after,
        deadline: started + app.config.bootstrap_wait(),
        sent: 0,
        cached: 0,
        stop: StopScanner::new(&req.sampling.stop, app.seed, crate::tokens::hash_str(rid)),
    })
}

fn pages(app: &App, req: &GenRequest) -> PromptPages {
    PromptPages::new(&req.prompt, app.config.page_size, app.kv_events.is_some(), req.cache_salt.as_deref())
}

/// The consumer went away.
#[derive(Debug)]
struct Gone;

/// One admitted request's state in its task.
#[derive(Debug)]
struct Job {
    app: Arc<App>,
    ticket: Ticket,
    /// PD prefill leg: the room.
    claim: Option<RoomClaim>,
    /// PD decode leg: where the KV comes from.
    peer: Option<Peer>,
    /// PD decode health check: no transfer.
    decode_without_peer: bool,
    rank: u32,
    prompt_tokens: u32,
    want: u32,
    die_after: Option<u32>,
    deadline: Instant,
    sent: u32,
    cached: u32,
    /// The request's stop strings, scanned over its output.
    stop: Option<StopScanner>,
}

async fn drive(mut job: Job, tx: mpsc::Sender<FlowEvent>, seq: Seq, started: Instant) {
    let outcome = tokio::select! {
        outcome = job.run(&tx) => outcome.unwrap_or(Outcome::ClientGone),
        _ = tx.closed() => Outcome::ClientGone,
    };
    let (sent, cached) = (job.sent, job.cached);
    let engine_ms = started.elapsed().as_secs_f64() * 1e3;
    job.app.log.update(seq, |e| {
        e.outcome = outcome;
        e.engine_ms = Some(engine_ms);
        e.completion_tokens = sent;
        e.cached_tokens = cached;
    });
}

impl Job {
    async fn run(&mut self, tx: &mpsc::Sender<FlowEvent>) -> Result<Outcome, Gone> {
        if (self.peer.is_some() || self.decode_without_peer) && !self.preallocated().await {
            return self.aborted(tx).await;
        }
        if let Some(peer) = self.peer.clone() {
            let left = self.deadline.saturating_duration_since(Instant::now());
            let pull = self.app.kv_client.pull((&peer.host, peer.port), peer.room, peer.expect_rank, left);
            let pulled = tokio::select! {
                pulled = pull => pulled,
                _ = ended(&mut self.ticket) => return self.aborted(tx).await,
            };
            match pulled {
                Ok(info) => {
                    self.cached = info.cached_tokens;
                    self.ticket.kv_arrived(info.cached_tokens);
                }
                Err(e) => return self.fail(tx, e.into()).await,
            }
        } else if self.decode_without_peer {
            self.ticket.kv_arrived(0);
        }
        match self.claim.is_some() {
            true => self.prefill_leg(tx).await,
            false => self.relay(tx).await,
        }
    }

    /// Decode: waits in the rank's prealloc queue until its KV is reserved (SGLang's decode
    /// sends the prefill its KV destination only then); false if it left the engine instead.
    async fn preallocated(&mut self) -> bool {
        let mut p = self.ticket.progress();
        loop {
            if p.preallocated {
                return true;
            }
            if p.end.is_some() {
                return false;
            }
            p = self.ticket.next().await;
        }
    }

    /// Relays progress until the request ends (aggregated, decode, health-check prefill).
    async fn relay(&mut self, tx: &mpsc::Sender<FlowEvent>) -> Result<Outcome, Gone> {
        let mut p = self.ticket.progress();
        loop {
            self.cached = p.cached_tokens.unwrap_or(self.cached);
            if let Some(k) = self.die_after.filter(|&k| p.tokens >= k) {
                if k > self.sent {
                    self.sent = k;
                    send(tx, FlowEvent::Tokens { tokens: k, cached: self.cached }).await?;
                }
                send(tx, FlowEvent::Died).await?;
                return Ok(Outcome::Failed);
            }
            match p.end {
                Some(End::Finished) => {
                    self.sent = p.tokens;
                    if let Some(outcome) = self.stopped(tx, p.tokens).await? {
                        return Ok(outcome);
                    }
                    let done =
                        FlowEvent::Done { tokens: p.tokens, cached: self.cached, finish: Finish::Length };
                    send(tx, done).await?;
                    return Ok(Outcome::Ok);
                }
                Some(End::Aborted) => return self.aborted(tx).await,
                None if p.tokens > self.sent => {
                    if let Some(outcome) = self.stopped(tx, p.tokens).await? {
                        return Ok(outcome);
                    }
                    self.sent = p.tokens;
                    send(tx, FlowEvent::Tokens { tokens: p.tokens, cached: self.cached }).await?;
                }
                None => {}
            }
            p = self.ticket.next().await;
        }
    }

    /// PD prefill: prefill, publish the KV, answer when the decode has it.
    async fn prefill_leg(&mut self, tx: &mpsc::Sender<FlowEvent>) -> Result<Outcome, Gone> {
        let Some(mut claim) = self.claim.take() else { return Ok(Outcome::Failed) };
        if self.die_after == Some(0) {
            claim.fail("the prefill died (die fault)");
            send(tx, FlowEvent::Died).await?;
            return Ok(Outcome::Failed);
        }
        let mut p = self.ticket.progress();
        while p.cached_tokens.is_none() || p.tokens < self.want {
            if p.end.is_some() {
                claim.fail("the prefill request was aborted");
                return self.aborted(tx).await;
            }
            p = self.ticket.next().await;
        }
        self.cached = p.cached_tokens.unwrap_or(0);
        let room = claim.room();
        claim.prefilled(KvInfo {
            room,
            prompt_tokens: self.prompt_tokens,
            cached_tokens: self.cached,
            prefill_dp_rank: self.rank,
        });
        let result = tokio::select! {
            r = claim.transferred() => r.map_err(|reason| ApiError::Transfer { room, reason }),
            _ = ended(&mut self.ticket) => {
                claim.fail("the prefill request was aborted");
                return self.aborted(tx).await;
            }
            _ = tokio::time::sleep_until(self.deadline) => {
                let ms = self.app.config.bootstrap_timeout.as_millis();
                claim.fail(format!("the prefill timed out after {ms} ms"));
                Err(ApiError::PrefillTimeout { room, ms })
            }
        };
        self.ticket.finish();
        match result {
            Ok(()) if self.die_after.is_some_and(|k| p.tokens >= k) => {
                send(tx, FlowEvent::Died).await?;
                Ok(Outcome::Failed)
            }
            Ok(()) => {
                self.sent = p.tokens;
                send(tx, FlowEvent::Done { tokens: p.tokens, cached: self.cached, finish: Finish::Length })
                    .await?;
                Ok(Outcome::Ok)
            }
            Err(e) => self.fail(tx, e).await,
        }
    }

    async fn aborted(&mut self, tx: &mpsc::Sender<FlowEvent>) -> Result<Outcome, Gone> {
        send(tx, FlowEvent::Done { tokens: self.sent, cached: self.cached, finish: Finish::Abort }).await?;
        Ok(Outcome::Aborted)
    }

    /// Ends the request if its output up to `tokens` contains a stop string: it leaves the
    /// engine and finishes with `stop` at the token that completed the match.
    async fn stopped(&mut self, tx: &mpsc::Sender<FlowEvent>, tokens: u32) -> Result<Option<Outcome>, Gone> {
        let Some(hit) = self.stop.as_mut().and_then(|s| s.advance(tokens)) else { return Ok(None) };
        self.ticket.finish();
        self.sent = hit.tokens;
        let done =
            FlowEvent::Done { tokens: hit.tokens, cached: self.cached, finish: Finish::Stop(hit.matched) };
        send(tx, done).await?;
        Ok(Some(Outcome::Ok))
    }

    async fn fail(&mut self, tx: &mpsc::Sender<FlowEvent>, e: ApiError) -> Result<Outcome, Gone> {
        tracing::warn!(error = %e, "request failed");
        send(tx, FlowEvent::Failed(e)).await?;
        Ok(Outcome::Failed)
    }
}

async fn send(tx: &mpsc::Sender<FlowEvent>, event: FlowEvent) -> Result<(), Gone> {
    tx.send(event).await.map_err(|_| Gone)
}

/// Resolves once the request has left the engine (aborted).
async fn ended(ticket: &mut Ticket) -> Progress {
    loop {
        let p = ticket.next().await;
        if p.end.is_some() {
            return p;
        }
    }
}
