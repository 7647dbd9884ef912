//! msgpack → [`EventBatch`], both of SGLang's event encodings (tagged arrays ≤ 0.5.19, tagged maps
//! ≥ 0.5.20), told apart per event by its msgpack type.

use rmp::Marker;

use super::error::{Location, WireError};
use super::reader::{Reader, type_name};
use super::{MAX_EVENT_FIELDS, MAX_EVENTS_PER_BATCH, MAX_HASHES_PER_EVENT, MAX_TOKENS_PER_EVENT};
use crate::event::{EventBatch, KvEvent, Medium};

const BLOCK_STORED: &str = "BlockStored";
const BLOCK_REMOVED: &str = "BlockRemoved";
const ALL_BLOCKS_CLEARED: &str = "AllBlocksCleared";

/// Decodes one batch payload.
pub(super) fn batch(payload: &[u8]) -> Result<EventBatch, WireError> {
    let mut r = Reader::new(payload);
    let len = r.array(Location::batch("batch"), usize::MAX)?;
    if !(2..=3).contains(&len) {
        return Err(WireError::BatchShape { len });
    }
    let ts = r.number(Location::batch("ts"))?;
    let count = r.array(Location::batch("events"), MAX_EVENTS_PER_BATCH)?;
    let mut events = Vec::with_capacity(count);
    for i in 0..count {
        events.push(event(&mut r, i)?);
    }
    let attn_dp_rank = match len {
        3 => rank(&mut r)?,
        _ => None,
    };
    match r.remaining() {
        0 => Ok(EventBatch { ts, events, attn_dp_rank }),
        count => Err(WireError::Trailing { count }),
    }
}

fn rank(r: &mut Reader<'_>) -> Result<Option<u32>, WireError> {
    let at = Location::batch("attn_dp_rank");
    if r.nil()? {
        return Ok(None);
    }
    let v = r.int(at)?;
    u32::try_from(v).map(Some).map_err(|_| WireError::OutOfRange { at, value: v, range: "0..=u32::MAX" })
}

fn event(r: &mut Reader<'_>, i: usize) -> Result<KvEvent, WireError> {
    let at = Location::event(i, "event");
    match r.peek()? {
        Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => tagged_array(r, i),
        Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => tagged_map(r, i),
        m => Err(WireError::Type { at, expected: "array or map", found: type_name(m) }),
    }
}

/// `[tag, field…]` in declaration order (≤ 0.5.19); trailing fields with defaults may be absent.
/// 0.5.18's `BlockStoredWithMetadata` appends a `{"cache_salt": …}` map; other extra trailing
/// elements are skipped.
fn tagged_array(r: &mut Reader<'_>, i: usize) -> Result<KvEvent, WireError> {
    let at = |field| Location::event(i, field);
    let len = r.array(at("event"), MAX_EVENT_FIELDS)?;
    if len == 0 {
        return Err(WireError::EventShape { at: at("event"), kind: "an event", len, min: 1 });
    }
    let tag = r.str(at("type"))?;
    let (kind, min) = match tag {
        BLOCK_STORED => (BLOCK_STORED, 5),
        BLOCK_REMOVED => (BLOCK_REMOVED, 2),
        ALL_BLOCKS_CLEARED => (ALL_BLOCKS_CLEARED, 1),
        other => return Err(WireError::UnknownEvent { at: at("type"), tag: other.to_owned() }),
    };
    if len < min {
        return Err(WireError::EventShape { at: at("event"), kind, len, min });
    }
    let (event, used) = match kind {
        BLOCK_STORED => {
            let block_hashes = hashes(r, at("block_hashes"))?;
            let parent_block_hash = opt_hash(r, at("parent_block_hash"))?;
            let token_ids = tokens(r, at("token_ids"))?;
            let block_size = block_size(r, at("block_size"))?;
            let mut used = 5;
            if len > used {
                r.skip(at("lora_id"))?;
                used += 1;
            }
            let mut medium_ = Medium::Gpu;
            if len > used {
                medium_ = medium(r, at("medium"))?;
                used += 1;
            }
            let mut cache_salt = None;
            if len > used && matches!(r.peek()?, Marker::FixMap(_) | Marker::Map16 | Marker::Map32) {
                cache_salt = metadata(r, at("metadata"))?;
                used += 1;
            }
            let stored = KvEvent::BlockStored {
                block_hashes,
                parent_block_hash,
                token_ids,
                block_size,
                medium: medium_,
                cache_salt,
                lora_name: None,
            };
            (stored, used)
        }
        BLOCK_REMOVED => {
            let block_hashes = hashes(r, at("block_hashes"))?;
            let mut medium_ = Medium::Gpu;
            let mut used = 2;
            if len > used {
                medium_ = medium(r, at("medium"))?;
                used += 1;
            }
            (KvEvent::BlockRemoved { block_hashes, medium: medium_ }, used)
        }
        _ => (KvEvent::AllBlocksCleared, 1),
    };
    for _ in used..len {
        r.skip(at("extra element"))?;
    }
    Ok(event)
}

/// The fields a tagged-map event may carry, as read.
#[derive(Default)]
struct MapFields<'a> {
    kind: Option<&'a str>,
    block_hashes: Option<Vec<i64>>,
    parent_block_hash: Option<Option<i64>>,
    token_ids: Option<Vec<u64>>,
    block_size: Option<u32>,
    medium: Option<Medium>,
    cache_salt: Option<String>,
    lora_name: Option<String>,
}

/// `{"type": tag, field: value, …}` (≥ 0.5.20): fields equal to their default are omitted,
/// unknown keys are skipped.
fn tagged_map(r: &mut Reader<'_>, i: usize) -> Result<KvEvent, WireError> {
    let at = |field| Location::event(i, field);
    let entries = r.map(at("event"), MAX_EVENT_FIELDS)?;
    let mut f = MapFields::default();
    for _ in 0..entries {
        match r.str(at("key"))? {
            "type" => f.kind = Some(r.str(at("type"))?),
            "block_hashes" => f.block_hashes = Some(hashes(r, at("block_hashes"))?),
            "parent_block_hash" => f.parent_block_hash = Some(opt_hash(r, at("parent_block_hash"))?),
            "token_ids" => f.token_ids = Some(tokens(r, at("token_ids"))?),
            "block_size" => f.block_size = Some(block_size(r, at("block_size"))?),
            "medium" => f.medium = Some(medium(r, at("medium"))?),
            "cache_salt" => f.cache_salt = opt_str(r, at("cache_salt"))?,
            "lora_name" => f.lora_name = opt_str(r, at("lora_name"))?,
            _ => r.skip(at("unknown key"))?,
        }
    }
    let medium = f.medium.unwrap_or(Medium::Gpu);
    let missing = |field| WireError::MissingField { at: at(field) };
    match f.kind.ok_or_else(|| missing("type"))? {
        BLOCK_STORED => Ok(KvEvent::BlockStored {
            block_hashes: f.block_hashes.ok_or_else(|| missing("block_hashes"))?,
            parent_block_hash: f.parent_block_hash.flatten(),
            token_ids: f.token_ids.ok_or_else(|| missing("token_ids"))?,
            block_size: f.block_size.ok_or_else(|| missing("block_size"))?,
            medium,
            cache_salt: f.cache_salt,
            lora_name: f.lora_name,
        }),
        BLOCK_REMOVED => Ok(KvEvent::BlockRemoved {
            block_hashes: f.block_hashes.ok_or_else(|| missing("block_hashes"))?,
            medium,
        }),
        ALL_BLOCKS_CLEARED => Ok(KvEvent::AllBlocksCleared),
        other => Err(WireError::UnknownEvent { at: at("type"), tag: other.to_owned() }),
    }
}

/// 0.5.18's `BlockStoredMetadata`: `{"cache_salt": str}`, unknown keys skipped.
fn metadata(r: &mut Reader<'_>, at: Location) -> Result<Option<String>, WireError> {
    let entries = r.map(at, MAX_EVENT_FIELDS)?;
    let mut salt = None;
    for _ in 0..entries {
        match r.str(at)? {
            "cache_salt" => salt = opt_str(r, at)?,
            _ => r.skip(at)?,
        }
    }
    Ok(salt)
}

fn opt_str(r: &mut Reader<'_>, at: Location) -> Result<Option<String>, WireError> {
    if r.nil()? { Ok(None) } else { r.str(at).map(|s| Some(s.to_owned())) }
}

fn hash(r: &mut Reader<'_>, at: Location) -> Result<i64, WireError> {
    let v = r.int(at)?;
    i64::try_from(v).map_err(|_| WireError::OutOfRange { at, value: v, range: "i64" })
}

fn opt_hash(r: &mut Reader<'_>, at: Location) -> Result<Option<i64>, WireError> {
    if r.nil()? { Ok(None) } else { hash(r, at).map(Some) }
}

fn hashes(r: &mut Reader<'_>, at: Location) -> Result<Vec<i64>, WireError> {
    let n = r.array(at, MAX_HASHES_PER_EVENT)?;
    (0..n).map(|_| hash(r, at)).collect()
}

fn token(r: &mut Reader<'_>, at: Location) -> Result<u64, WireError> {
    let v = r.int(at)?;
    u64::try_from(v).map_err(|_| WireError::OutOfRange { at, value: v, range: "0..=u64::MAX" })
}

/// Token ids; an EAGLE bigram `[a, b]` stands for its first token `a`.
fn tokens(r: &mut Reader<'_>, at: Location) -> Result<Vec<u64>, WireError> {
    let n = r.array(at, MAX_TOKENS_PER_EVENT)?;
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        match r.peek()? {
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
                let len = r.array(at, 2)?;
                if len != 2 {
                    return Err(WireError::Type {
                        at,
                        expected: "token id or [a, b] bigram",
                        found: "array",
                    });
                }
                out.push(token(r, at)?);
                token(r, at)?;
            }
            _ => out.push(token(r, at)?),
        }
    }
    Ok(out)
}

fn block_size(r: &mut Reader<'_>, at: Location) -> Result<u32, WireError> {
    let v = r.int(at)?;
    match u32::try_from(v) {
        Ok(0) => Err(WireError::ZeroBlockSize { at }),
        Ok(n) => Ok(n),
        Err(_) => Err(WireError::OutOfRange { at, value: v, range: "1..=u32::MAX" }),
    }
}

fn medium(r: &mut Reader<'_>, at: Location) -> Result<Medium, WireError> {
    if r.nil()? {
        return Ok(Medium::Gpu);
    }
    let name = r.str(at)?;
    Medium::from_wire(name).ok_or_else(|| WireError::UnknownMedium { at, medium: name.to_owned() })
}
