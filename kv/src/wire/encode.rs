//! [`EventBatch`] → msgpack exactly as msgspec writes it: smallest integer widths (unsigned
//! formats for non-negative values), float64 timestamps, tagged arrays or tagged maps.

use std::convert::Infallible;

use rmp::encode::{self, ByteBuf, ValueWriteError};

use super::error::{Location, WireError};
use super::{Encoding, MAX_EVENTS_PER_BATCH, MAX_HASHES_PER_EVENT, MAX_TOKENS_PER_EVENT};
use crate::event::{EventBatch, KvEvent};

/// Writing into a [`ByteBuf`] cannot fail: its error type is uninhabited.
fn ok<T>(r: Result<T, ValueWriteError<Infallible>>) {
    match r {
        Ok(_) => {}
        Err(ValueWriteError::InvalidMarkerWrite(never) | ValueWriteError::InvalidDataWrite(never)) => {
            match never {}
        }
    }
}

struct Writer(ByteBuf);

impl Writer {
    fn array(&mut self, len: usize) {
        // Every length written is capped far below u32::MAX by `check`.
        ok(encode::write_array_len(&mut self.0, len as u32));
    }
    fn map(&mut self, len: u32) {
        ok(encode::write_map_len(&mut self.0, len));
    }
    fn str(&mut self, s: &str) {
        ok(encode::write_str(&mut self.0, s));
    }
    fn sint(&mut self, v: i64) {
        ok(encode::write_sint(&mut self.0, v));
    }
    fn uint(&mut self, v: u64) {
        ok(encode::write_uint(&mut self.0, v));
    }
    fn nil(&mut self) {
        match encode::write_nil(&mut self.0) {
            Ok(()) => {}
            Err(never) => match never {},
        }
    }
    fn opt_sint(&mut self, v: Option<i64>) {
        match v {
            Some(v) => self.sint(v),
            None => self.nil(),
        }
    }
    fn hashes(&mut self, hs: &[i64]) {
        self.array(hs.len());
        hs.iter().for_each(|&h| self.sint(h));
    }
}

/// Rejects what the decoder would reject, so an encoded batch always decodes.
fn check(batch: &EventBatch) -> Result<(), WireError> {
    let len = batch.events.len();
    if len > MAX_EVENTS_PER_BATCH {
        return Err(WireError::TooLong { at: Location::batch("events"), len, cap: MAX_EVENTS_PER_BATCH });
    }
    for (i, e) in batch.events.iter().enumerate() {
        let (hashes, tokens, block_size) = match e {
            KvEvent::BlockStored { block_hashes, token_ids, block_size, .. } => {
                (block_hashes.len(), token_ids.len(), *block_size)
            }
            KvEvent::BlockRemoved { block_hashes, .. } => (block_hashes.len(), 0, 1),
            KvEvent::AllBlocksCleared => (0, 0, 1),
        };
        if hashes > MAX_HASHES_PER_EVENT {
            let at = Location::event(i, "block_hashes");
            return Err(WireError::TooLong { at, len: hashes, cap: MAX_HASHES_PER_EVENT });
        }
        if tokens > MAX_TOKENS_PER_EVENT {
            let at = Location::event(i, "token_ids");
            return Err(WireError::TooLong { at, len: tokens, cap: MAX_TOKENS_PER_EVENT });
        }
        if block_size == 0 {
            return Err(WireError::ZeroBlockSize { at: Location::event(i, "block_size") });
        }
    }
    Ok(())
}

/// Encodes `batch` in `encoding`.
pub(super) fn batch(batch: &EventBatch, encoding: Encoding) -> Result<Vec<u8>, WireError> {
    check(batch)?;
    let mut w = Writer(ByteBuf::new());
    w.array(3);
    ok(encode::write_f64(&mut w.0, batch.ts));
    w.array(batch.events.len());
    for e in &batch.events {
        match encoding {
            Encoding::Arrays => array_event(&mut w, e),
            Encoding::Maps => map_event(&mut w, e),
        }
    }
    match batch.attn_dp_rank {
        Some(r) => w.uint(u64::from(r)),
        None => w.nil(),
    }
    Ok(w.0.into_vec())
}

/// `["BlockStored", hashes, parent, tokens, block_size, lora_id, medium]` and friends; a salted
/// store is 0.5.18's `BlockStoredWithMetadata`, with `{"cache_salt": …}` appended.
fn array_event(w: &mut Writer, e: &KvEvent) {
    match e {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            medium,
            cache_salt,
            // 0.5.18's array form has no adapter name.
            lora_name: _,
        } => {
            w.array(if cache_salt.is_some() { 8 } else { 7 });
            w.str("BlockStored");
            w.hashes(block_hashes);
            w.opt_sint(*parent_block_hash);
            w.array(token_ids.len());
            token_ids.iter().for_each(|&t| w.uint(t));
            w.uint(u64::from(*block_size));
            w.nil();
            w.str(medium.as_wire());
            if let Some(salt) = cache_salt {
                w.map(1);
                w.str("cache_salt");
                w.str(salt);
            }
        }
        KvEvent::BlockRemoved { block_hashes, medium } => {
            w.array(3);
            w.str("BlockRemoved");
            w.hashes(block_hashes);
            w.str(medium.as_wire());
        }
        KvEvent::AllBlocksCleared => {
            w.array(1);
            w.str("AllBlocksCleared");
        }
    }
}

/// `{"type": "BlockStored", "block_hashes": …, …}` in declaration order; `None`-default fields
/// (`cache_salt` when there is none, `session_id`, `lora_name`) omitted as msgspec's
/// `omit_defaults` does.
fn map_event(w: &mut Writer, e: &KvEvent) {
    match e {
        KvEvent::BlockStored {
            block_hashes,
            parent_block_hash,
            token_ids,
            block_size,
            medium,
            cache_salt,
            lora_name,
        } => {
            w.map(7 + u32::from(cache_salt.is_some()) + u32::from(lora_name.is_some()));
            w.str("type");
            w.str("BlockStored");
            w.str("block_hashes");
            w.hashes(block_hashes);
            w.str("parent_block_hash");
            w.opt_sint(*parent_block_hash);
            w.str("token_ids");
            w.array(token_ids.len());
            token_ids.iter().for_each(|&t| w.uint(t));
            w.str("block_size");
            w.uint(u64::from(*block_size));
            w.str("lora_id");
            w.nil();
            w.str("medium");
            w.str(medium.as_wire());
            if let Some(salt) = cache_salt {
                w.str("cache_salt");
                w.str(salt);
            }
            if let Some(name) = lora_name {
                w.str("lora_name");
                w.str(name);
            }
        }
        KvEvent::BlockRemoved { block_hashes, medium } => {
            w.map(3);
            w.str("type");
            w.str("BlockRemoved");
            w.str("block_hashes");
            w.hashes(block_hashes);
            w.str("medium");
            w.str(medium.as_wire());
        }
        KvEvent::AllBlocksCleared => {
            w.map(1);
            w.str("type");
            w.str("AllBlocksCleared");
        }
    }
}
