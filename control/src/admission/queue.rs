//! The one admission queue of a model: pure, time passed in. Waiters leave it in this order:
//!
//! 1. the highest priority first (a lower class yields to a higher one at admission);
//! 2. within a priority, the tenant whose start tag is lowest — start-time fair queueing: a
//!    tenant served for `cost` tokens advances its finish tag by `cost / weight`, so under
//!    contention each backlogged tenant's admitted tokens converge to its weight's share, and a
//!    tenant that floods only lengthens its own line;
//! 3. within a tenant, the earliest TTFT deadline first.

use std::collections::{BTreeMap, HashMap};
use std::time::Instant;

use infera_proto::types::TenantId;

/// One waiting request.
#[derive(Debug)]
pub struct Waiter<T> {
    /// Its class's priority.
    pub priority: u8,
    /// Whose share it uses (`None`: the anonymous tenant).
    pub tenant: Option<TenantId>,
    /// Its tenant's weight.
    pub weight: f64,
    /// What admitting it costs its tenant's share (its input tokens, at least 1).
    pub cost: f64,
    /// When its TTFT target can no longer be met.
    pub deadline: Instant,
    /// What the caller holds of it.
    pub item: T,
}

/// A model's admission queue.
#[derive(Debug)]
pub struct AdmissionQueue<T> {
    /// Per priority (highest first, by `u8::MAX - priority`).
    levels: BTreeMap<u8, Level<T>>,
    next_seq: u64,
    len: usize,
}

#[derive(Debug)]
struct Level<T> {
    tenants: HashMap<Option<TenantId>, Line<T>>,
    /// The start tag of the last tenant served: where a tenant that was idle starts again.
    virtual_time: f64,
}

/// One tenant's line within a priority.
#[derive(Debug)]
struct Line<T> {
    /// By deadline, then arrival.
    waiting: BTreeMap<(Instant, u64), Waiter<T>>,
    /// Where its next admission finishes in virtual time.
    finish: f64,
}

impl<T> Default for AdmissionQueue<T> {
    fn default() -> Self {
        Self { levels: BTreeMap::new(), next_seq: 0, len: 0 }
    }
}

impl<T> AdmissionQueue<T> {
    /// Waiters in the queue.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nobody waits.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Adds a waiter.
    pub fn push(&mut self, waiter: Waiter<T>) {
        let level = self
            .levels
            .entry(u8::MAX - waiter.priority)
            .or_insert_with(|| Level { tenants: HashMap::new(), virtual_time: 0.0 });
        let virtual_time = level.virtual_time;
        let line = level
            .tenants
            .entry(waiter.tenant.clone())
            .or_insert_with(|| Line { waiting: BTreeMap::new(), finish: virtual_time });
        line.waiting.insert((waiter.deadline, self.next_seq), waiter);
        self.next_seq += 1;
        self.len += 1;
    }

    /// The next waiter to admit.
    pub fn head(&self) -> Option<&Waiter<T>> {
        let level = self.levels.values().next()?;
        let (_, line) = next_line(level)?;
        line.waiting.values().next()
    }

    /// Takes the next waiter out, charging its tenant for it.
    pub fn pop(&mut self) -> Option<Waiter<T>> {
        let mut entry = self.levels.first_entry()?;
        let level = entry.get_mut();
        let tenant = next_line(level)?.0.clone();
        let line = level.tenants.get_mut(&tenant).expect("chosen above");
        let start = line.finish.max(level.virtual_time);
        let (_, waiter) = line.waiting.pop_first().expect("lines are never empty");
        line.finish = start + waiter.cost / waiter.weight;
        level.virtual_time = start;
        if line.waiting.is_empty() {
            // An idle tenant keeps no credit: it starts again at the virtual time it returns at.
            level.tenants.remove(&tenant);
        }
        if level.tenants.is_empty() {
            entry.remove();
        }
        self.len -= 1;
        Some(waiter)
    }

    /// Takes out, uncharged, every waiter `gone` says goes (its deadline passed, its caller
    /// left), in no particular order.
    pub fn remove_where(&mut self, mut gone: impl FnMut(&Waiter<T>) -> bool) -> Vec<Waiter<T>> {
        let mut removed = Vec::new();
        for level in self.levels.values_mut() {
            for line in level.tenants.values_mut() {
                let keys: Vec<_> = line.waiting.iter().filter(|(_, w)| gone(w)).map(|(k, _)| *k).collect();
                removed.extend(keys.iter().filter_map(|k| line.waiting.remove(k)));
            }
            level.tenants.retain(|_, line| !line.waiting.is_empty());
        }
        self.levels.retain(|_, level| !level.tenants.is_empty());
        self.len -= removed.len();
        removed
    }

    /// Every waiter, in no particular order.
    pub fn iter(&self) -> impl Iterator<Item = &Waiter<T>> {
        self.levels.values().flat_map(|l| l.tenants.values()).flat_map(|line| line.waiting.values())
    }

    /// Waiters of priority `priority` or above.
    pub fn waiting_at_or_above(&self, priority: u8) -> usize {
        self.waiting_by_priority().filter(|(p, _)| *p >= priority).map(|(_, n)| n).sum()
    }

    /// Waiters per priority, highest first.
    pub fn waiting_by_priority(&self) -> impl Iterator<Item = (u8, usize)> + '_ {
        self.levels
            .iter()
            .map(|(k, level)| (u8::MAX - k, level.tenants.values().map(|l| l.waiting.len()).sum()))
    }
}

/// The tenant to serve next in `level`: the lowest start tag, then the earliest deadline.
fn next_line<T>(level: &Level<T>) -> Option<(&Option<TenantId>, &Line<T>)> {
    level.tenants.iter().min_by(|a, b| {
        let start = |l: &Line<T>| l.finish.max(level.virtual_time);
        let head = |l: &Line<T>| l.waiting.keys().next().copied();
        start(a.1).total_cmp(&start(b.1)).then_with(|| head(a.1).cmp(&head(b.1)))
    })
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn waiter(
        t0: Instant,
        priority: u8,
        tenant: &str,
        weight: f64,
        deadline_ms: u64,
        item: u32,
    ) -> Waiter<u32> {
        Waiter {
            priority,
            tenant: Some(TenantId::new(tenant)),
            weight,
            cost: 100.0,
            deadline: t0 + Duration::from_millis(deadline_ms),
            item,
        }
    }

    #[test]
    fn a_higher_priority_goes_first_then_the_earliest_deadline() {
        let t0 = Instant::now();
        let mut q = AdmissionQueue::default();
        q.push(waiter(t0, 0, "a", 1.0, 10, 1));
        q.push(waiter(t0, 1, "a", 1.0, 500, 2));
        q.push(waiter(t0, 1, "a", 1.0, 100, 3));
        assert_eq!(q.head().map(|w| w.item), Some(3));
        let order: Vec<u32> = std::iter::from_fn(|| q.pop().map(|w| w.item)).collect();
        assert_eq!(order, [3, 2, 1]);
        assert!(q.is_empty());
    }

    #[test]
    fn backlogged_tenants_are_served_in_proportion_to_their_weights() {
        let t0 = Instant::now();
        let mut q = AdmissionQueue::default();
        // A floods with 1,000 requests of weight 1; B waits with 1,000 of weight 3.
        for i in 0..1_000 {
            q.push(waiter(t0, 0, "flood", 1.0, i, 0));
            q.push(waiter(t0, 0, "b", 3.0, 10_000 + i, 1));
        }
        let served: Vec<u32> = (0..400).filter_map(|_| q.pop().map(|w| w.item)).collect();
        let b = served.iter().filter(|&&i| i == 1).count();
        assert!((299..=301).contains(&b), "b got {b} of 400, its share is 300");
    }

    #[test]
    fn a_tenant_back_from_idle_gets_no_credit_for_its_absence() {
        let t0 = Instant::now();
        let mut q = AdmissionQueue::default();
        for i in 0..100 {
            q.push(waiter(t0, 0, "a", 1.0, i, 0));
        }
        for _ in 0..50 {
            q.pop();
        }
        // B arrives late: it shares from now on, it does not take the next 50 turns.
        for i in 0..50 {
            q.push(waiter(t0, 0, "b", 1.0, i, 1));
        }
        let next: Vec<u32> = (0..10).filter_map(|_| q.pop().map(|w| w.item)).collect();
        let b = next.iter().filter(|&&i| i == 1).count();
        assert!((4..=6).contains(&b), "{next:?}");
    }

    #[test]
    fn removed_waiters_leave_no_line_behind() {
        let t0 = Instant::now();
        let mut q = AdmissionQueue::default();
        q.push(waiter(t0, 0, "a", 1.0, 10, 1));
        q.push(waiter(t0, 2, "b", 1.0, 20, 2));
        let gone = q.remove_where(|w| w.deadline < t0 + Duration::from_millis(15));
        assert_eq!(gone.iter().map(|w| w.item).collect::<Vec<_>>(), [1]);
        assert_eq!(q.len(), 1);
        assert_eq!(q.waiting_by_priority().collect::<Vec<_>>(), [(2, 1)]);
        assert_eq!(q.pop().map(|w| w.item), Some(2));
        assert!(q.head().is_none() && q.pop().is_none());
    }
}
