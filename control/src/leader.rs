//! Who books: with `--etcd`, several controls run side by side and elect one leader through etcd
//! (`election`); only the leader books, the others refuse Router calls with `NOT_LEADER` naming
//! the leader and forward Admin calls to it. Without etcd a control is `standalone` and always
//! leads.
//!
//! [`Leadership`] is what the rest of control reads: the role, the leader's URL and term, and the
//! gate every booking passes. The gate is a deadline, not a flag: the leader may book until its
//! etcd lease could have expired as of its last confirmed keep-alive (sent at `t`, granted for
//! `ttl`: until `t + ttl`), so a leader that was paused (SIGSTOP) or cut off from etcd refuses
//! the moment it runs again — before it has heard that it lost — and never books beside a new
//! leader. The term (the etcd revision that created the leader key) is the epoch in every lease
//! and reservation id the leader hands out, so ids of two leaders never collide.
//!
//! - `election`: the campaign, keep-alive and watch against etcd.
//! - `holders`: the proxies that hold leases, written to etcd so that a new leader knows whom to
//!   wait for.
//! - `warmth`: when a new leader's ledger holds what the proxies hold again.
//! - `metrics`: who leads, takeovers, warmth, re-declared legs, refusals.

pub mod election;
pub mod holders;
pub mod metrics;
pub mod warmth;

use std::sync::RwLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use crate::error::ControlError;

/// This control's part in its replica set.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    /// No etcd: the only control, always leading.
    Standalone,
    /// Elected: books.
    Leader,
    /// Another control leads (or none yet): books nothing.
    Follower,
}

impl Role {
    /// The spelling of `GetConfig` and the logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Standalone => "standalone",
            Self::Leader => "leader",
            Self::Follower => "follower",
        }
    }
}

/// What an operator (and `GetConfig`) sees of the leadership.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeadershipView {
    /// This control's role.
    pub role: Role,
    /// This control's URL.
    pub url: String,
    /// This control's Admin URL, when it serves Admin on a socket of its own (`--admin-listen`).
    pub admin_url: Option<String>,
    /// The leader's URL, when one is known.
    pub leader_url: Option<String>,
    /// The leader's Admin URL, when it serves Admin on a socket of its own.
    pub leader_admin_url: Option<String>,
    /// The leader's term; 0 while none is known.
    pub epoch: u32,
    /// When this control took over (leader and standalone).
    pub since: Option<Instant>,
    /// The same, on the wall clock (for operators).
    pub since_wall: Option<SystemTime>,
}

/// The leader as a follower knows it from the leader key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leader {
    /// Its URL (Router, and Admin unless `admin_url` is given).
    pub url: String,
    /// Where it serves Admin, when on a socket of its own.
    pub admin_url: Option<String>,
    /// Its term.
    pub epoch: u32,
}

/// The leadership as the rest of control reads it: the role, the leader, and the booking gate.
#[derive(Debug)]
pub struct Leadership {
    /// Instants are stored as nanoseconds after this one.
    base: Instant,
    /// May book while `now - base` is below this (nanoseconds); 0 = never, `u64::MAX` = always.
    book_until: AtomicU64,
    view: RwLock<LeadershipView>,
}

impl Leadership {
    /// A control without etcd: it leads from the start, with ids of `epoch`.
    pub fn standalone(url: String, epoch: u32, now: Instant) -> Self {
        let view = LeadershipView {
            role: Role::Standalone,
            leader_url: Some(url.clone()),
            url,
            admin_url: None,
            leader_admin_url: None,
            epoch,
            since: Some(now),
            since_wall: Some(SystemTime::now()),
        };
        Self { base: now, book_until: AtomicU64::new(u64::MAX), view: RwLock::new(view) }
    }

    /// A replica that has not won an election (yet): it books nothing.
    pub fn candidate(url: String, now: Instant) -> Self {
        let view = LeadershipView {
            role: Role::Follower,
            url,
            admin_url: None,
            leader_url: None,
            leader_admin_url: None,
            epoch: 0,
            since: None,
            since_wall: None,
        };
        Self { base: now, book_until: AtomicU64::new(0), view: RwLock::new(view) }
    }

    /// This control serves Admin at `admin_url` (`--admin-listen`), not at its URL: followers
    /// forward Admin calls there once it leads.
    pub fn serving_admin_at(self, admin_url: Option<String>) -> Self {
        {
            let mut view = self.view.write().expect("leadership lock");
            if view.role == Role::Standalone {
                view.leader_admin_url.clone_from(&admin_url);
            }
            view.admin_url = admin_url;
        }
        self
    }

    /// Whether this control may book at `now`; the refusal names the leader when one is known.
    /// One atomic load when it may.
    pub fn check(&self, now: Instant) -> Result<(), ControlError> {
        let until = self.book_until.load(Ordering::Acquire);
        if until == u64::MAX || self.nanos(now) < until {
            return Ok(());
        }
        let view = self.view();
        let lapsed = view.role == Role::Leader;
        let leader = if lapsed { None } else { view.leader_url };
        Err(ControlError::NotLeader { leader, lapsed })
    }

    /// Where Admin calls go when this control does not lead: `None` when it leads, else the
    /// leader's Admin URL (its URL when it serves Admin there) if one is known (`Some(None)`: a
    /// follower that knows no leader).
    pub fn forward_to(&self) -> Option<Option<String>> {
        let view = self.view();
        match view.role {
            Role::Standalone | Role::Leader => None,
            Role::Follower => Some(view.leader_admin_url.or(view.leader_url)),
        }
    }

    /// The role, the leader and the term now.
    pub fn view(&self) -> LeadershipView {
        self.view.read().expect("leadership lock").clone()
    }

    /// Won the election with term `epoch`: leads from now, and may book until `until` (then only
    /// as far as [`Leadership::extend`] moves it).
    pub fn lead(&self, epoch: u32, until: Instant, now: Instant) {
        {
            let mut view = self.view.write().expect("leadership lock");
            view.role = Role::Leader;
            view.leader_url = Some(view.url.clone());
            view.leader_admin_url = view.admin_url.clone();
            view.epoch = epoch;
            view.since = Some(now);
            view.since_wall = Some(SystemTime::now());
        }
        self.extend(until);
    }

    /// A keep-alive confirmed: the leader may book until `until` (never moved back).
    pub fn extend(&self, until: Instant) {
        self.book_until.fetch_max(self.nanos(until).max(1), Ordering::AcqRel);
    }

    /// Books nothing from now on; `leader` is the one that leads now, if known.
    pub fn follow(&self, leader: Option<Leader>) {
        self.book_until.store(0, Ordering::Release);
        let mut view = self.view.write().expect("leadership lock");
        view.role = Role::Follower;
        view.since = None;
        view.since_wall = None;
        (view.leader_url, view.leader_admin_url, view.epoch) = match leader {
            Some(Leader { url, admin_url, epoch }) => (Some(url), admin_url, epoch),
            None => (None, None, 0),
        };
    }

    fn nanos(&self, t: Instant) -> u64 {
        u64::try_from(t.saturating_duration_since(self.base).as_nanos()).unwrap_or(u64::MAX - 1)
    }
}

/// How long before its etcd lease could expire a leader stops booking: a tenth of the TTL, at
/// most 200 ms — room for the time between sending a keep-alive and etcd renewing the lease.
pub fn booking_margin(ttl: Duration) -> Duration {
    (ttl / 10).min(Duration::from_millis(200))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standalone_control_always_books() {
        let t0 = Instant::now();
        let l = Leadership::standalone("http://a".into(), 7, t0);
        assert!(l.check(t0 + Duration::from_secs(86_400)).is_ok());
        assert_eq!(l.forward_to(), None);
        assert_eq!(l.view().epoch, 7);
    }

    #[test]
    fn a_leader_books_until_its_deadline_and_names_no_leader_once_it_lapsed() {
        let t0 = Instant::now();
        let l = Leadership::candidate("http://a".into(), t0);
        let refused = l.check(t0).unwrap_err();
        assert!(matches!(refused, ControlError::NotLeader { leader: None, lapsed: false }));
        assert_eq!(l.forward_to(), Some(None));
        l.lead(42, t0 + Duration::from_secs(2), t0);
        assert!(l.check(t0 + Duration::from_millis(1_999)).is_ok());
        // Paused past its lease: refused at once, before anyone told it.
        let lapsed = l.check(t0 + Duration::from_secs(2)).unwrap_err();
        assert!(matches!(lapsed, ControlError::NotLeader { leader: None, lapsed: true }));
        l.extend(t0 + Duration::from_secs(3));
        l.extend(t0 + Duration::from_millis(2_500)); // never moves back
        assert!(l.check(t0 + Duration::from_millis(2_900)).is_ok());
        assert_eq!(l.forward_to(), None);
    }

    #[test]
    fn a_follower_names_the_leader_and_books_nothing() {
        let t0 = Instant::now();
        let l = Leadership::candidate("http://b".into(), t0);
        l.lead(1, t0 + Duration::from_secs(60), t0);
        l.follow(Some(Leader { url: "http://a".into(), admin_url: None, epoch: 9 }));
        match l.check(t0).unwrap_err() {
            ControlError::NotLeader { leader, lapsed } => {
                assert_eq!((leader.as_deref(), lapsed), (Some("http://a"), false));
            }
            e => panic!("{e}"),
        }
        assert_eq!(l.forward_to(), Some(Some("http://a".into())));
        let v = l.view();
        assert_eq!((v.role, v.epoch, v.since), (Role::Follower, 9, None));
    }

    #[test]
    fn admin_calls_go_to_the_leaders_admin_socket_and_router_hints_name_its_url() {
        let t0 = Instant::now();
        let l = Leadership::candidate("http://b:1".into(), t0).serving_admin_at(Some("http://b:2".into()));
        let leader = Leader { url: "http://a:1".into(), admin_url: Some("http://a:2".into()), epoch: 3 };
        l.follow(Some(leader));
        assert_eq!(l.forward_to(), Some(Some("http://a:2".into())));
        match l.check(t0).unwrap_err() {
            ControlError::NotLeader { leader, .. } => assert_eq!(leader.as_deref(), Some("http://a:1")),
            e => panic!("{e}"),
        }
        // Elected itself: its own Admin socket is the leader's.
        l.lead(4, t0 + Duration::from_secs(60), t0);
        let v = l.view();
        assert_eq!(v.leader_admin_url.as_deref(), Some("http://b:2"));
        assert_eq!(l.forward_to(), None);
        let standalone =
            Leadership::standalone("http://s:1".into(), 1, t0).serving_admin_at(Some("http://s:2".into()));
        assert_eq!(standalone.view().leader_admin_url.as_deref(), Some("http://s:2"));
    }
}
