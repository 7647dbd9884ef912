//! The etcd key layout, in one place.

use infera_proto::types::WorkerId;

/// Everything infera writes lives under this prefix.
pub const ROOT: &str = "/infera/v1/";
/// Worker records: `/infera/v1/workers/{worker_id}` → JSON [`infera_proto::types::WorkerRecord`].
pub const WORKERS: &str = "/infera/v1/workers/";
/// Persisted admin settings: `/infera/v1/config/{name}`.
pub const CONFIG: &str = "/infera/v1/config/";

/// Drains: a registrar's request and control's report, `/infera/v1/drains/{worker_id}/…`
/// ([`crate::drain`]).
pub const DRAINS: &str = "/infera/v1/drains/";

/// Everything control keeps about its replicas and their proxies.
pub const CONTROL: &str = "/infera/v1/control/";
/// The control replicas' leader: `/infera/v1/control/leader` → JSON `{url, epoch}` of the leader,
/// bound to its etcd lease.
pub const CONTROL_LEADER: &str = "/infera/v1/control/leader";
/// The proxies holding a lease with the leader: `/infera/v1/control/proxies/{holder}` → the
/// lease TTL in ms. A new leader waits for these to re-declare.
pub const CONTROL_PROXIES: &str = "/infera/v1/control/proxies/";

/// The key of a worker's record.
pub fn worker(id: &WorkerId) -> String {
    format!("{WORKERS}{id}")
}

/// The worker id of a record key (`None` for keys outside the prefix or with an empty id).
pub fn worker_id(key: &str) -> Option<WorkerId> {
    key.strip_prefix(WORKERS).filter(|id| !id.is_empty() && !id.contains('/')).map(WorkerId::new)
}

/// The key of a worker's drain request ([`crate::drain`]).
pub fn request_key(id: &WorkerId) -> String {
    format!("{DRAINS}{id}/request")
}

/// The key of the leader's report on a worker's drain.
pub fn report_key(id: &WorkerId) -> String {
    format!("{DRAINS}{id}/held")
}

/// The key of an operator's request that a worker be drained and stopped ([`crate::retire`]).
pub fn stop_key(id: &WorkerId) -> String {
    format!("{DRAINS}{id}/stop")
}

/// The worker of a drain request key (`None` for any other key).
pub fn requested_worker(key: &str) -> Option<WorkerId> {
    let id = key.strip_prefix(DRAINS)?.strip_suffix("/request")?;
    (!id.is_empty() && !id.contains('/')).then(|| WorkerId::new(id))
}

/// The key of a proxy holding a lease.
pub fn control_proxy(holder: &str) -> String {
    format!("{CONTROL_PROXIES}{holder}")
}

/// The key of a persisted setting.
pub fn config(name: &str) -> String {
    format!("{CONFIG}{name}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_keys_round_trip() {
        let id = WorkerId::new("decode-0");
        assert_eq!(worker(&id), "/infera/v1/workers/decode-0");
        assert_eq!(worker_id(&worker(&id)), Some(id));
        assert_eq!(worker_id("/infera/v1/workers/"), None);
        assert_eq!(worker_id("/infera/v1/config/x"), None);
        assert_eq!(worker_id("/infera/v1/workers/a/b"), None);
    }

    #[test]
    fn request_keys_round_trip_and_nothing_else_parses() {
        let id = WorkerId::new("decode-0");
        assert_eq!(request_key(&id), "/infera/v1/drains/decode-0/request");
        assert_eq!(requested_worker(&request_key(&id)), Some(id.clone()));
        assert_eq!(requested_worker(&report_key(&id)), None);
        assert_eq!(requested_worker("/infera/v1/drains//request"), None);
        assert_eq!(requested_worker("/infera/v1/drains/a/b/request"), None);
        assert_eq!(requested_worker("/infera/v1/workers/decode-0"), None);
    }
}
