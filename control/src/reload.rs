//! SIGHUP: every file control can read again while it runs — the TLS files (`--tls-cert`,
//! `--tls-key`, `--tls-client-ca`, and `--tls-peer-ca` with this replica's own certificate) and
//! the Router's tokens (`--router-tokens`). A file that does not load is logged and counted, and
//! what is in force stays.

use std::sync::Arc;

use crate::auth::metrics::AuthMetrics;
use crate::auth::tokens::Tokens;
use crate::config::ControlTls;
use crate::tls::TlsMetrics;

/// What SIGHUP reads again, each with its metrics.
#[derive(Debug, Default)]
pub struct Reloadable {
    /// The TLS files (`--tls-cert`).
    pub tls: Option<(ControlTls, TlsMetrics)>,
    /// The Router's tokens (`--router-tokens`).
    pub tokens: Option<(Arc<Tokens>, AuthMetrics)>,
}

/// Reads `what` again on every SIGHUP (nothing to read: no handler).
///
/// # Errors
/// The signal handler cannot be installed.
pub fn on_sighup(what: Reloadable) -> std::io::Result<()> {
    if what.tls.is_none() && what.tokens.is_none() {
        return Ok(());
    }
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move {
        while hangups.recv().await.is_some() {
            if let Some((tls, metrics)) = &what.tls {
                metrics.reloaded("server", &tls.server.reload());
                metrics.reloaded("peers", &tls.peers.reload());
            }
            if let Some((tokens, metrics)) = &what.tokens {
                crate::auth::reload(tokens, metrics);
            }
        }
    });
    Ok(())
}
