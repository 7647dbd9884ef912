//! Loopback ports for servers that take their port as a flag and cannot be given 0 (etcd,
//! SGLang, a launcher's deployment file): the OS picks them, the listeners are closed on
//! return, and the server binds them a moment later. Another process could take one in
//! between; the callers that can retry on fresh ports do.
//!
//! The OS may hand the port it just freed to the next `bind(0)`, so two calls in a row can
//! return the same port (a deployment file then claims one port twice). This process never
//! hands out a port twice.

use std::collections::HashSet;
use std::sync::{Mutex, PoisonError};

use anyhow::bail;

/// Every port this process has handed out.
static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// Records `port` as handed out; false when it was already.
fn first_hand_out(port: u16) -> bool {
    let mut given = HANDED_OUT.lock().unwrap_or_else(PoisonError::into_inner);
    given.get_or_insert_with(HashSet::new).insert(port)
}

/// A loopback port that was free a moment ago (the OS picked it; the caller binds it again),
/// never one this process handed out before.
///
/// # Panics
/// When the OS has no free loopback port.
pub fn free_port() -> u16 {
    loop {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .expect("a free loopback port");
        if first_hand_out(port) {
            return port;
        }
    }
}

/// Ports the OS had free at once, one per entry of `spans`, each with `span - 1` free ports
/// after it (a DP worker's KV-event sockets take `port + rank`).
///
/// # Errors
/// When no such ports are found.
pub fn free_ports(spans: &[u16]) -> anyhow::Result<Vec<u16>> {
    let mut held = Vec::new();
    let mut ports = Vec::new();
    for _ in 0..200 {
        let Some(&span) = spans.get(ports.len()) else { return Ok(ports) };
        let first = std::net::TcpListener::bind(("127.0.0.1", 0))?;
        let base = first.local_addr()?.port();
        let rest: Option<Vec<_>> = (1..span)
            .map(|i| base.checked_add(i).and_then(|p| std::net::TcpListener::bind(("127.0.0.1", p)).ok()))
            .collect();
        if let Some(rest) = rest
            && (0..span).all(|i| first_hand_out(base + i))
        {
            ports.push(base);
            held.push(first);
            held.extend(rest);
        }
    }
    bail!("no free port ranges of {spans:?}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_free_at_once_and_apart() {
        let ports = free_ports(&[1, 3, 2]).unwrap();
        assert_eq!(ports.len(), 3);
        for (p, span) in ports.iter().zip([1u16, 3, 2]) {
            for q in ports.iter().filter(|q| *q != p) {
                assert!(!(*p..p + span).contains(q), "{ports:?} overlap");
            }
        }
        assert_ne!(free_port(), 0);
    }

    #[test]
    fn no_port_is_handed_out_twice() {
        let mut seen = HashSet::new();
        for _ in 0..2000 {
            assert!(seen.insert(free_port()), "a port handed out twice");
        }
    }
}
