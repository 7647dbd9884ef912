//! Admin calls that reach a follower go to the leader: the follower calls the same method on the
//! leader's Admin URL (the leader key's `admin_url` when the leader serves Admin apart, else its
//! URL; manual/operations/ha.md) with the caller's `authorization` and hands back the leader's
//! answer (or its status),
//! so an operator may point grpcurl at any replica (or at a Service in front of all of them).
//! A call forwarded once is never forwarded again (`infera-forwarded`): a replica that does not
//! lead either refuses it with `NOT_LEADER`.
//!
//! A replica that serves TLS forwards over TLS only: a leader that advertises a plain `http://`
//! URL is refused (`PLAINTEXT_LEADER`, counted in `infera_control_plaintext_leaders_refused_total`)
//! rather than sent the caller's admin token and the answer in clear.

use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use infera_proto::pb::admin_client::AdminClient;
use prometheus_client::metrics::counter::Counter;
use tonic::transport::{Channel, Endpoint};
use tonic::{Request, Response, Status};

use crate::error::ControlError;
use crate::tls::PeerTls;

/// Metadata a forwarded call carries.
const FORWARDED: &str = "infera-forwarded";
/// How long a forwarded call may take.
const FORWARD_TIMEOUT: Duration = Duration::from_secs(10);

/// The leader's channel, and what it was made with.
#[derive(Debug)]
struct LeaderChannel {
    url: String,
    tls: Option<Arc<tonic::transport::ClientTlsConfig>>,
    client: AdminClient<Channel>,
}

/// A channel to the leader, kept while the leader (and the TLS in force) stays the same.
#[derive(Debug, Default)]
pub(super) struct Forwarder {
    /// For an `https://` leader (`None`: this replica has no `--tls-cert`, and reaches only
    /// `http://` leaders; `Some`: it reaches only `https://` ones).
    peers: Option<Arc<PeerTls>>,
    leader: Mutex<Option<LeaderChannel>>,
    /// Forwards refused because the leader's URL is plain text.
    downgrades: Counter,
}

impl Forwarder {
    /// Reaching `https://` leaders with `peers`; `downgrades` counts the plain-text leaders refused.
    pub(super) fn new(peers: Option<Arc<PeerTls>>, downgrades: Counter) -> Self {
        Self { peers, leader: Mutex::new(None), downgrades }
    }

    fn client(&self, url: &str) -> Result<AdminClient<Channel>, Status> {
        let https = url.starts_with("https://");
        let tls = match (&self.peers, https) {
            (Some(peers), true) => Some(peers.current()),
            (None, true) => {
                return Err(Status::unavailable(format!(
                    "the leader {url} serves TLS and this replica has no --tls-cert to reach it with"
                )));
            }
            (Some(_), false) => {
                self.downgrades.inc();
                tracing::warn!(leader = %url, "not forwarding an Admin call in clear to a plain-text leader");
                return Err(ControlError::PlaintextLeader { leader: url.to_owned() }.into());
            }
            (None, false) => None,
        };
        let mut leader = self.leader.lock().expect("forwarder lock");
        if let Some(known) = leader.as_ref()
            && known.url == url
            && known.tls.as_ref().map(Arc::as_ptr) == tls.as_ref().map(Arc::as_ptr)
        {
            return Ok(known.client.clone());
        }
        let mut endpoint = Endpoint::from_shared(url.to_owned())
            .map_err(|e| Status::internal(format!("the leader's URL {url:?} is not a URL: {e}")))?
            .connect_timeout(Duration::from_secs(2))
            .tcp_nodelay(true);
        if let Some(tls) = &tls {
            endpoint = endpoint
                .tls_config((**tls).clone())
                .map_err(|e| Status::internal(format!("TLS to the leader {url}: {e}")))?;
        }
        let client = AdminClient::new(endpoint.connect_lazy());
        *leader = Some(LeaderChannel { url: url.to_owned(), tls, client: client.clone() });
        Ok(client)
    }

    /// Sends `req` to `leader` through `call` (the same method); a call that was forwarded
    /// already, or no known leader, is `NOT_LEADER`.
    pub(super) async fn forward<T, U, F, Fut>(
        &self,
        leader: Option<String>,
        req: Request<T>,
        call: F,
    ) -> Result<Response<U>, Status>
    where
        F: FnOnce(AdminClient<Channel>, Request<T>) -> Fut,
        Fut: Future<Output = Result<Response<U>, Status>>,
    {
        let not_leader = |leader| Status::from(ControlError::NotLeader { leader, lapsed: false });
        if req.metadata().contains_key(FORWARDED) {
            return Err(not_leader(leader));
        }
        let Some(url) = leader else { return Err(not_leader(None)) };
        let client = self.client(&url)?;
        let auth = req.metadata().get("authorization").cloned();
        let mut out = Request::new(req.into_inner());
        out.set_timeout(FORWARD_TIMEOUT);
        out.metadata_mut().insert(FORWARDED, tonic::metadata::MetadataValue::from_static("1"));
        if let Some(auth) = auth {
            out.metadata_mut().insert("authorization", auth);
        }
        call(client, out).await
    }
}
