//! SGLang's per-scheduler load gauge: the `LoadStat` a scheduler publishes on its own ZMQ PUB
//! socket when started with `--load-publish-endpoint` (`LoadStat` and `SchedulerLoadPublisher` in
//! SGLang 0.5.23 `python/sglang/srt/managers/scheduler_components/load_publisher.py`; SGLang
//! 0.5.18 has no such socket).
//!
//! Framing is the KV-event socket's, `[b"load", seq i64 BE, payload]` ([`LOAD_TOPIC`]); the
//! payload is a msgspec `Struct(tag=True, array_like=True)`: `["LoadStat", num_running_reqs,
//! num_waiting_reqs, num_tokens, max_total_num_tokens, attn_dp_rank,
//! num_waiting_uncached_tokens, num_total_tokens, max_running_requests,
//! total_prefill_uncached_tokens, total_prefill_busy_us]`. The first four fields are required,
//! the rest have defaults (so older publishers may stop after `attn_dp_rank`, the 6-element
//! prefix), and SGLang promises routers ignore appended fields: [`decode_load_stat`] skips them.
//! It never panics on any input. [`LoadPublisher`] is one rank's socket (the sim's);
//! [`follow_load`] reads one (control's).

mod publish;
mod subscribe;
#[cfg(test)]
mod tests;
use std::convert::Infallible;

use rmp::encode::{self, ByteBuf, ValueWriteError};

use crate::wire::reader::Reader;
use crate::wire::{Location, WireError};

pub use self::publish::{HEARTBEAT, LoadPublisher};
pub use self::subscribe::{LoadMessage, follow_load};

/// The topic frame of every load message (SGLang's `LOAD_TOPIC`, in
/// `python/sglang/srt/disaggregation/kv_events.py` of 0.5.23).
pub const LOAD_TOPIC: &str = "load";
/// The struct's tag, the array's first element.
pub const LOAD_STAT_TAG: &str = "LoadStat";
/// Most elements a `LoadStat` array may have (appended fields included).
pub const MAX_LOAD_FIELDS: usize = 64;
/// Elements of the shortest `LoadStat` SGLang's msgspec decodes: the tag and the four fields
/// without a default.
const MIN_LEN: usize = 5;

/// One scheduler's load, as published.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct LoadStat {
    /// Requests in the running batch.
    pub num_running_reqs: u64,
    /// Requests in the waiting queue.
    pub num_waiting_reqs: u64,
    /// KV tokens in use.
    pub num_tokens: u64,
    /// KV capacity in tokens (0 when unknown).
    pub max_total_num_tokens: u64,
    /// The publishing rank (informational: the socket's port says the rank).
    pub attn_dp_rank: Option<u32>,
    /// Uncached prompt tokens awaiting prefill.
    pub num_waiting_uncached_tokens: u64,
    /// KV tokens in use plus queued requests' tokens.
    pub num_total_tokens: u64,
    /// The scheduler's running-request limit.
    pub max_running_requests: u64,
    /// Cumulative uncached prefill tokens.
    pub total_prefill_uncached_tokens: u64,
    /// Cumulative prefill step time, microseconds.
    pub total_prefill_busy_us: u64,
}

/// A payload that is not a `LoadStat`.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum LoadStatError {
    /// Not an array, a value of the wrong type, truncated, or trailing bytes.
    #[error("LoadStat: {0}")]
    Wire(#[from] WireError),
    /// The first element is another struct's tag.
    #[error("LoadStat: tag {0:?}, expected \"LoadStat\"")]
    Tag(String),
    /// Fewer elements than the required fields.
    #[error("LoadStat: {0} elements, at least {MIN_LEN} needed")]
    Short(usize),
}

fn at(field: &'static str) -> Location {
    Location::batch(field)
}

fn count(r: &mut Reader<'_>, field: &'static str) -> Result<u64, WireError> {
    let v = r.int(at(field))?;
    u64::try_from(v).map_err(|_| WireError::OutOfRange { at: at(field), value: v, range: "0..=u64::MAX" })
}

/// Decodes one load payload (the third frame of a message on the load socket).
///
/// # Errors
/// When the payload is not a `LoadStat` SGLang could have written.
pub fn decode_load_stat(payload: &[u8]) -> Result<LoadStat, LoadStatError> {
    let mut r = Reader::new(payload);
    let len = r.array(at("LoadStat"), MAX_LOAD_FIELDS)?;
    if len == 0 {
        return Err(LoadStatError::Short(0));
    }
    let tag = r.str(at("tag"))?;
    if tag != LOAD_STAT_TAG {
        return Err(LoadStatError::Tag(tag.to_owned()));
    }
    if len < MIN_LEN {
        return Err(LoadStatError::Short(len));
    }
    let mut s = LoadStat {
        num_running_reqs: count(&mut r, "num_running_reqs")?,
        num_waiting_reqs: count(&mut r, "num_waiting_reqs")?,
        num_tokens: count(&mut r, "num_tokens")?,
        max_total_num_tokens: count(&mut r, "max_total_num_tokens")?,
        ..LoadStat::default()
    };
    if len > 5 && !r.nil()? {
        let v = r.int(at("attn_dp_rank"))?;
        let rank = u32::try_from(v).map_err(|_| WireError::OutOfRange {
            at: at("attn_dp_rank"),
            value: v,
            range: "0..=u32::MAX",
        })?;
        s.attn_dp_rank = Some(rank);
    }
    let optional: [(&'static str, &mut u64); 5] = [
        ("num_waiting_uncached_tokens", &mut s.num_waiting_uncached_tokens),
        ("num_total_tokens", &mut s.num_total_tokens),
        ("max_running_requests", &mut s.max_running_requests),
        ("total_prefill_uncached_tokens", &mut s.total_prefill_uncached_tokens),
        ("total_prefill_busy_us", &mut s.total_prefill_busy_us),
    ];
    for (i, (field, slot)) in optional.into_iter().enumerate() {
        if len > 6 + i {
            *slot = count(&mut r, field)?;
        }
    }
    for _ in 11.min(len)..len {
        r.skip(at("appended field"))?;
    }
    match r.remaining() {
        0 => Ok(s),
        count => Err(WireError::Trailing { count }.into()),
    }
}

/// Writing into a [`ByteBuf`] cannot fail: its error type is uninhabited.
fn ok<T>(r: Result<T, ValueWriteError<Infallible>>) {
    match r {
        Ok(_) => {}
        Err(ValueWriteError::InvalidMarkerWrite(never) | ValueWriteError::InvalidDataWrite(never)) => {
            match never {}
        }
    }
}

/// Encodes `stat` as SGLang 0.5.23's msgspec does: all eleven elements, smallest integer widths.
pub fn encode_load_stat(stat: &LoadStat) -> Vec<u8> {
    let mut buf = ByteBuf::new();
    ok(encode::write_array_len(&mut buf, 11));
    ok(encode::write_str(&mut buf, LOAD_STAT_TAG));
    for v in [stat.num_running_reqs, stat.num_waiting_reqs, stat.num_tokens, stat.max_total_num_tokens] {
        ok(encode::write_uint(&mut buf, v));
    }
    match stat.attn_dp_rank {
        Some(rank) => ok(encode::write_uint(&mut buf, u64::from(rank))),
        None => match encode::write_nil(&mut buf) {
            Ok(()) => {}
            Err(never) => match never {},
        },
    }
    for v in [
        stat.num_waiting_uncached_tokens,
        stat.num_total_tokens,
        stat.max_running_requests,
        stat.total_prefill_uncached_tokens,
        stat.total_prefill_busy_us,
    ] {
        ok(encode::write_uint(&mut buf, v));
    }
    buf.into_vec()
}
