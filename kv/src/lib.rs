//! KV-cache awareness, shared by control, proxy and sim.
//!
//! - [`event`]: KV events as SGLang records them, whichever wire encoding carried them.
//! - [`index`]: the prefix index built from events and asked for overlaps.
//! - [`wire`], [`subscribe`], [`publish`]: the msgpack batches and the ZMQ sockets that carry them;
//!   [`frame_guard`]: the bound on what a publisher may send a subscriber.
//! - [`load`]: SGLang's per-rank `LoadStat` gauge (`--load-publish-endpoint`), same framing.
//! - `testing` (feature `testing`): SGLang's real publisher driven from tests.
//! - [`hash`]: SGLang's page hash (chained SHA-256 over token ids), the one function that turns a
//!   prompt's tokens into the page-hash sequence control's index is queried with.

pub mod event;
pub mod frame_guard;
pub mod hash;
pub mod index;
pub mod load;
pub mod publish;
pub mod subscribe;
#[cfg(feature = "testing")]
pub mod testing;
pub mod wire;
