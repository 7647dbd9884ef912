//! Which peers the NetworkPolicies of an overlay let in, read as Kubernetes reads them: a pod
//! no policy selects takes everything; a selected pod takes what any rule of any selecting
//! policy allows. Only the forms the manifests use are read (matchLabels, numeric ports);
//! anything else fails the check.

use std::collections::BTreeMap;

use infera_deploy::Rendered;
use serde_json::Value;

/// The namespace the overlays deploy to.
const NAMESPACE: &str = "infera";

/// A pod that tries to connect.
#[derive(Debug)]
pub(crate) struct Peer {
    namespace: BTreeMap<String, String>,
    labels: BTreeMap<String, String>,
    same_namespace: bool,
}

impl Peer {
    /// A pod in infera's namespace.
    pub(crate) fn here(labels: BTreeMap<String, String>) -> Self {
        Self { namespace: namespace_labels(NAMESPACE), labels, same_namespace: true }
    }

    /// A pod in namespace `ns`.
    pub(crate) fn elsewhere<const N: usize>(ns: &str, labels: [(&str, &str); N]) -> Self {
        let labels = labels.iter().map(|(k, v)| ((*k).to_owned(), (*v).to_owned())).collect();
        Self { namespace: namespace_labels(ns), labels, same_namespace: false }
    }
}

fn namespace_labels(ns: &str) -> BTreeMap<String, String> {
    BTreeMap::from([("kubernetes.io/metadata.name".to_owned(), ns.to_owned())])
}

/// Whether `peer` may open TCP `port` on a pod labelled `target`.
pub(crate) fn allowed(overlay: &Rendered, target: &BTreeMap<String, String>, peer: &Peer, port: u16) -> bool {
    let selecting: Vec<&Value> = overlay
        .all("NetworkPolicy")
        .filter(|p| selects(&p["spec"]["podSelector"], target))
        .filter(|p| p["spec"]["policyTypes"].as_array().is_some_and(|t| t.iter().any(|t| t == "Ingress")))
        .collect();
    if selecting.is_empty() {
        return true;
    }
    selecting.iter().flat_map(|p| p["spec"]["ingress"].as_array().into_iter().flatten()).any(|rule| {
        let port_ok = match rule["ports"].as_array() {
            None => true,
            Some(ports) => {
                ports.iter().any(|p| p["port"].as_u64().expect("numeric ports") == u64::from(port))
            }
        };
        let peer_ok = match rule["from"].as_array() {
            None => true,
            Some(from) => from.iter().any(|f| admits(f, peer)),
        };
        port_ok && peer_ok
    })
}

/// One `from` entry.
fn admits(from: &Value, peer: &Peer) -> bool {
    assert!(from.get("ipBlock").is_none(), "ipBlock is not read here");
    let pods = from.get("podSelector");
    match from.get("namespaceSelector") {
        None => peer.same_namespace && pods.is_some_and(|s| selects(s, &peer.labels)),
        Some(ns) => selects(ns, &peer.namespace) && pods.is_none_or(|s| selects(s, &peer.labels)),
    }
}

/// A label selector with `matchLabels` only (`{}` selects all).
fn selects(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    assert!(selector.get("matchExpressions").is_none(), "matchExpressions are not read here");
    selector["matchLabels"]
        .as_object()
        .into_iter()
        .flatten()
        .all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str())
}
