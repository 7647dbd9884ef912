//! What talking to etcd can fail with, and why, in words an operator can act on: a refused
//! certificate, a wrong password and a missing role each say so instead of a bare "transport
//! error" (tonic's message hides the cause in the source chain).

use crate::client::EtcdConfigError;

/// What talking to etcd can fail with.
#[derive(Debug, thiserror::Error)]
pub enum RegistryError {
    /// etcd itself (connect, RPC, stream), with the cause classified. Its message holds the
    /// client error's own chain, so it names no source (a chain printed whole would repeat it).
    #[error("etcd {}: {}", EtcdFailure::of(.0).describe(), detail(.0))]
    Etcd(etcd_client::Error),
    /// The part's etcd TLS or credential files (read again on every connection).
    #[error("etcd: {0}")]
    Config(#[from] EtcdConfigError),
    /// A worker record that is not valid JSON of the expected shape.
    #[error("worker record at {key}: {source}")]
    Record {
        /// The etcd key of the record.
        key: String,
        /// serde_json's error.
        #[source]
        source: serde_json::Error,
    },
}

impl From<etcd_client::Error> for RegistryError {
    fn from(e: etcd_client::Error) -> Self {
        Self::Etcd(e)
    }
}

impl RegistryError {
    /// Why etcd failed (`None` for a record that does not parse).
    pub fn failure(&self) -> Option<EtcdFailure> {
        match self {
            Self::Etcd(e) => Some(EtcdFailure::of(e)),
            Self::Config(_) => Some(EtcdFailure::Credentials),
            Self::Record { .. } => None,
        }
    }

    /// Whether etcd answered and refused this part (its certificate, its credentials or its
    /// roles), as opposed to not answering at all: a configuration to fix, not an outage to wait
    /// out.
    pub fn is_refusal(&self) -> bool {
        self.failure().is_some_and(EtcdFailure::is_refusal)
    }
}

/// Why a call to etcd failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EtcdFailure {
    /// No endpoint answered (down, partitioned, timed out).
    Unreachable,
    /// The TLS handshake failed: etcd's certificate is not one the CA verifies, or etcd refused
    /// the client certificate (none, or one its CA did not sign).
    Tls,
    /// etcd refused the user and password (or the token it had issued for them).
    Authentication,
    /// The user is known but its roles do not allow the request.
    PermissionDenied,
    /// A TLS or credential file of this part cannot be read or used.
    Credentials,
    /// Anything else etcd answered with.
    Other,
}

impl EtcdFailure {
    /// Classifies an etcd client error by its gRPC status and its source chain.
    pub fn of(e: &etcd_client::Error) -> Self {
        let text = detail(e).to_ascii_lowercase();
        // A TLS etcd that refuses the client's certificate (or gets none) closes the connection
        // right after the handshake, and one sent plain HTTP/2 closes it at the first bytes: the
        // client sees it closed (or its write fail), not an alert.
        let tls =
            ["certificate", "tls", "handshake", "alert", "unknownissuer", "connection closed", "broken pipe"]
                .iter()
                .any(|w| text.contains(w));
        match e {
            etcd_client::Error::GRpcStatus(status) => match status.code() {
                tonic::Code::PermissionDenied => Self::PermissionDenied,
                tonic::Code::Unauthenticated => Self::Authentication,
                _ if text.contains("authentication failed")
                    || text.contains("auth token")
                    || text.contains("user name is empty")
                    || text.contains("user name not found") =>
                {
                    Self::Authentication
                }
                _ if tls => Self::Tls,
                tonic::Code::Unavailable | tonic::Code::DeadlineExceeded | tonic::Code::Cancelled => {
                    Self::Unreachable
                }
                _ => Self::Other,
            },
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) if tls => Self::Tls,
            etcd_client::Error::TransportError(_) | etcd_client::Error::IoError(_) => Self::Unreachable,
            _ => Self::Other,
        }
    }

    /// Whether etcd answered and refused (a configuration to fix).
    pub fn is_refusal(self) -> bool {
        matches!(self, Self::Tls | Self::Authentication | Self::PermissionDenied | Self::Credentials)
    }

    /// What it means, and what to check.
    pub fn describe(self) -> &'static str {
        match self {
            Self::Unreachable => "unreachable",
            Self::Tls => {
                "TLS failed: the handshake, or etcd closed the connection right after it (does \
                 --etcd-ca verify etcd's certificate? did etcd's --trusted-ca-file sign \
                 --etcd-cert, which it requires with --client-cert-auth? are the endpoints \
                 https://?)"
            }
            Self::Authentication => {
                "refused the credentials (authentication failed: check --etcd-user and \
                 --etcd-password-file)"
            }
            Self::PermissionDenied => {
                "denied the request (the user's roles do not cover this key: \
                 manual/operations/etcd.md lists each part's role)"
            }
            Self::Credentials => "credentials unusable",
            Self::Other => "request failed",
        }
    }
}

/// What etcd (or the connection) said: a status's message, then every source.
fn detail(e: &etcd_client::Error) -> String {
    let mut parts: Vec<String> = Vec::new();
    let mut next: Option<&(dyn std::error::Error + 'static)> = match e {
        etcd_client::Error::GRpcStatus(status) => {
            parts.push(status.message().to_owned());
            std::error::Error::source(status)
        }
        other => Some(other),
    };
    while let Some(err) = next {
        parts.push(err.to_string());
        next = err.source();
    }
    said_once(&parts)
}

/// The parts, each said once: tonic repeats a cause in the messages above it, and its
/// "transport error" says nothing.
fn said_once(parts: &[String]) -> String {
    let said_later = |i: usize, p: &String| parts[i + 1..].iter().any(|later| later.contains(p.as_str()));
    let kept: Vec<&str> = parts
        .iter()
        .enumerate()
        .filter(|(i, p)| p.as_str() != "transport error" && !said_later(*i, p))
        .map(|(_, p)| p.as_str())
        .collect();
    kept.join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: tonic::Code, message: &str) -> etcd_client::Error {
        etcd_client::Error::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn etcds_refusals_are_told_apart_from_an_outage() {
        let cases = [
            (
                status(
                    tonic::Code::InvalidArgument,
                    "etcdserver: authentication failed, invalid user ID or password",
                ),
                EtcdFailure::Authentication,
            ),
            (
                status(tonic::Code::Unauthenticated, "etcdserver: invalid auth token"),
                EtcdFailure::Authentication,
            ),
            (
                status(tonic::Code::InvalidArgument, "etcdserver: user name is empty"),
                EtcdFailure::Authentication,
            ),
            (
                status(tonic::Code::PermissionDenied, "etcdserver: permission denied"),
                EtcdFailure::PermissionDenied,
            ),
            (
                status(
                    tonic::Code::Unavailable,
                    "error trying to connect: invalid peer certificate: UnknownIssuer",
                ),
                EtcdFailure::Tls,
            ),
            (
                status(tonic::Code::Unavailable, "error trying to connect: tcp connect error"),
                EtcdFailure::Unreachable,
            ),
            (status(tonic::Code::DeadlineExceeded, "Timeout expired"), EtcdFailure::Unreachable),
            (status(tonic::Code::FailedPrecondition, "etcdserver: something else"), EtcdFailure::Other),
        ];
        for (error, failure) in cases {
            assert_eq!(EtcdFailure::of(&error), failure, "{error}");
            let refusal = matches!(
                failure,
                EtcdFailure::Authentication | EtcdFailure::PermissionDenied | EtcdFailure::Tls
            );
            assert_eq!(RegistryError::Etcd(error).is_refusal(), refusal);
        }
        let shown =
            RegistryError::Etcd(status(tonic::Code::PermissionDenied, "etcdserver: permission denied"));
        assert!(shown.to_string().starts_with("etcd denied the request"), "{shown}");
    }
}
