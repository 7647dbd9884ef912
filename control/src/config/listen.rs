//! The Listen flags: the gRPC socket, the metrics socket, and optionally a socket of its own for
//! the Admin service (`--admin-listen`), so that a network policy that sees only addresses and
//! ports can let proxies reach Router and operators reach Admin
//! (manual/operations/security.md, "A separate Admin socket").

use std::net::SocketAddr;

use clap::Args as ClapArgs;
use infera_proto::types::same_socket;

#[derive(ClapArgs, Debug)]
#[command(next_help_heading = "Listen")]
pub(super) struct ListenArgs {
    /// gRPC address (Router, health, reflection; Admin too unless --admin-listen is given).
    /// Port 0 picks a free port.
    #[arg(long, env = "INFERA_CONTROL_LISTEN", default_value = "127.0.0.1:50051")]
    pub(super) listen: SocketAddr,
    /// Serve the Admin service on this address instead of --listen (with health and
    /// reflection), so network policies can tell operators from proxies. Port 0 picks a free
    /// port. Unset: Admin is served on --listen.
    #[arg(long, env = "INFERA_CONTROL_ADMIN_LISTEN", value_name = "ADDR")]
    pub(super) admin_listen: Option<SocketAddr>,
    /// Prometheus `/metrics` address. Port 0 picks a free port.
    #[arg(long, env = "INFERA_CONTROL_METRICS_LISTEN", default_value = "127.0.0.1:9464")]
    pub(super) metrics_listen: SocketAddr,
}

/// Listen flags that do not go together (exit 64).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ListenError {
    /// `--admin-advertise-url` names a socket that is not served.
    #[error(
        "--admin-advertise-url {0} needs --admin-listen: without it Admin is served on --listen, \
         whose URL is --advertise-url"
    )]
    AdminAdvertiseWithoutAdminListen(String),
    /// `--admin-listen` is (or overlaps) `--listen`'s address.
    #[error(
        "--admin-listen {admin} is the address of --listen {listen}: the Admin socket needs an \
         address of its own (leave --admin-listen unset to serve Admin on --listen)"
    )]
    AdminListenIsListen {
        /// `--admin-listen`.
        admin: SocketAddr,
        /// `--listen`.
        listen: SocketAddr,
    },
}

impl ListenArgs {
    /// Checks `--admin-listen` against `--listen`, and `--admin-advertise-url` against both.
    pub(super) fn check(&self, admin_advertise_url: Option<&str>) -> Result<(), ListenError> {
        match (self.admin_listen, admin_advertise_url) {
            (None, Some(url)) => Err(ListenError::AdminAdvertiseWithoutAdminListen(url.to_owned())),
            (Some(admin), _) if same_socket(admin, self.listen) => {
                Err(ListenError::AdminListenIsListen { admin, listen: self.listen })
            }
            _ => Ok(()),
        }
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
    fn admin_listen_is_optional_and_takes_its_own_address() {
        let c = config(&[]).unwrap();
        assert_eq!((c.admin_listen, c.admin_advertise_url), (None, None));
        let c = config(&[
            "--admin-listen",
            "127.0.0.1:50052",
            "--admin-advertise-url",
            "http://control-admin:50052",
        ])
        .unwrap();
        assert_eq!(c.admin_listen, Some("127.0.0.1:50052".parse().unwrap()));
        assert_eq!(c.admin_advertise_url.as_deref(), Some("http://control-admin:50052"));
        // Port 0 on both: two free ports, two sockets.
        config(&["--listen", "127.0.0.1:0", "--admin-listen", "127.0.0.1:0"]).unwrap();
        // Another address on the same port is another socket.
        config(&[
            "--listen",
            "10.0.0.1:50051",
            "--admin-listen",
            "10.0.0.2:50051",
            "--router-allow-unauthenticated",
        ])
        .unwrap();
    }

    #[test]
    fn admin_advertise_url_without_admin_listen_is_refused() {
        let e = config(&["--admin-advertise-url", "http://a:1"]).unwrap_err();
        assert!(
            matches!(e, ConfigError::Listen(super::ListenError::AdminAdvertiseWithoutAdminListen(_))),
            "{e}"
        );
        assert!(e.to_string().contains("--admin-advertise-url http://a:1 needs --admin-listen"), "{e}");
    }

    #[test]
    fn admin_listen_on_the_listen_address_is_refused() {
        for (listen, admin) in [
            ("127.0.0.1:50051", "127.0.0.1:50051"),
            ("0.0.0.0:50051", "127.0.0.1:50051"),
            ("127.0.0.1:50051", "[::]:50051"),
        ] {
            let e = config(&["--listen", listen, "--admin-listen", admin]).unwrap_err();
            assert!(matches!(e, ConfigError::Listen(super::ListenError::AdminListenIsListen { .. })), "{e}");
            assert!(e.to_string().contains("needs an address of its own"), "{e}");
        }
    }
}
