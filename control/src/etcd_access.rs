//! Control's access to etcd, checked once at start: a refusal (a certificate etcd does not
//! accept, a wrong password, a user without control's role) stops control with the cause, since
//! waiting cannot fix it; an etcd that does not answer is an outage, waited out as before (the
//! registry watch and the election retry). Later refusals are outages too: the last view stands.

use std::time::Duration;

use etcd_client::GetOptions;
use infera_registry::{EtcdConfig, RegistryError, keys};

/// How long the check waits for etcd before treating it as an outage.
const WAIT: Duration = Duration::from_secs(3);

/// Why control does not start.
#[derive(Debug, thiserror::Error)]
#[error("etcd at {endpoints} refused control{who}: {cause}")]
pub struct EtcdRefused {
    /// The endpoints.
    endpoints: String,
    /// ` (user NAME)` when it authenticates with a password.
    who: String,
    /// What etcd said (in the message: no source to repeat it).
    cause: RegistryError,
}

/// Reads one key name of the workers' prefix (what control needs first): `Err` when etcd
/// refuses control; `Ok` when it reads, and when etcd does not answer (logged).
pub async fn check(etcd: &EtcdConfig) -> Result<(), EtcdRefused> {
    let read = async {
        let mut client = infera_registry::connect(etcd).await?;
        let options = GetOptions::new().with_prefix().with_keys_only().with_limit(1);
        client.get(keys::WORKERS, Some(options)).await?;
        Ok::<(), RegistryError>(())
    };
    match tokio::time::timeout(WAIT, read).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(source)) if source.is_refusal() => Err(EtcdRefused {
            endpoints: etcd.endpoints().join(","),
            who: etcd.user().map(|u| format!(" (user {u})")).unwrap_or_default(),
            cause: source,
        }),
        Ok(Err(e)) => {
            tracing::warn!(error = %e, "etcd does not answer at start; following it once it does");
            Ok(())
        }
        Err(_) => {
            tracing::warn!("etcd did not answer in {WAIT:?} at start; following it once it does");
            Ok(())
        }
    }
}
