//! Network namespaces joined to this one by veth pairs (root only): a part started inside one
//! is a host of its own, and its links can be cut for real. Used to partition one control from
//! etcd while the proxies still reach it.
//!
//! Addresses are `10.<b>.<k>.1` (this side) and `10.<b>.<k>.2` (the namespace's), `b` from this
//! process's id and `k` counting namespaces; [`HostAddress`] puts an extra address on this
//! side's loopback (etcd listens on it; packets from a namespace to it are delivered here, no
//! forwarding needed), so a route to it can be black-holed inside one namespace without touching
//! that namespace's link to the proxies.

use std::net::Ipv4Addr;
use std::process::Command;
use std::sync::atomic::{AtomicU8, Ordering};

use anyhow::{Context as _, ensure};

static NEXT: AtomicU8 = AtomicU8::new(1);

fn run(args: &[&str]) -> anyhow::Result<()> {
    let out = Command::new("ip").args(args).output().with_context(|| format!("cannot run ip {args:?}"))?;
    ensure!(out.status.success(), "ip {args:?}: {}", String::from_utf8_lossy(&out.stderr).trim());
    Ok(())
}

fn subnet() -> u8 {
    100 + u8::try_from(std::process::id() % 100).expect("below 100")
}

/// Whether namespaces can be made here (root with `ip`).
pub fn available() -> bool {
    Command::new("ip").args(["netns", "list"]).output().is_ok_and(|o| o.status.success())
        && std::fs::read_to_string("/proc/self/status").is_ok_and(|s| {
            s.lines().any(|l| l.starts_with("Uid:") && l.split_whitespace().nth(1) == Some("0"))
        })
}

/// A namespace with a veth pair to this one; deleted on drop.
#[derive(Debug)]
pub struct Netns {
    /// Its name, for `ip netns exec`.
    pub name: String,
    /// Its address (the namespace's end of the pair).
    pub inner: Ipv4Addr,
    /// This side's address (its default gateway).
    pub outer: Ipv4Addr,
    link: String,
}

impl Netns {
    /// Makes a namespace and its link.
    ///
    /// # Errors
    /// When `ip` refuses (not root, no `ip`).
    pub fn create() -> anyhow::Result<Self> {
        let (b, k) = (subnet(), NEXT.fetch_add(1, Ordering::Relaxed));
        let name = format!("infera-{}-{k}", std::process::id());
        let link = format!("inf{}-{k}", std::process::id() % 100_000);
        let peer = format!("{link}p");
        let (outer, inner) = (Ipv4Addr::new(10, b, k, 1), Ipv4Addr::new(10, b, k, 2));
        run(&["netns", "add", &name])?;
        let ns = Self { name: name.clone(), inner, outer, link: link.clone() };
        run(&["link", "add", &link, "type", "veth", "peer", "name", &peer])?;
        run(&["link", "set", &peer, "netns", &name])?;
        run(&["addr", "add", &format!("{outer}/30"), "dev", &link])?;
        run(&["link", "set", &link, "up"])?;
        let exec = |args: &[&str]| {
            let mut all = vec!["netns", "exec", &name, "ip"];
            all.extend(args);
            run(&all)
        };
        exec(&["addr", "add", &format!("{inner}/30"), "dev", &peer])?;
        exec(&["link", "set", &peer, "up"])?;
        exec(&["link", "set", "lo", "up"])?;
        exec(&["route", "add", "default", "via", &outer.to_string()])?;
        Ok(ns)
    }

    /// Drops every packet from the namespace to `to` (a route to nowhere).
    ///
    /// # Errors
    /// When `ip` refuses.
    pub fn cut(&self, to: Ipv4Addr) -> anyhow::Result<()> {
        run(&["netns", "exec", &self.name, "ip", "route", "add", "blackhole", &format!("{to}/32")])
    }

    /// Undoes [`Netns::cut`].
    ///
    /// # Errors
    /// When `ip` refuses.
    pub fn heal(&self, to: Ipv4Addr) -> anyhow::Result<()> {
        run(&["netns", "exec", &self.name, "ip", "route", "del", "blackhole", &format!("{to}/32")])
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run(&["link", "del", &self.link]);
        let _ = run(&["netns", "del", &self.name]);
    }
}

/// An extra address of this host on its loopback; removed on drop.
#[derive(Debug)]
pub struct HostAddress {
    /// The address.
    pub ip: Ipv4Addr,
}

impl HostAddress {
    /// Adds `10.<b>.255.1` to `lo`.
    ///
    /// # Errors
    /// When `ip` refuses.
    pub fn create() -> anyhow::Result<Self> {
        let ip = Ipv4Addr::new(10, subnet(), 255, 1);
        run(&["addr", "add", &format!("{ip}/32"), "dev", "lo"])?;
        Ok(Self { ip })
    }
}

impl Drop for HostAddress {
    fn drop(&mut self) {
        let _ = run(&["addr", "del", &format!("{}/32", self.ip), "dev", "lo"]);
    }
}
