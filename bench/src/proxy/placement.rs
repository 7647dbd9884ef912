//! Where the proxy bench's processes run.
//!
//! - Shared (the default): the bench process (clients, control, the sim worker) and the proxy
//!   process run on every CPU this process may use, scheduled by the kernel.
//! - Pinned (`--proxy-cpus LIST`): the proxy process runs on `LIST` only and the bench process
//!   on the CPUs left. The direct and the proxied rounds then give clients + sim the same
//!   CPUs, so their ratio is the proxy's own cost, not the CPU it takes from the worker.
//!
//! Affinity is set in-process (`sched_setaffinity`) and inherited: the bench pins its main
//! thread before any other thread starts, and the proxy is spawned from a thread pinned to
//! `LIST`, so every thread of either process starts with its mask. Both are read back from
//! `/proc/<pid>/task/*/status` after start-up and checked.

use std::collections::BTreeSet;
use std::fmt;
use std::process::{Child, Command};
use std::str::FromStr;

use rustix::thread::{CpuSet, sched_getaffinity, sched_setaffinity};

/// A set of CPU numbers, written as in `taskset -c` or `Cpus_allowed_list`: `1`, `0,2`, `2-3`,
/// `0-1,4`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CpuList(BTreeSet<usize>);

/// A CPU list that cannot be used.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
pub(crate) enum CpuListError {
    #[error("the CPU list is empty (expected e.g. `1`, `2-3` or `0,2-3`)")]
    Empty,
    #[error("`{0}` is not a CPU number or a range `A-B` (expected e.g. `1`, `2-3` or `0,2-3`)")]
    Syntax(String),
    #[error("the range `{0}` runs backwards")]
    Backwards(String),
    #[error("CPU {cpu} is beyond the largest CPU number this system call supports ({max})")]
    TooLarge { cpu: String, max: usize },
    #[error("CPU {cpu} is not on this machine or not available to this process (available: {available})")]
    Unavailable { cpu: usize, available: CpuList },
    #[error(
        "--proxy-cpus {proxy} leaves no CPU for the clients, control and the sim \
         (available: {available}; give the proxy fewer)"
    )]
    NoRemainder { proxy: CpuList, available: CpuList },
}

impl FromStr for CpuList {
    type Err = CpuListError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let s = s.trim();
        if s.is_empty() {
            return Err(CpuListError::Empty);
        }
        let mut cpus = BTreeSet::new();
        for item in s.split(',') {
            let item = item.trim();
            match item.split_once('-') {
                None => {
                    cpus.insert(cpu(item, item)?);
                }
                Some((lo, hi)) => {
                    let (lo, hi) = (cpu(lo, item)?, cpu(hi, item)?);
                    if lo > hi {
                        return Err(CpuListError::Backwards(item.to_owned()));
                    }
                    cpus.extend(lo..=hi);
                }
            }
        }
        Ok(Self(cpus))
    }
}

/// One CPU number `n` of the list item `item` (named in errors).
fn cpu(n: &str, item: &str) -> Result<usize, CpuListError> {
    let n = n.trim();
    if n.is_empty() || !n.bytes().all(|b| b.is_ascii_digit()) {
        return Err(CpuListError::Syntax(item.to_owned()));
    }
    match n.parse::<usize>() {
        Ok(c) if c < MAX_CPU => Ok(c),
        _ => Err(CpuListError::TooLarge { cpu: n.to_owned(), max: MAX_CPU - 1 }),
    }
}

/// The largest CPU number + 1 a `CpuSet` holds.
const MAX_CPU: usize = CpuSet::MAX_CPU;

impl fmt::Display for CpuList {
    /// Ranges collapsed, as the kernel writes `Cpus_allowed_list`: `0-3,6`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let mut first = true;
        let mut iter = self.0.iter().copied().peekable();
        while let Some(lo) = iter.next() {
            let mut hi = lo;
            while iter.peek() == Some(&(hi + 1)) {
                hi += 1;
                iter.next();
            }
            if !first {
                f.write_str(",")?;
            }
            first = false;
            if hi == lo { write!(f, "{lo}")? } else { write!(f, "{lo}-{hi}")? }
        }
        Ok(())
    }
}

impl CpuList {
    fn from_cpuset(set: &CpuSet) -> Self {
        Self((0..MAX_CPU).filter(|&c| set.is_set(c)).collect())
    }

    fn to_cpuset(&self) -> CpuSet {
        let mut set = CpuSet::new();
        for &c in &self.0 {
            set.set(c);
        }
        set
    }

    fn union(&mut self, other: &Self) {
        self.0.extend(other.0.iter().copied());
    }
}

/// Which CPUs the proxy and the bench process run on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Placement {
    /// Both on every CPU available.
    Shared(CpuList),
    /// The proxy on `proxy`, the bench (clients, control, sim) on `bench`.
    Pinned { proxy: CpuList, bench: CpuList },
}

impl Placement {
    /// The placement of `proxy_cpus` among the `available` CPUs: each must be available and at
    /// least one must be left for the bench process.
    pub(crate) fn plan(proxy_cpus: Option<CpuList>, available: CpuList) -> Result<Self, CpuListError> {
        let Some(proxy) = proxy_cpus else { return Ok(Self::Shared(available)) };
        if proxy.0.is_empty() {
            return Err(CpuListError::Empty);
        }
        if let Some(&cpu) = proxy.0.iter().find(|c| !available.0.contains(c)) {
            return Err(CpuListError::Unavailable { cpu, available });
        }
        let bench = CpuList(available.0.difference(&proxy.0).copied().collect());
        if bench.0.is_empty() {
            return Err(CpuListError::NoRemainder { proxy, available });
        }
        Ok(Self::Pinned { proxy, bench })
    }

    /// Plans against the CPUs this thread may run on and, when pinned, moves this thread to
    /// the bench's CPUs. Call it before any other thread starts: threads inherit the mask.
    pub(crate) fn apply(proxy_cpus: Option<CpuList>) -> anyhow::Result<Self> {
        let available = CpuList::from_cpuset(&sched_getaffinity(None)?);
        let placement = Self::plan(proxy_cpus, available)?;
        if let Self::Pinned { bench, .. } = &placement {
            sched_setaffinity(None, &bench.to_cpuset())
                .map_err(|e| anyhow::anyhow!("cannot pin the bench to CPUs {bench}: {e}"))?;
        }
        Ok(placement)
    }

    /// Spawns the proxy: when pinned, from a thread pinned to the proxy's CPUs, so the child
    /// (and every thread it starts) inherits them from its first instruction.
    pub(crate) fn spawn(&self, cmd: &mut Command) -> anyhow::Result<Child> {
        let Self::Pinned { proxy, .. } = self else { return Ok(cmd.spawn()?) };
        let set = proxy.to_cpuset();
        std::thread::scope(|s| {
            s.spawn(|| {
                sched_setaffinity(None, &set)
                    .map_err(|e| anyhow::anyhow!("cannot pin the proxy to CPUs {proxy}: {e}"))?;
                Ok(cmd.spawn()?)
            })
            .join()
            .map_err(|_| anyhow::anyhow!("the thread spawning the proxy panicked"))?
        })
    }

    /// Checks that every thread of the proxy (`proxy_pid`) and of this process runs where
    /// planned; returns what was read, for the report.
    pub(crate) fn check(&self, proxy_pid: u32) -> anyhow::Result<(CpuList, CpuList)> {
        let proxy = threads_cpus(&proxy_pid.to_string())?;
        let bench = threads_cpus("self")?;
        if let Self::Pinned { proxy: want_proxy, bench: want_bench } = self {
            anyhow::ensure!(
                &proxy == want_proxy && &bench == want_bench,
                "placement not in effect: proxy threads on CPUs {proxy} (want {want_proxy}), \
                 bench threads on CPUs {bench} (want {want_bench})"
            );
        }
        Ok((proxy, bench))
    }
}

impl fmt::Display for Placement {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Shared(all) => {
                write!(f, "shared: clients, control, sim and proxy all on CPUs {all}")
            }
            Self::Pinned { proxy, bench } => {
                write!(f, "pinned: proxy on CPUs {proxy}; clients, control and sim on CPUs {bench}")
            }
        }
    }
}

/// The union of the CPUs the threads of process `pid` (a number or `self`) may run on.
fn threads_cpus(pid: &str) -> anyhow::Result<CpuList> {
    let mut all = CpuList::default();
    for task in std::fs::read_dir(format!("/proc/{pid}/task"))? {
        // A thread may end between the listing and the read.
        let Ok(status) = std::fs::read_to_string(task?.path().join("status")) else { continue };
        let list = status
            .lines()
            .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))
            .ok_or_else(|| anyhow::anyhow!("no Cpus_allowed_list in /proc/{pid}/task/*/status"))?;
        all.union(&list.parse()?);
    }
    Ok(all)
}

#[cfg(test)]
mod tests;
