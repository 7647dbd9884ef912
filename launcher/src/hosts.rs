//! Which of a plan's workers `up` starts on this node. Without `--only-host`, every worker of
//! the file, and each must have a `host` of this node (a worker binds its `--host`, so one
//! for another node could not start here). With `--only-host HOST`, the workers whose `host`
//! is HOST, as written in the file; the whole file is still checked.

use std::net::{IpAddr, ToSocketAddrs, UdpSocket};
use std::path::PathBuf;

use crate::plan::Plan;

/// A plan that does not fit this node.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HostError {
    /// `--only-host` names a host no worker has.
    #[error(
        "--only-host {host}: no worker of {path} has host = {host:?} (its hosts: {hosts})",
        path = path.display(),
        hosts = hosts.join(", ")
    )]
    NoWorkers {
        /// The deployment file.
        path: PathBuf,
        /// `--only-host`.
        host: String,
        /// The hosts the file names.
        hosts: Vec<String>,
    },
    /// Workers whose host is not an address of this node, without `--only-host`.
    #[error(
        "{path} places workers on other nodes: {workers}; `up` starts workers on the node it runs \
         on, so run `infera-launch up {path} --only-host HOST --etcd URL` on each node (one of them \
         with the router, the others with --no-router)",
        path = path.display(),
        workers = workers.iter().map(|(w, h)| format!("{w} (host {h})")).collect::<Vec<_>>().join(", ")
    )]
    OtherNodes {
        /// The deployment file.
        path: PathBuf,
        /// (worker, host) of each worker that cannot start here.
        workers: Vec<(String, String)>,
    },
    /// A flag that only makes sense with etcd.
    #[error(
        "{flag} needs --etcd: the workers started here are registered there, and control (on \
         another node, or started here) follows it"
    )]
    NeedsEtcd {
        /// The flag given without `--etcd` (`--only-host`, …).
        flag: &'static str,
    },
}

/// Keeps the workers this node runs; returns what the operator should know (stderr notes).
pub fn select(plan: &mut Plan, only_host: Option<&str>, path: PathBuf) -> Result<Vec<String>, HostError> {
    let Some(host) = only_host else {
        let workers: Vec<(String, String)> = plan
            .workers
            .iter()
            .filter(|w| !is_local(&w.host))
            .map(|w| (w.name.clone(), w.host.clone()))
            .collect();
        return if workers.is_empty() {
            Ok(Vec::new())
        } else {
            Err(HostError::OtherNodes { path, workers })
        };
    };
    let mut hosts: Vec<String> = plan.workers.iter().map(|w| w.host.clone()).collect();
    hosts.sort();
    hosts.dedup();
    let total = plan.workers.len();
    plan.workers.retain(|w| w.host == host);
    if plan.workers.is_empty() {
        return Err(HostError::NoWorkers { path, host: host.to_owned(), hosts });
    }
    let names: Vec<&str> = plan.workers.iter().map(|w| w.name.as_str()).collect();
    let mut notes = vec![format!(
        "--only-host {host}: starting {} of the file's {total} workers ({})",
        names.len(),
        names.join(", ")
    )];
    if !is_local(host) {
        notes.push(format!(
            "warning: {host} is not an address of this node; the workers bind to it and will fail if it is \
             not (check the node or --only-host)"
        ));
    }
    Ok(notes)
}

/// Whether `host` (an IP address or a name) is an address of this node: a wildcard, or one a
/// socket can bind to here.
pub fn is_local(host: &str) -> bool {
    let bindable = |ip: IpAddr| ip.is_unspecified() || UdpSocket::bind((ip, 0)).is_ok();
    let bare = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')).unwrap_or(host);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return bindable(ip);
    }
    (bare, 0).to_socket_addrs().is_ok_and(|mut addrs| addrs.any(|a| bindable(a.ip())))
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    /// The sim example with its decode on `decode_host`.
    fn plan(decode_host: &str) -> Plan {
        let text = include_str!("../../examples/sim_1p1d/deployment.toml")
            .replace("name = \"decode-0\"\n", &format!("name = \"decode-0\"\nhost = \"{decode_host}\"\n"));
        crate::plan_text(Path::new("sim.toml"), &text).unwrap()
    }

    #[test]
    fn loopback_and_wildcards_are_local_and_foreign_addresses_are_not() {
        for local in ["127.0.0.1", "127.0.0.2", "0.0.0.0", "::", "[::]", "localhost"] {
            assert!(is_local(local), "{local}");
        }
        // TEST-NET-1 (RFC 5737) is on no node's interface; a name that does not resolve is nowhere.
        for foreign in ["192.0.2.1", "no-such-node.invalid"] {
            assert!(!is_local(foreign), "{foreign}");
        }
    }

    #[test]
    fn every_worker_must_be_local_without_only_host() {
        let mut all_here = plan("127.0.0.1");
        assert_eq!(select(&mut all_here, None, "f.toml".into()), Ok(Vec::new()));
        assert_eq!(all_here.workers.len(), 2);
        let mut split = plan("192.0.2.1");
        let e = select(&mut split, None, "f.toml".into()).unwrap_err();
        assert_eq!(
            e,
            HostError::OtherNodes {
                path: "f.toml".into(),
                workers: vec![("decode-0".to_owned(), "192.0.2.1".to_owned())]
            }
        );
        assert!(e.to_string().contains("decode-0 (host 192.0.2.1)"), "{e}");
    }

    #[test]
    fn only_host_keeps_that_hosts_workers() {
        let mut here = plan("192.0.2.1");
        let notes = select(&mut here, Some("127.0.0.1"), "f.toml".into()).unwrap();
        let names: Vec<&str> = here.workers.iter().map(|w| w.name.as_str()).collect();
        assert_eq!(names, ["prefill-0"]);
        assert_eq!(notes, ["--only-host 127.0.0.1: starting 1 of the file's 2 workers (prefill-0)"]);
        // Selected explicitly, a host that is not this node's is warned about, not refused.
        let mut there = plan("192.0.2.1");
        let notes = select(&mut there, Some("192.0.2.1"), "f.toml".into()).unwrap();
        assert_eq!(there.workers[0].name, "decode-0");
        assert!(notes[1].starts_with("warning: 192.0.2.1 is not an address of this node"), "{notes:?}");
        let mut none = plan("192.0.2.1");
        let e = select(&mut none, Some("10.0.0.9"), "f.toml".into()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "--only-host 10.0.0.9: no worker of f.toml has host = \"10.0.0.9\" (its hosts: 127.0.0.1, 192.0.2.1)"
        );
    }
}
