//! Who may call the Router, and as whom (manual/operations/security.md, "What the Router
//! trusts"). Two credentials prove a caller's [`Identity`]:
//!
//! - a client certificate that `--tls-client-ca` verified: its name ([`cert`]);
//! - `authorization: Bearer <token>` with a token `--router-tokens` lists ([`tokens`]).
//!
//! With both configured, a call that carries a bearer token is the token's identity (a wrong
//! token is refused, not passed over for the certificate); one without is its certificate's.
//! With neither, the Router is open: every caller is [`Identity::anonymous`], which control
//! allows only on a loopback `--listen` unless `--router-allow-unauthenticated` is given (the
//! configuration checks it), logs at start, and shows as `infera_control_router_authenticated 0`.
//!
//! The [`RouterAuth`] interceptor runs before every Router call, puts the caller's identity in
//! the request's extensions ([`caller`]) or refuses with `UNAUTHENTICATED`; Admin keeps its own
//! token (`service::AdminAuth`), health and reflection stay open.

pub mod cert;
pub mod metrics;
pub mod tokens;

use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use tonic::service::Interceptor;
use tonic::{Request, Status};

use crate::error::ControlError;
use crate::identity::Identity;
use metrics::AuthMetrics;
use tokens::{TokenTable, Tokens};

/// How Router callers prove who they are (the flags').
#[derive(Clone, Debug, Default)]
pub struct RouterCredentials {
    /// `--router-tokens`: bearer tokens by identity, reloaded on SIGHUP.
    pub tokens: Option<Arc<Tokens>>,
    /// `--tls-client-ca`: every connection shows a verified client certificate, whose name is
    /// the caller's identity.
    pub certificates: bool,
}

impl RouterCredentials {
    /// Whether the Router is open: no credential is asked of anyone.
    pub fn is_open(&self) -> bool {
        self.tokens.is_none() && !self.certificates
    }

    /// What the start-up log says the Router accepts.
    pub fn describe(&self) -> &'static str {
        match (self.tokens.is_some(), self.certificates) {
            (true, true) => "proxy tokens (--router-tokens) and client certificates (--tls-client-ca)",
            (true, false) => "proxy tokens (--router-tokens)",
            (false, true) => "client certificates (--tls-client-ca)",
            (false, false) => "nothing: the Router is open to anyone who reaches it",
        }
    }
}

/// Why a Router call was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// No credential at all.
    Missing,
    /// An `authorization` header that is not `Bearer <token>`.
    Malformed,
    /// A bearer token `--router-tokens` does not list.
    UnknownToken,
    /// A client certificate that names no identity (no URI or DNS name, no common name).
    NoIdentity,
}

impl Refusal {
    /// Every reason.
    pub const ALL: [Self; 4] = [Self::Missing, Self::Malformed, Self::UnknownToken, Self::NoIdentity];

    /// The metric label.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Missing => "missing",
            Self::Malformed => "malformed",
            Self::UnknownToken => "unknown_token",
            Self::NoIdentity => "no_identity",
        }
    }

    /// What the caller is told.
    pub fn message(self) -> &'static str {
        match self {
            Self::Missing => {
                "Router calls need a credential: a client certificate control's --tls-client-ca signed \
                 (proxy --control-cert), or `authorization: Bearer <token>` with a token --router-tokens \
                 lists (proxy --control-token-file)"
            }
            Self::Malformed => "the authorization header of a Router call must be `Bearer <token>`",
            Self::UnknownToken => "the bearer token is not one --router-tokens lists",
            Self::NoIdentity => {
                "the client certificate names no identity: give it a URI or DNS subject alternative name, \
                 or a common name"
            }
        }
    }
}

/// The identity of a caller that showed the `authorization` header `authorization` (if any)
/// on a connection whose verified client certificate chain starts with `leaf` (if any), under
/// `tokens` (`--router-tokens`) and `certificates` (`--tls-client-ca`).
///
/// # Errors
/// The call proves no identity.
pub fn identify(
    tokens: Option<&TokenTable>,
    certificates: bool,
    authorization: Option<&[u8]>,
    leaf: Option<&CertificateDer<'_>>,
) -> Result<Identity, Refusal> {
    if tokens.is_none() && !certificates {
        return Ok(Identity::anonymous());
    }
    if let (Some(table), Some(header)) = (tokens, authorization) {
        let token = header.strip_prefix(b"Bearer ").filter(|t| !t.is_empty()).ok_or(Refusal::Malformed)?;
        return table.identify(token).cloned().ok_or(Refusal::UnknownToken);
    }
    match (certificates, leaf) {
        (true, Some(leaf)) => {
            let name = cert::name_of(leaf).ok_or(Refusal::NoIdentity)?;
            Identity::new(&name).map_err(|_| Refusal::NoIdentity)
        }
        _ => Err(Refusal::Missing),
    }
}

/// The interceptor in front of the Router: the caller's identity into the request's
/// extensions, or `UNAUTHENTICATED`.
#[derive(Clone, Debug)]
pub struct RouterAuth {
    credentials: RouterCredentials,
    metrics: AuthMetrics,
}

impl RouterAuth {
    /// Asks every call for one of `credentials`.
    pub fn new(credentials: RouterCredentials, metrics: AuthMetrics) -> Self {
        Self { credentials, metrics }
    }
}

impl Interceptor for RouterAuth {
    fn call(&mut self, mut req: Request<()>) -> Result<Request<()>, Status> {
        let table = self.credentials.tokens.as_ref().map(|t| t.current());
        let header = req.metadata().get("authorization").map(|v| v.as_bytes());
        let chain = req.peer_certs();
        let leaf = chain.as_ref().and_then(|c| c.first());
        match identify(table.as_deref(), self.credentials.certificates, header, leaf) {
            Ok(identity) => {
                req.extensions_mut().insert(identity);
                Ok(req)
            }
            Err(refusal) => {
                self.metrics.refused(refusal);
                tracing::debug!(reason = refusal.as_str(), "a Router call refused: no credential");
                Err(ControlError::RouterUnauthenticated(refusal.message().to_owned()).into())
            }
        }
    }
}

/// The identity [`RouterAuth`] put in `req`.
///
/// # Errors
/// `UNAUTHENTICATED` when there is none (the Router served without its interceptor).
pub fn caller<T>(req: &Request<T>) -> Result<Identity, ControlError> {
    req.extensions()
        .get::<Identity>()
        .cloned()
        .ok_or_else(|| ControlError::RouterUnauthenticated(Refusal::Missing.message().to_owned()))
}

/// Reads the tokens file again (SIGHUP), counting and logging the outcome.
pub fn reload(tokens: &Tokens, metrics: &AuthMetrics) {
    match tokens.reload() {
        Ok(n) => {
            metrics.reloaded(true);
            tracing::info!(tokens = n, file = %tokens.path().display(), "Router tokens reloaded");
        }
        Err(e) => {
            metrics.reloaded(false);
            tracing::warn!(error = %e, "Router tokens not reloaded: the ones in force stay");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    const TOKEN: &str = "0123456789abcdef0123";

    fn table() -> TokenTable {
        TokenTable::parse(
            &format!("[[tokens]]\nidentity = \"proxy-a\"\ntoken = \"{TOKEN}\"\n"),
            Path::new("t"),
        )
        .unwrap()
    }

    fn leaf(cn: &str) -> CertificateDer<'static> {
        let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
        params.distinguished_name.push(rcgen::DnType::CommonName, cn);
        params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().der().clone()
    }

    #[test]
    fn an_open_router_takes_everyone_as_the_anonymous_identity() {
        let bearer = format!("Bearer {TOKEN}");
        assert_eq!(identify(None, false, None, None), Ok(Identity::anonymous()));
        assert_eq!(identify(None, false, Some(bearer.as_bytes()), None), Ok(Identity::anonymous()));
    }

    #[test]
    fn a_token_names_its_identity_and_anything_else_is_refused() {
        let t = table();
        let ok = format!("Bearer {TOKEN}");
        assert_eq!(identify(Some(&t), false, Some(ok.as_bytes()), None).unwrap().as_str(), "proxy-a");
        assert_eq!(identify(Some(&t), false, None, None), Err(Refusal::Missing));
        assert_eq!(identify(Some(&t), false, Some(TOKEN.as_bytes()), None), Err(Refusal::Malformed));
        assert_eq!(identify(Some(&t), false, Some(b"Bearer "), None), Err(Refusal::Malformed));
        assert_eq!(
            identify(Some(&t), false, Some(b"bearer 0123456789abcdef0123"), None),
            Err(Refusal::Malformed)
        );
        assert_eq!(
            identify(Some(&t), false, Some(b"Bearer 0123456789abcdef012"), None),
            Err(Refusal::UnknownToken)
        );
    }

    #[test]
    fn a_certificate_names_its_holder_and_a_token_beside_it_wins() {
        let t = table();
        let cert = leaf("proxy-b");
        assert_eq!(identify(None, true, None, Some(&cert)).unwrap().as_str(), "proxy-b");
        assert_eq!(identify(None, true, None, None), Err(Refusal::Missing));
        // Without --router-tokens a header is not a credential: the certificate names the caller.
        assert_eq!(identify(None, true, Some(b"Bearer whatever"), Some(&cert)).unwrap().as_str(), "proxy-b");
        let ok = format!("Bearer {TOKEN}");
        assert_eq!(identify(Some(&t), true, Some(ok.as_bytes()), Some(&cert)).unwrap().as_str(), "proxy-a");
        assert_eq!(identify(Some(&t), true, None, Some(&cert)).unwrap().as_str(), "proxy-b");
        assert_eq!(
            identify(Some(&t), true, Some(b"Bearer wrong-token-wrong"), Some(&cert)),
            Err(Refusal::UnknownToken),
            "a wrong token is refused, not passed over for the certificate"
        );
        let nameless = {
            let mut params = rcgen::CertificateParams::new(Vec::new()).unwrap();
            params.distinguished_name = rcgen::DistinguishedName::new();
            params.self_signed(&rcgen::KeyPair::generate().unwrap()).unwrap().der().clone()
        };
        assert_eq!(identify(None, true, None, Some(&nameless)), Err(Refusal::NoIdentity));
    }
}
