//! The election against etcd. A replica grants itself a lease of `--leader-lease-ttl-secs` and
//! creates `/infera/v1/control/leader` under it in one transaction, if the key does not exist;
//! the revision of that write is the new leader's term (its epoch). The leader renews its lease
//! every TTL/4 and checks that the key is still its own; each renewal moves its booking deadline
//! to when the lease could expire at the earliest ([`super::Leadership::extend`]). The others
//! watch the key and campaign when it goes: when the leader stops (it revokes its lease: the key
//! goes at once) or its lease expires (it died, hangs or lost etcd).
//!
//! A leader that cannot renew stops booking at its deadline by itself and steps down once it
//! notices; a new leader only takes over after etcd has expired the old lease, which is later
//! than the old leader's own deadline — so two controls never book at once.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use etcd_client::{
    Client, Compare, CompareOp, EventType, LeaseKeepAliveStream, LeaseKeeper, PutOptions, Txn, TxnOp,
    TxnOpResponse, WatchOptions,
};
use infera_registry::keys::CONTROL_LEADER;
use serde::{Deserialize, Serialize};
use tokio::sync::watch;

use super::{Leader, Leadership, Role, booking_margin};

/// What a control does when it wins or loses the election.
pub trait Takeover: Send + Sync + 'static {
    /// Won with term `epoch`; it books once this has returned (a fresh ledger of `epoch`, the
    /// persisted settings read again).
    fn elected(&self, epoch: u32) -> Pin<Box<dyn Future<Output = ()> + Send + '_>>;
    /// Lost: what it held is the next leader's.
    fn deposed(&self);
}

/// How to campaign.
#[derive(Clone, Debug)]
pub struct ElectionConfig {
    /// etcd: endpoints and credentials.
    pub etcd: infera_registry::EtcdConfig,
    /// This control's URL, written into the leader key.
    pub url: String,
    /// Its Admin URL when it serves Admin on a socket of its own (`--admin-listen`), written
    /// beside it: followers forward Admin calls there.
    pub admin_url: Option<String>,
    /// The leader lease's TTL (whole seconds in etcd, at least one).
    pub ttl: Duration,
}

/// The value of the leader key: `{"url": …}`, with `"admin_url"` when the leader serves Admin
/// apart. A record without it (an older leader, or one without `--admin-listen`) serves Admin at
/// `url`; an older follower ignores the field.
#[derive(Debug, PartialEq, Serialize, Deserialize)]
struct LeaderRecord {
    url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    admin_url: Option<String>,
}

enum Ended {
    Stopped,
    /// Lost or never won: campaign again.
    Again,
}

/// Campaigns, leads and follows until `stop` fires; a leader that stops revokes its lease so that
/// another takes over at once.
pub async fn run(
    config: ElectionConfig,
    leadership: Arc<Leadership>,
    takeover: Arc<dyn Takeover>,
    mut stop: watch::Receiver<()>,
) {
    let mut backoff = Duration::from_millis(100);
    loop {
        let result = round(&config, &leadership, &*takeover, &mut stop).await;
        if leadership.view().role == Role::Leader {
            leadership.follow(None);
            takeover.deposed();
            tracing::warn!("stepped down as leader");
        }
        match result {
            Ok(Ended::Stopped) => return,
            Ok(Ended::Again) => backoff = Duration::from_millis(100),
            Err(e) => {
                tracing::warn!(error = %e, retry_in = ?backoff, "election: etcd failed");
                backoff = (backoff * 2).min(Duration::from_secs(2));
            }
        }
        tokio::select! {
            _ = stop.changed() => return,
            () = tokio::time::sleep(backoff) => {}
        }
    }
}

fn ttl_secs(ttl: Duration) -> i64 {
    i64::try_from(ttl.as_secs_f64().ceil().max(1.0) as u64).unwrap_or(60)
}

async fn round(
    config: &ElectionConfig,
    leadership: &Leadership,
    takeover: &dyn Takeover,
    stop: &mut watch::Receiver<()>,
) -> Result<Ended, infera_registry::RegistryError> {
    let mut client = infera_registry::connect(&config.etcd).await?;
    loop {
        let sent = Instant::now();
        let grant = client.lease_grant(ttl_secs(config.ttl), None).await?;
        let (lease, granted) = (grant.id(), Duration::from_secs(u64::try_from(grant.ttl()).unwrap_or(1)));
        let record = LeaderRecord { url: config.url.clone(), admin_url: config.admin_url.clone() };
        let value = serde_json::to_vec(&record).expect("serializes");
        let txn = Txn::new()
            .when([Compare::create_revision(CONTROL_LEADER, CompareOp::Equal, 0)])
            .and_then([TxnOp::put(CONTROL_LEADER, value, Some(PutOptions::new().with_lease(lease)))])
            .or_else([TxnOp::get(CONTROL_LEADER, None)]);
        let resp = client.txn(txn).await?;
        let revision = resp.header().map_or(0, etcd_client::ResponseHeader::revision);
        if resp.succeeded() {
            // Terms are etcd revisions: they only grow. Ids carry their low 32 bits.
            let epoch = revision as u32;
            return Ok(
                lead(&mut client, lease, epoch, sent + granted, granted, leadership, takeover, stop).await?
            );
        }
        let _ = client.lease_revoke(lease).await;
        let current = resp.op_responses().into_iter().find_map(|op| match op {
            TxnOpResponse::Get(get) => get.kvs().first().map(|kv| leader(kv.value(), kv.create_revision())),
            _ => None,
        });
        let Some(current) = current else { continue };
        tracing::info!(leader = %current.url, admin = ?current.admin_url, "following the leader");
        leadership.follow(Some(current));
        let options = WatchOptions::new().with_start_revision(revision + 1);
        let mut events = client.watch(CONTROL_LEADER, Some(options)).await?;
        'follow: loop {
            let message = tokio::select! {
                _ = stop.changed() => return Ok(Ended::Stopped),
                m = events.message() => m?,
            };
            let Some(message) = message else { return Ok(Ended::Again) };
            for event in message.events() {
                match (event.event_type(), event.kv()) {
                    (EventType::Delete, _) => break 'follow,
                    (EventType::Put, Some(kv)) => {
                        leadership.follow(Some(leader(kv.value(), kv.create_revision())));
                    }
                    (EventType::Put, None) => {}
                }
            }
        }
        tracing::info!("the leader key is gone; campaigning");
    }
}

/// The leader a key's value (created at revision `created`, its term) names; an unreadable value
/// names no URL.
fn leader(value: &[u8], created: i64) -> Leader {
    let record = serde_json::from_slice::<LeaderRecord>(value)
        .unwrap_or(LeaderRecord { url: String::new(), admin_url: None });
    Leader { url: record.url, admin_url: record.admin_url, epoch: created as u32 }
}

/// Leads under `lease` until it cannot renew it (or the key is no longer its own), or `stop`.
#[allow(clippy::too_many_arguments)]
async fn lead(
    client: &mut Client,
    lease: i64,
    epoch: u32,
    mut expires: Instant,
    granted: Duration,
    leadership: &Leadership,
    takeover: &dyn Takeover,
    stop: &mut watch::Receiver<()>,
) -> Result<Ended, etcd_client::Error> {
    let margin = booking_margin(granted);
    takeover.elected(epoch).await;
    let now = Instant::now();
    leadership.lead(epoch, expires - margin, now);
    tracing::info!(epoch, ttl = ?granted, "elected leader");
    let every = (granted / 4).max(Duration::from_millis(100));
    let mut keeper: Option<(LeaseKeeper, LeaseKeepAliveStream)> = None;
    let mut events = client.watch(CONTROL_LEADER, None).await?;
    loop {
        tokio::select! {
            _ = stop.changed() => {
                let _ = tokio::time::timeout(Duration::from_secs(1), client.lease_revoke(lease)).await;
                return Ok(Ended::Stopped);
            }
            m = events.message() => {
                let lost = match m {
                    Ok(Some(message)) => message.events().iter().any(|e| match (e.event_type(), e.kv()) {
                        (EventType::Delete, _) => true,
                        (EventType::Put, Some(kv)) => kv.lease() != lease,
                        (EventType::Put, None) => false,
                    }),
                    // The watch broke: the renewals below still decide.
                    Ok(None) | Err(_) => {
                        events = client.watch(CONTROL_LEADER, None).await?;
                        false
                    }
                };
                if lost {
                    tracing::warn!("the leader key is no longer this control's");
                    return Ok(Ended::Again);
                }
            }
            () = tokio::time::sleep(every) => {
                let sent = Instant::now();
                match renew(client, lease, &mut keeper, every).await {
                    Some(ttl) if ttl > 0 => {
                        expires = sent + Duration::from_secs(u64::try_from(ttl).unwrap_or(0));
                        leadership.extend(expires - margin);
                    }
                    Some(_) => {
                        tracing::warn!("the leader lease expired");
                        return Ok(Ended::Again);
                    }
                    None if Instant::now() + margin >= expires => {
                        tracing::warn!("cannot renew the leader lease in time");
                        return Ok(Ended::Again);
                    }
                    None => {}
                }
            }
        }
    }
}

/// One renewal: the TTL etcd granted (0: the lease is gone), or `None` when etcd did not answer.
async fn renew(
    client: &mut Client,
    lease: i64,
    keeper: &mut Option<(LeaseKeeper, LeaseKeepAliveStream)>,
    wait: Duration,
) -> Option<i64> {
    let attempt = async {
        if keeper.is_none() {
            *keeper = Some(client.lease_keep_alive(lease).await.ok()?);
        }
        let (k, replies) = keeper.as_mut()?;
        k.keep_alive().await.ok()?;
        replies.message().await.ok()?.map(|r| r.ttl())
    };
    let ttl = tokio::time::timeout(wait, attempt).await.ok().flatten();
    if ttl.is_none() {
        *keeper = None;
    }
    ttl
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_with_and_without_an_admin_url_both_parse() {
        let old = leader(br#"{"url":"http://a:1"}"#, 7);
        assert_eq!(old, Leader { url: "http://a:1".into(), admin_url: None, epoch: 7 });
        let new = leader(br#"{"url":"http://a:1","admin_url":"http://a:2"}"#, 8);
        assert_eq!(new.admin_url.as_deref(), Some("http://a:2"));
        // Without --admin-listen the record is what it always was.
        let plain = LeaderRecord { url: "http://a:1".into(), admin_url: None };
        assert_eq!(serde_json::to_string(&plain).unwrap(), r#"{"url":"http://a:1"}"#);
        assert_eq!(leader(b"not json", 1).url, "");
    }
}
