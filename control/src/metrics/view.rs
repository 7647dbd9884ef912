//! The worker view's gauges: targets per pool, and the workers PD pairing leaves out.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;

use infera_proto::types::{ModelName, Role};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

use super::to_i64;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ModelRoleLabels {
    model: String,
    role: &'static str,
}

/// `infera_router_targets{model, role}` and `infera_router_unpaired_workers{model, role}`.
#[derive(Debug, Default)]
pub struct ViewMetrics {
    targets: Family<ModelRoleLabels, Gauge>,
    /// The `targets` series exported so far (set to 0 once their pool is gone).
    targets_seen: Mutex<BTreeSet<(String, &'static str)>>,
    unpaired: Family<ModelRoleLabels, Gauge>,
}

impl ViewMetrics {
    /// Registers both families in `r` (the `infera_router` sub-registry).
    pub(super) fn register(&self, r: &mut Registry) {
        r.register(
            "targets",
            "Targets (worker DP ranks) in the view, by model and role: registered workers whose \
             /server_info has answered, drained and unpaired ones included",
            self.targets.clone(),
        );
        r.register(
            "unpaired_workers",
            "Prefill or decode workers that take no picks because they cannot pair with the model's \
             serving prefill/decode group (KV page size, transfer backend or KV cache dtype differ), by \
             model and role",
            self.unpaired.clone(),
        );
    }

    /// The view's targets per model and role are `counts` now (a pool not in it has none).
    pub fn targets(&self, counts: &HashMap<(ModelName, Role), usize>) {
        let mut seen = self.targets_seen.lock().expect("target gauges poisoned by an earlier panic");
        for ((model, role), n) in counts {
            seen.insert((model.to_string(), role.as_str()));
            let labels = ModelRoleLabels { model: model.to_string(), role: role.as_str() };
            self.targets.get_or_create(&labels).set(to_i64(*n as u64));
        }
        for (model, role) in seen.iter() {
            let live = counts.keys().any(|(m, r)| m.as_str() == model && r.as_str() == *role);
            if !live {
                let labels = ModelRoleLabels { model: model.clone(), role };
                self.targets.get_or_create(&labels).set(0);
            }
        }
    }

    /// `model`'s unpaired workers of `role` (prefill or decode) are `n` now.
    pub fn unpaired(&self, model: &ModelName, role: Role, n: usize) {
        let labels = ModelRoleLabels { model: model.to_string(), role: role.as_str() };
        self.unpaired.get_or_create(&labels).set(to_i64(n as u64));
    }
}
