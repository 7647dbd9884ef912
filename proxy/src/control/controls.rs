//! The control replicas this proxy knows (`--control a,b,c`) and which of them it talks to. Picks,
//! releases and the lease go to the current one; the lease loop moves on when it does not answer
//! (to the next address, in turn) or answers `NOT_LEADER` (to the leader it names, added to the
//! set when it is not one of the flags'). `https://` replicas are reached with the TLS of
//! `--control-ca`/`--control-cert`, which SIGHUP can replace ([`Controls::set_tls`]). Every call
//! carries the proxy's token when it has one ([`Bearer`]).
//!
//! No downgrade: a proxy whose replicas are `https://` (the configuration refuses a list that
//! mixes schemes) never follows a leader named at a plain `http://` URL ([`Follow::Plaintext`]):
//! its token and its ledger would go out in clear to whoever answered.

use std::sync::RwLock;
use std::time::Duration;

use infera_proto::pb::router_client::RouterClient;
use tonic::transport::{ClientTlsConfig, Endpoint as GrpcEndpoint};

use prometheus_client::metrics::counter::Counter;

use super::credential::{Bearer, RouterCalls};

/// One replica: its URL and a lazily connected client.
#[derive(Clone, Debug)]
struct Replica {
    url: String,
    client: RouterCalls,
}

/// What became of a leader a replica named.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Follow {
    /// It is current now.
    Followed,
    /// Its URL is no URL (or `https://` without TLS configured).
    NotAUrl,
    /// Its URL is plain `http://` while this proxy reaches control over TLS: refused.
    Plaintext,
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
    /// For `https://` replicas (`None`: the config has no `https://` URL, so none is used; `Some`:
    /// every replica is `https://`, and only `https://` leaders are followed).
    tls: Option<ClientTlsConfig>,
    /// The proxy's token, on every call.
    bearer: Bearer,
}

/// The known replicas and the current one.
#[derive(Debug)]
pub(super) struct Controls {
    set: RwLock<Set>,
    /// Leaders not followed because their URL is plain text.
    plaintext_leaders: Counter,
}

/// A lazily connected client of `url` carrying `bearer`; `None` for no URL, or an `https://` one
/// without TLS.
fn connect(url: &str, tls: Option<&ClientTlsConfig>, bearer: &Bearer) -> Option<Replica> {
    let mut endpoint = GrpcEndpoint::from_shared(url.to_owned()).ok()?;
    if url.starts_with("https://") {
        endpoint = endpoint.tls_config(tls?.clone()).ok()?;
    }
    let channel = endpoint
        .connect_timeout(Duration::from_secs(1))
        .tcp_nodelay(true)
        .http2_keep_alive_interval(Duration::from_secs(10))
        .connect_lazy();
    Some(Replica { url: url.to_owned(), client: RouterClient::with_interceptor(channel, bearer.clone()) })
}

impl Controls {
    /// The replicas at `urls` (checked by the config, with `tls` when they are `https://`), the
    /// first one current; every call carries `bearer`; `plaintext_leaders` counts the leaders
    /// refused for a plain-text URL.
    pub(super) fn new(
        urls: &[http::Uri],
        tls: Option<ClientTlsConfig>,
        bearer: Bearer,
        plaintext_leaders: Counter,
    ) -> Self {
        let replicas: Vec<Replica> = urls
            .iter()
            .filter_map(|u| connect(u.to_string().trim_end_matches('/'), tls.as_ref(), &bearer))
            .collect();
        assert!(!replicas.is_empty(), "the config gives at least one usable control URL");
        Self { set: RwLock::new(Set { replicas, current: 0, tls, bearer }), plaintext_leaders }
    }

    /// New TLS files (SIGHUP): every replica gets a new channel with them; calls already out
    /// finish on the old one.
    pub(super) fn set_tls(&self, tls: ClientTlsConfig) {
        let mut set = self.set.write().expect("controls lock");
        set.tls = Some(tls);
        let fresh: Vec<Replica> =
            set.replicas.iter().filter_map(|r| connect(&r.url, set.tls.as_ref(), &set.bearer)).collect();
        if fresh.len() == set.replicas.len() {
            set.replicas = fresh;
        }
    }

    /// The current replica's client and place.
    pub(super) fn current(&self) -> (ReplicaIndex, RouterCalls) {
        let set = self.set.read().expect("controls lock");
        (ReplicaIndex(set.current), set.replicas[set.current].client.clone())
    }

    /// The client of the replica at `at`.
    pub(super) fn client(&self, at: ReplicaIndex) -> RouterCalls {
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

    /// A replica said `leader` leads: it becomes current, unless its URL is no URL or would
    /// take this proxy from TLS to plain text.
    pub(super) fn follow(&self, leader: &str) -> Follow {
        let leader = leader.trim_end_matches('/');
        let mut set = self.set.write().expect("controls lock");
        if set.tls.is_some() && !leader.starts_with("https://") {
            self.plaintext_leaders.inc();
            tracing::error!(
                %leader,
                "a control replica named a plain-text leader while this proxy reaches control over TLS: not \
                 followed (give every replica --tls-cert so that each advertises https://)"
            );
            return Follow::Plaintext;
        }
        if let Some(i) = set.replicas.iter().position(|r| r.url == leader) {
            set.current = i;
            return Follow::Followed;
        }
        let Some(replica) = connect(leader, set.tls.as_ref(), &set.bearer) else { return Follow::NotAUrl };
        set.replicas.push(replica);
        set.current = set.replicas.len() - 1;
        Follow::Followed
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
        let c = Controls::new(&urls, None, Bearer::default(), Counter::default());
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
        assert_eq!(c.follow("http://b:1"), Follow::Followed);
        assert_eq!(c.current().0, second);
        assert_eq!(c.follow("http://c:7"), Follow::Followed);
        assert_eq!((c.url(c.current().0), c.len()), ("http://c:7".to_owned(), 3));
        assert_eq!(c.follow("not a url"), Follow::NotAUrl);
        assert_eq!(
            c.follow("https://d:1"),
            Follow::NotAUrl,
            "no TLS configured: an https leader cannot be reached"
        );
    }

    #[tokio::test]
    async fn a_proxy_over_tls_never_follows_a_plain_text_leader() {
        let urls: Vec<http::Uri> =
            ["https://a:1", "https://b:1"].iter().map(|u| u.parse().unwrap()).collect();
        let refused = Counter::default();
        let c = Controls::new(&urls, Some(ClientTlsConfig::new()), Bearer::default(), refused.clone());
        for leader in ["http://a:1", "http://evil:50051", "HTTP://evil:1", "evil:1"] {
            assert_eq!(c.follow(leader), Follow::Plaintext, "{leader}");
        }
        assert_eq!((c.url(c.current().0), c.len()), ("https://a:1".to_owned(), 2), "nothing moved");
        assert_eq!(refused.get(), 4);
        assert_eq!(c.follow("https://c:1"), Follow::Followed);
        assert_eq!(c.url(c.current().0), "https://c:1");
    }
}
