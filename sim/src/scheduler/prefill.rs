//! Prefill batches: a rank runs one at a time, a chunk of at most `--chunked-prefill-size` new
//! tokens from the request it was in the middle of and then its queue, timed by
//! [`timing::prefill_batch_ms`]; its end puts the computed pages in the rank's prefix cache.
//! Under shortest-prefill-first the request in the middle of its prefill leaves room in the
//! chunk for the shorter prompts waiting ([`chunk_limit`]).

use std::time::Duration;

use infera_kv::hash::PageHash;

use super::{Batch, Event, Phase, QueueOrder, Req, Scheduler};
use crate::prefix_cache::PrefixCache;
use crate::timing;

impl Scheduler {
    /// Starts `rank`'s next prefill batch at `now`: the chunk it was in the middle of, then
    /// queued requests, up to the chunk budget in new tokens.
    pub(super) fn start_batch(&mut self, now: Duration, rank: usize) {
        let mut budget = self.chunk;
        let mut parts = Vec::new();
        let r = &mut self.ranks[rank];
        let mut next = r.chunked.take();
        let mut limit = match (next.and_then(|id| self.reqs.get(&id)), self.order) {
            (Some(chunked), QueueOrder::ShortestPrefillFirst) => {
                let mut work: Vec<u32> = r.waiting.iter().map(|w| w.estimate).collect();
                work.sort_unstable();
                chunk_limit(chunked.remaining, &work, budget, self.page_size)
            }
            _ => None,
        };
        // Once a part is left unfinished, a queued prompt joins only if it fits whole: a rank
        // tracks one unfinished chunked request (SGLang's `_select_prefill_admission` under
        // shortest-prefill-first; without the limit the budget is spent there anyway).
        let mut whole_only = false;
        while budget > 0 {
            let id = match next.take() {
                Some(id) => id,
                None => {
                    let Some(at) = r.next_index(self.order) else { break };
                    let id = r.waiting[at].id;
                    if whole_only && self.reqs.get(&id).is_some_and(|req| uncached(req, &r.cache) > budget) {
                        break;
                    }
                    r.waiting.remove(at);
                    id
                }
            };
            let Some(req) = self.reqs.get_mut(&id) else { continue };
            if matches!(req.phase, Phase::Waiting) {
                req.cached = cached_of(&r.cache, &req.pages.hashes, req.prompt_tokens);
                req.remaining = req.prompt_tokens - req.cached;
                req.phase = Phase::Prefilling;
            }
            let n = req.remaining.min(budget).min(limit.take().unwrap_or(u32::MAX));
            whole_only |= n < req.remaining;
            budget -= n;
            parts.push((id, n));
        }
        if parts.is_empty() {
            return;
        }
        r.processed += parts.iter().map(|(_, n)| u64::from(*n)).sum::<u64>();
        let ms = timing::prefill_batch_ms(&self.params, parts.iter().map(|(_, n)| *n));
        r.batch = Some(Batch { ends: now + timing::ms(ms), parts });
    }

    /// Ends `rank`'s prefill batch: its pages enter the rank's prefix cache (with their KV
    /// events), and each request whose prompt is done yields its first token.
    pub(super) fn end_batch(&mut self, _at: Duration, rank: usize, events: &mut Vec<Event>) {
        let Some(batch) = self.ranks[rank].batch.take() else { return };
        let mut kv = Vec::new();
        for (id, n) in batch.parts {
            let Some(req) = self.reqs.get_mut(&id) else { continue };
            req.remaining -= n;
            if req.remaining > 0 {
                // As SGLang's cache_unfinished_req: the pages a chunked prefill has computed are
                // in the prefix cache (and published) before the rest of the prompt is.
                let done = ((req.prompt_tokens - req.remaining) / req.pages.page_size.max(1)) as usize;
                let inserted =
                    self.ranks[rank].cache.insert(&req.pages.hashes[..done.min(req.pages.hashes.len())]);
                if self.kv_events {
                    kv.extend(inserted.events(&req.pages));
                }
                self.ranks[rank].chunked = Some(id);
                continue;
            }
            let inserted = self.ranks[rank].cache.insert(&req.pages.hashes);
            if self.kv_events {
                kv.extend(inserted.events(&req.pages));
            }
            events.push(Event::Prefilled { id, cached_tokens: req.cached });
            self.first_token(id, events);
        }
        if !kv.is_empty() {
            self.kv_batches.push((rank, kv));
        }
    }
}

/// The most new tokens the request in the middle of its prefill may take of a chunk of `budget`
/// tokens, so that the shorter prompts waiting (`waiting_work`: their uncached tokens, shortest
/// first) fit beside it; `None` leaves it the whole budget. As SGLang's
/// `SchedulePolicy.shortest_prefill_chunk_limit` (`sglang/srt/managers/schedule_policy.py`,
/// 0.5.22 and 0.5.23), which the scheduler applies under shortest-prefill-first only: waiting
/// prompts are reserved page-rounded room, shortest first, while each is shorter than what the
/// chunked request has left and the reservation leaves at least a page; SGLang's in-batch
/// prefix deprioritisation, which reorders duplicate prefixes, is not emulated.
pub(super) fn chunk_limit(remaining: u32, waiting_work: &[u32], budget: u32, page_size: u32) -> Option<u32> {
    let page = page_size.max(1);
    if budget < 2 * page {
        return None;
    }
    let mut reserved = 0u32;
    for &work in waiting_work {
        let work = work.max(1);
        let charge = work.div_ceil(page) * page;
        if work >= remaining || reserved + charge > budget - page {
            break;
        }
        reserved += charge;
    }
    (reserved > 0).then(|| (budget - reserved) / page * page)
}

/// The tokens `req` has yet to prefill on a rank with `cache`.
fn uncached(req: &Req, cache: &PrefixCache) -> u32 {
    match req.phase {
        Phase::Waiting => req.prompt_tokens - cached_of(cache, &req.pages.hashes, req.prompt_tokens),
        _ => req.remaining,
    }
}

/// Cached prompt tokens on a rank; at least one token is always computed.
pub(super) fn cached_of(cache: &PrefixCache, pages: &[PageHash], prompt_tokens: u32) -> u32 {
    let cached = u32::try_from(cache.cached_tokens(pages)).unwrap_or(u32::MAX);
    cached.min(prompt_tokens.saturating_sub(1))
}
