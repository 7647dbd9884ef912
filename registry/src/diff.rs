//! The changes between two views of the registered workers (pure). A resync after an error
//! is applied as this diff, so a worker present before and after is never dropped and
//! re-added, and an unchanged record produces no change at all.

use std::collections::BTreeMap;

use infera_proto::types::{RegisteredWorker, WorkerId};

/// One change to the worker view.
#[derive(Debug, Clone, PartialEq)]
pub enum Change {
    /// A worker appeared or its record changed (its `dp_size` may be left out).
    Upsert(Box<RegisteredWorker>),
    /// A worker left.
    Remove(WorkerId),
    /// A record under the workers' prefix that is no worker: it does not parse, names another
    /// id than its key, or fails the record check. The view is unchanged (a worker it would
    /// have replaced keeps its last valid record); the receiver counts it.
    Refused {
        /// The etcd key.
        key: String,
        /// Why, for the log.
        problem: String,
    },
}

/// The registered workers, by id.
pub type Workers = BTreeMap<WorkerId, RegisteredWorker>;

/// What turns `old` into `new`: removals first, then additions and changed records.
pub fn diff(old: &Workers, new: &Workers) -> Vec<Change> {
    let removed = old.keys().filter(|id| !new.contains_key(*id)).map(|id| Change::Remove(id.clone()));
    let upserted = new
        .iter()
        .filter(|(id, r)| old.get(*id) != Some(*r))
        .map(|(_, r)| Change::Upsert(Box::new(r.clone())));
    removed.chain(upserted).collect()
}

/// Applies a change to a view; returns whether it changed anything (a repeated event is a no-op).
pub fn apply(view: &mut Workers, change: &Change) -> bool {
    match change {
        Change::Upsert(r) => view.insert(r.id.clone(), (**r).clone()).as_ref() != Some(&**r),
        Change::Remove(id) => view.remove(id).is_some(),
        Change::Refused { .. } => true,
    }
}

#[cfg(test)]
mod tests {

    use infera_proto::types::WorkerRecord;

    use super::*;

    fn w(id: &str, port: u16) -> RegisteredWorker {
        WorkerRecord::decode(id, format!("http://h:{port}"), "m", 1).into()
    }

    fn view(ws: &[RegisteredWorker]) -> Workers {
        ws.iter().map(|w| (w.id.clone(), w.clone())).collect()
    }

    #[test]
    fn a_resync_changes_only_what_changed() {
        let old = view(&[w("a", 1), w("b", 2), w("c", 3)]);
        let new = view(&[w("a", 1), w("b", 20), w("d", 4)]);
        let changes = diff(&old, &new);
        assert_eq!(
            changes,
            [
                Change::Remove(WorkerId::new("c")),
                Change::Upsert(Box::new(w("b", 20))),
                Change::Upsert(Box::new(w("d", 4)))
            ]
        );
        let mut v = old.clone();
        for c in &changes {
            assert!(apply(&mut v, c));
        }
        assert_eq!(v, new);
        assert!(diff(&new, &new).is_empty(), "the same view: no change");
        assert!(!apply(&mut v, &Change::Upsert(Box::new(w("a", 1)))), "a repeated event changes nothing");
        assert!(!apply(&mut v, &Change::Remove(WorkerId::new("zz"))));
    }
}
