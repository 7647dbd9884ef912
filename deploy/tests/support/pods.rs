//! The pods an overlay's workloads make: one per StatefulSet replica (named as Kubernetes
//! names them, `NAME-0` …), one for a Deployment (a generated name).

use infera_deploy::Rendered;
use serde_json::Value;

/// One pod of a workload.
#[derive(Debug)]
pub(crate) struct Pod {
    /// Its name (what `metadata.name` gives its containers).
    pub(crate) name: String,
    /// The StatefulSet or Deployment it belongs to.
    pub(crate) workload: Value,
    /// `spec.template.spec.containers`.
    pub(crate) containers: Vec<Container>,
}

/// One container of a pod template.
#[derive(Debug)]
pub(crate) struct Container {
    /// `name`.
    pub(crate) name: String,
    /// The whole container object.
    pub(crate) spec: Value,
}

impl Pod {
    /// The pod template's spec.
    pub(crate) fn spec(&self) -> &Value {
        &self.workload["spec"]["template"]["spec"]
    }

    /// The pod template's label `key`.
    pub(crate) fn label(&self, key: &str) -> Option<&str> {
        self.workload["spec"]["template"]["metadata"]["labels"][key].as_str()
    }
}

/// Every pod of `overlay`'s StatefulSets and Deployments.
pub(crate) fn pods(overlay: &Rendered) -> Vec<Pod> {
    let mut pods = Vec::new();
    for kind in ["StatefulSet", "Deployment"] {
        for workload in overlay.all(kind) {
            let name = workload["metadata"]["name"].as_str().expect("a name");
            let names: Vec<String> = if kind == "StatefulSet" {
                let replicas = workload["spec"]["replicas"].as_u64().unwrap_or(1);
                (0..replicas).map(|i| format!("{name}-{i}")).collect()
            } else {
                vec![format!("{name}-5d8f7c9b6-x2k4q")]
            };
            for pod in names {
                let containers = workload["spec"]["template"]["spec"]["containers"]
                    .as_array()
                    .expect("containers")
                    .iter()
                    .map(|c| Container {
                        name: c["name"].as_str().expect("a name").to_owned(),
                        spec: c.clone(),
                    })
                    .collect();
                pods.push(Pod { name: pod, workload: workload.clone(), containers });
            }
        }
    }
    pods
}
