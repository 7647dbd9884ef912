//! The response body type every handler returns.

use bytes::Bytes;
use http_body_util::{BodyExt, Full, combinators::BoxBody};

/// Errors a streamed body can end with.
pub type BodyError = Box<dyn std::error::Error + Send + Sync>;

/// A boxed response body.
pub type Body = BoxBody<Bytes, BodyError>;

/// A complete body.
pub fn full(b: impl Into<Bytes>) -> Body {
    Full::new(b.into()).map_err(|never| match never {}).boxed()
}
