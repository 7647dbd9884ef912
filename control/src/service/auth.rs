//! Bearer-token check for the Admin service (`--admin-token`). Router calls are not affected.

use tonic::{Request, Status, service::Interceptor};

use crate::error::ControlError;

/// Requires `authorization: Bearer <token>` when a token is configured.
#[derive(Clone)]
pub struct AdminAuth {
    expected: Option<Vec<u8>>,
}

impl std::fmt::Debug for AdminAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AdminAuth").field("enabled", &self.expected.is_some()).finish()
    }
}

impl AdminAuth {
    /// Checks against `token`; `None` admits every call.
    pub fn new(token: Option<String>) -> Self {
        Self { expected: token.map(|t| format!("Bearer {t}").into_bytes()) }
    }
}

impl Interceptor for AdminAuth {
    fn call(&mut self, req: Request<()>) -> Result<Request<()>, Status> {
        let Some(expected) = &self.expected else {
            return Ok(req);
        };
        let given = req.metadata().get("authorization").map(|v| v.as_bytes()).unwrap_or_default();
        if constant_time_eq(given, expected) { Ok(req) } else { Err(ControlError::Unauthenticated.into()) }
    }
}

/// Compares without an early exit on the first differing byte.
fn constant_time_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(auth: &mut AdminAuth, header: Option<&str>) -> Result<(), tonic::Code> {
        let mut req = Request::new(());
        if let Some(h) = header {
            req.metadata_mut().insert("authorization", h.parse().unwrap());
        }
        auth.call(req).map(|_| ()).map_err(|s| s.code())
    }

    #[test]
    fn token_is_required_only_when_configured() {
        assert_eq!(call(&mut AdminAuth::new(None), None), Ok(()));
        let mut auth = AdminAuth::new(Some("s3cret".into()));
        assert_eq!(call(&mut auth, Some("Bearer s3cret")), Ok(()));
        assert_eq!(call(&mut auth, None), Err(tonic::Code::Unauthenticated));
        assert_eq!(call(&mut auth, Some("Bearer s3cre")), Err(tonic::Code::Unauthenticated));
        assert_eq!(call(&mut auth, Some("s3cret")), Err(tonic::Code::Unauthenticated));
    }
}
