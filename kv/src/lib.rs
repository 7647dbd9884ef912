//! KV-cache awareness, shared by control, proxy and sim.
//!
//! - [`event`]: KV events as SGLang records them, whichever wire encoding carried them.
//! - [`index`]: the prefix index built from events and asked for overlaps.
//! - [`hash`]: SGLang's page hash (chained SHA-256 over token ids), the one function that turns a
//!   prompt's tokens into the page-hash sequence control's index is queried with.

pub mod event;
pub mod hash;
pub mod index;
pub mod publish;
pub mod subscribe;
pub mod wire;
