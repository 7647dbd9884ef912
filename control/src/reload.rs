//! SIGHUP: every file control can read again while it runs — the TLS files (`--tls-cert`,
//! `--tls-key`, `--tls-client-ca`, and `--tls-peer-ca` with this replica's own certificate) and
//! the Router's tokens (`--router-tokens`) and the class book (`--service-classes`). A file that does not load is logged and counted, and
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
    /// The class book (`--service-classes`) and the state it is in force in.
    pub classes: Option<(std::path::PathBuf, Arc<crate::state::ControlState>)>,
}

/// Reads `what` again on every SIGHUP (nothing to read: no handler).
///
/// # Errors
/// The signal handler cannot be installed.
pub fn on_sighup(what: Reloadable) -> std::io::Result<()> {
    if what.tls.is_none() && what.tokens.is_none() && what.classes.is_none() {
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
            if let Some((path, state)) = &what.classes {
                match crate::classes::ClassBook::load(path) {
                    Ok(book) => {
                        tracing::info!(classes = book.classes().count(), "service classes reloaded");
                        state.replace_classes(book);
                    }
                    Err(e) => {
                        tracing::error!(error = %e, "service classes not reloaded: the classes in force stay")
                    }
                }
            }
        }
    });
    Ok(())
}
