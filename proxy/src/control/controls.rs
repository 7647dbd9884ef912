//! The control replicas this proxy knows (`--control a,b,c`) and which of them it talks to. Picks,
//! releases and the lease go to the current one; the lease loop moves on when it does not answer
//! (to the next address, in turn) or answers `NOT_LEADER` (to the leader it names, added to the
//! set when it is not one of the flags'). `https://` replicas are reached with the TLS of
//! `--control-ca`/`--control-cert`, which SIGHUP can replace ([`Controls::set_tls`]).

use std::sync::RwLock;
use std::time::Duration;

use infera_proto::pb::router_client::RouterClient;
use tonic::transport::{Channel, ClientTlsConfig, Endpoint as GrpcEndpoint};

/// One replica: its URL and a lazily connected client.
#[derive(Clone, Debug)]
struct Replica {
    url: String,
    client: RouterClient<Channel>,
}

/// A replica by its place in the set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct ReplicaIndex(usize);

impl ReplicaIndex {
    /// The first replica of the flags.
    pub(super) const FIRST: Self = Self(0);
}

#[derive(Debug)]
struct Set {
    replicas: Vec<Replica>,
    current: usize,
    /// For `https://` replicas (`None`: the config has no `https://` URL, so none is used).
    tls: Option<ClientTlsConfig>,
}

/// The known replicas and the current one.
#[derive(Debug)]
pub(super) struct Controls {
    set: RwLock<Set>,
}

/// A lazily connected client of `url`; `None` for no URL, or an `https://` one without TLS.
fn connect(url: &str, tls: Option<&ClientTlsConfig>) -> Option<Replica> {
    let mut endpoint = GrpcEndpoint::from_shared(url.to_owned()).ok()?;
    if url.starts_with("https://") {
        endpoint = endpoint.tls_config(tls?.clone()).ok()?;
    }
    let channel = endpoint
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .connect_lazy();
    Some(Replica { url: url.to_owned(), client: RouterClient::new(channel) })
}

impl Controls {
    /// The replicas at `urls` (checked by the config, with `tls` when one is `https://`), the
    /// first one current.
    pub(super) fn new(urls: &[http::Uri], tls: Option<ClientTlsConfig>) -> Self {
        let replicas: Vec<Replica> =
            urls.iter().filter_map(|u| connect(u.to_string().trim_end_matches('/'), tls.as_ref())).collect();
        assert!(!replicas.is_empty(), "the config gives at least one usable control URL");
        Self { set: RwLock::new(Set { replicas, current: 0, tls }) }
    }

    /// New TLS files (SIGHUP): every replica gets a new channel with them; calls already out
    /// finish on the old one.
    pub(super) fn set_tls(&self, tls: ClientTlsConfig) {
        let mut set = self.set.write().expect("controls lock");
        set.tls = Some(tls);
        let fresh: Vec<Replica> =
            set.replicas.iter().filter_map(|r| connect(&r.url, set.tls.as_ref())).collect();
        if fresh.len() == set.replicas.len() {
            set.replicas = fresh;
        }
    }

    /// The current replica's client and place.
    pub(super) fn current(&self) -> (ReplicaIndex, RouterClient<Channel>) {
        let set = self.set.read().expect("controls lock");
        (ReplicaIndex(set.current), set.replicas[set.current].client.clone())
    }

    /// The client of the replica at `at`.
    pub(super) fn client(&self, at: ReplicaIndex) -> RouterClient<Channel> {
        let set = self.set.read().expect("controls lock");
        set.replicas[at.0.min(set.replicas.len() - 1)].client.clone()
    }

    /// The URL of the replica at `at`.
    pub(super) fn url(&self, at: ReplicaIndex) -> String {
        let set = self.set.read().expect("controls lock");
        set.replicas[at.0.min(set.replicas.len() - 1)].url.clone()
    }

    /// `at` did not answer: the next replica becomes current (unless another call moved on
    /// already).
    pub(super) fn next_after(&self, at: ReplicaIndex) {
        let mut set = self.set.write().expect("controls lock");
        if set.current == at.0 {
            set.current = (at.0 + 1) % set.replicas.len();
        }
    }

    /// A replica said `leader` leads: it becomes current. `false` when the URL is no URL.
    pub(super) fn follow(&self, leader: &str) -> bool {
        let leader = leader.trim_end_matches('/');
        let mut set = self.set.write().expect("controls lock");
        if let Some(i) = set.replicas.iter().position(|r| r.url == leader) {
            set.current = i;
            return true;
        }
        let Some(replica) = connect(leader, set.tls.as_ref()) else { return false };
        set.replicas.push(replica);
        set.current = set.replicas.len() - 1;
        true
    }

    /// How many replicas are known.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.set.read().expect("controls lock").replicas.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_current_replica_moves_on_in_turn_and_to_a_named_leader() {
        let urls: Vec<http::Uri> = ["http://a:1", "http://b:1/"].iter().map(|u| u.parse().unwrap()).collect();
        let c = Controls::new(&urls, None);
        let (first, _) = c.current();
        assert_eq!(c.url(first), "http://a:1");
        c.next_after(first);
        let (second, _) = c.current();
        assert_eq!(c.url(second), "http://b:1");
        // A stale report about `first` does not move the current replica again.
        c.next_after(first);
        assert_eq!(c.current().0, second);
        c.next_after(second);
        assert_eq!(c.current().0, first);
        assert!(c.follow("http://b:1"));
        assert_eq!(c.current().0, second);
        assert!(c.follow("http://c:7"));
        assert_eq!((c.url(c.current().0), c.len()), ("http://c:7".to_owned(), 3));
        assert!(!c.follow("not a url"));
        assert!(!c.follow("https://d:1"), "no TLS configured: an https leader cannot be reached");
    }
}
