//! The Router's credentials: a proxy tokens file (`--router-tokens`), client certificates
//! (`--tls-client-ca`, in the TLS flags), and what happens with neither. An open Router is allowed
//! on a loopback `--listen` (a developer's machine, the test suite, `cargo xtask demo`); on any
//! other address control refuses to start unless `--router-allow-unauthenticated` says the open
//! Router is meant (manual/operations/security.md, "What the Router trusts").

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args as ClapArgs;

use crate::auth::RouterCredentials;
use crate::auth::tokens::{Tokens, TokensError};

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Router authentication")]
pub(super) struct RouterAuthArgs {
    /// The proxies' tokens (TOML `[[tokens]]`, each an `identity` and its token's `sha256`, or the
    /// `token` itself): every Router call must then carry `authorization: Bearer <token>` (or, with
    /// --tls-client-ca, a client certificate), and acts only on the leases and reservations of the
    /// identity it proves. Read again on SIGHUP.
    #[arg(long, env = "INFERA_CONTROL_ROUTER_TOKENS", value_name = "FILE")]
    router_tokens: Option<PathBuf>,
    /// Serve the Router without credentials (no --router-tokens, no --tls-client-ca) on a
    /// --listen address that is not loopback: anyone who reaches the port can then open leases
    /// and release every proxy's bookings. Without it such a control does not start.
    #[arg(long, env = "INFERA_CONTROL_ROUTER_ALLOW_UNAUTHENTICATED")]
    router_allow_unauthenticated: bool,
}

/// The Router's credentials cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum RouterAuthError {
    /// The tokens file.
    #[error(transparent)]
    Tokens(#[from] TokensError),
    /// No credential, on an address others can reach, and no word that this is meant.
    #[error(
        "--listen {listen} is not a loopback address and the Router asks no credential: anyone who \
         reaches it could open leases and release every proxy's bookings. Give --router-tokens or \
         --tls-client-ca (manual/operations/security.md), or --router-allow-unauthenticated to \
         serve it open anyway"
    )]
    OpenRouter {
        /// `--listen`.
        listen: SocketAddr,
    },
}

impl RouterAuthArgs {
    /// The credentials, with `certificates` when --tls-client-ca is given; an open Router only on
    /// a loopback `listen` unless allowed.
    pub(super) fn into_credentials(
        self,
        certificates: bool,
        listen: SocketAddr,
    ) -> Result<RouterCredentials, RouterAuthError> {
        let tokens = self.router_tokens.map(Tokens::load).transpose()?.map(Arc::new);
        let credentials = RouterCredentials { tokens, certificates };
        if credentials.is_open() && !listen.ip().is_loopback() && !self.router_allow_unauthenticated {
            return Err(RouterAuthError::OpenRouter { listen });
        }
        Ok(credentials)
    }
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use crate::config::{Args, Config, ConfigError};

    fn config(extra: &[&str]) -> Result<Config, ConfigError> {
        let argv = [&["infera-control", "--workers", "/dev/null"][..], extra].concat();
        Config::try_from(Args::try_parse_from(argv).unwrap())
    }

    #[test]
    fn an_open_router_is_allowed_on_loopback_only_unless_asked_for() {
        assert!(config(&[]).unwrap().router.is_open(), "the default --listen is 127.0.0.1");
        assert!(config(&["--listen", "[::1]:0"]).unwrap().router.is_open());
        let e = config(&["--listen", "0.0.0.0:50051"]).unwrap_err();
        assert!(e.to_string().contains("--router-tokens or --tls-client-ca"), "{e}");
        assert!(
            config(&["--listen", "10.0.0.1:50051", "--router-allow-unauthenticated"])
                .unwrap()
                .router
                .is_open()
        );
    }

    #[test]
    fn a_tokens_file_is_read_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("tokens.toml");
        std::fs::write(&path, "[[tokens]]\nidentity = \"p\"\ntoken = \"0123456789abcdef0123\"\n").unwrap();
        let c = config(&["--listen", "0.0.0.0:50051", "--router-tokens", path.to_str().unwrap()]).unwrap();
        assert!(!c.router.is_open() && c.router.tokens.is_some() && !c.router.certificates);
        let e = config(&["--router-tokens", "/nonexistent/tokens.toml"]).unwrap_err();
        assert!(e.to_string().contains("--router-tokens /nonexistent/tokens.toml"), "{e}");
    }
}
