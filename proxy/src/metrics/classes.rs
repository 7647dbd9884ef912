//! Requests per service class: `infera_proxy_class_requests_total{class, code}`. The class is
//! the one the request named (`x-infera-service-class`) or its API key's, `default` when neither
//! did (control's default class); a request refused as a bad request is counted under `-`, so a
//! client cannot grow the label set with names control does not define.

use std::sync::Arc;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ClassLabels {
    class: Arc<str>,
    code: u16,
}

/// Requests answered, per service class.
#[derive(Debug)]
pub struct ClassMetrics {
    requests: Family<ClassLabels, Counter>,
}

impl ClassMetrics {
    /// The family, registered in `r` (the `infera_proxy` sub-registry).
    pub fn register(r: &mut Registry) -> Self {
        let requests = Family::default();
        r.register(
            "class_requests",
            "Generation requests answered, by service class (named, the API key's, or `default`; `-` \
             for a bad request) and HTTP status",
            requests.clone(),
        );
        Self { requests }
    }

    /// A request of `class` (`None`: it named none) was answered `code`.
    pub fn answered(&self, class: Option<&Arc<str>>, code: u16) {
        let class = match class {
            _ if code == 400 => Arc::from("-"),
            Some(c) => c.clone(),
            None => Arc::from("default"),
        };
        self.requests.get_or_create(&ClassLabels { class, code }).inc();
    }
}
