//! The SGLang releases that can serve an API through a prefill/decode pair. SGLang 0.5.23's
//! `AnthropicMessagesRequest` extends `PDRoutingFields` (the bootstrap host, port and room;
//! python/sglang/srt/entrypoints/anthropic/protocol.py) and passes them on to the chat request it
//! builds (`pd_routing_kwargs()` in anthropic/serving.py); 0.5.18's is a plain `BaseModel` that
//! drops them, so its prefill and decode would never meet. A worker whose release is unknown (a
//! record without `sglang_version`) is trusted.

use infera_proto::types::{Api, ModelName, Role};

use crate::targets::TargetList;

/// The first release whose `/v1/messages` request carries the bootstrap fields (the newest one
/// this project runs before it; 0.5.18 does not).
const MESSAGES_PD_SINCE: [u32; 3] = [0, 5, 23];

/// The release of a prefill or decode worker of `model` that cannot serve `api` through a PD
/// pair, if there is one.
pub(super) fn unable_in_pd(list: &TargetList, model: &ModelName, api: Api) -> Option<String> {
    if api != Api::Messages {
        return None;
    }
    list.workers()
        .filter(|w| w.model == *model && matches!(w.role, Role::Prefill | Role::Decode))
        .filter_map(|w| w.sglang_version.as_deref())
        .find(|v| release(v).is_some_and(|r| r < MESSAGES_PD_SINCE))
        .map(str::to_owned)
}

/// `0.5.18`, `0.5.18.post1`, `0.5.23rc0` → its first three numbers.
fn release(version: &str) -> Option<[u32; 3]> {
    let mut parts = version.trim().trim_start_matches('v').split('.');
    let mut out = [0; 3];
    for slot in &mut out {
        let part = parts.next()?;
        let digits: String = part.chars().take_while(char::is_ascii_digit).collect();
        *slot = digits.parse().ok()?;
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use infera_proto::pb;
    use infera_proto::types::WorkerRecord;

    use super::*;

    /// The target list of `workers`, as control sends it (the version goes over the wire).
    fn listed(workers: [WorkerRecord; 2]) -> TargetList {
        TargetList::new(
            workers
                .iter()
                .map(|w| pb::TargetStatus {
                    target: Some(pb::Target { worker_id: w.id.to_string(), dp_rank: 0 }),
                    worker: Some(pb::WorkerEndpoint::from(w)),
                    health: "healthy".into(),
                    ..Default::default()
                })
                .collect(),
        )
    }

    #[test]
    fn releases_parse_and_compare() {
        assert_eq!(release("0.5.18.post1"), Some([0, 5, 18]));
        assert_eq!(release("0.5.23rc0"), Some([0, 5, 23]));
        assert_eq!(release("main"), None);
        assert!(release("0.5.9").unwrap() < MESSAGES_PD_SINCE);
    }

    #[test]
    fn an_older_pd_worker_refuses_messages_and_an_unknown_one_is_trusted() {
        let m = ModelName::new("m");
        let list = |version: Option<&str>| {
            let mut p = WorkerRecord::prefill("p", "http://127.0.0.1:1", "m", 8998);
            p.sglang_version = version.map(str::to_owned);
            let d = WorkerRecord::decode("d", "http://127.0.0.1:2", "m", 1).with_sglang_version("0.5.23");
            listed([p, d])
        };
        assert_eq!(unable_in_pd(&list(Some("0.5.18")), &m, Api::Messages).as_deref(), Some("0.5.18"));
        assert_eq!(unable_in_pd(&list(Some("0.5.18")), &m, Api::ChatCompletions), None);
        assert_eq!(unable_in_pd(&list(Some("0.5.23")), &m, Api::Messages), None);
        assert_eq!(unable_in_pd(&list(None), &m, Api::Messages), None);
    }
}
