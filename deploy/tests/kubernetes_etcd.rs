//! `deploy/kubernetes` runs etcd secured by default: every overlay's etcd serves clients and
//! peers over TLS with client certificates required, every endpoint infera is given is
//! `https://`, and control and the workers' registrars each start with the CA and a client
//! certificate of their own Secret (parsed and checked by the binaries' own parsers, the files
//! as the Secrets hold them). The proxies never talk to etcd.

#[allow(dead_code)]
mod support;

use infera_deploy::{overlays, render};
use support::pods::pods;

#[test]
fn etcd_speaks_tls_with_client_certificates_to_every_part_of_every_overlay() {
    for overlay in overlays().iter().map(|o| render(o).unwrap_or_else(|e| panic!("{e:#}"))) {
        let name = &overlay.name;
        if let Some(etcd) = overlay.get("StatefulSet", "infera-etcd") {
            let container = &etcd["spec"]["template"]["spec"]["containers"][0];
            let words: Vec<&str> = ["command", "args"]
                .iter()
                .flat_map(|k| container[k].as_array().into_iter().flatten())
                .filter_map(|w| w.as_str())
                .collect();
            for flag in [
                "--client-cert-auth=true",
                "--peer-client-cert-auth=true",
                "--trusted-ca-file=/etc/etcd/tls/ca.crt",
                "--peer-trusted-ca-file=/etc/etcd/tls/ca.crt",
                "--listen-client-urls=https://0.0.0.0:2379",
                "--listen-peer-urls=https://0.0.0.0:2380",
            ] {
                assert!(words.contains(&flag), "{name}: etcd without {flag}: {words:?}");
            }
            assert!(
                !words.iter().any(|w| w.contains("=http://") && !w.contains(":2381")),
                "{name}: {words:?}"
            );
            let annotations = etcd["metadata"]["annotations"].as_object();
            assert!(
                annotations.is_none_or(|a| a.keys().all(|k| !k.starts_with("checkov.io/skip"))),
                "{name}"
            );
        }
        let endpoints =
            overlay.get("ConfigMap", "infera-etcd").unwrap()["data"]["endpoints"].as_str().unwrap();
        assert!(endpoints.split(',').all(|e| e.starts_with("https://")), "{name}: {endpoints}");

        let mut secured = Vec::new();
        for pod in pods(&overlay) {
            for container in &pod.containers {
                let binary = container.spec["command"][0].as_str().unwrap_or_default();
                let prefix = match binary {
                    "infera-control" => "INFERA_CONTROL_ETCD",
                    "infera-launch" => "INFERA_LAUNCH_ETCD",
                    "infera-proxy" => {
                        let start = support::flags::start(&overlay, &pod, container).unwrap();
                        assert!(
                            !start.env.keys().any(|k| k.contains("ETCD")),
                            "{name}: the proxy has no etcd"
                        );
                        continue;
                    }
                    _ => continue,
                };
                let start = support::flags::start(&overlay, &pod, container).unwrap();
                for var in ["CA", "CERT", "KEY"] {
                    assert!(
                        start.env.contains_key(&format!("{prefix}_{var}")),
                        "{name} {}: no {prefix}_{var}",
                        pod.name
                    );
                }
                // The binary's own parser reads and checks the Secret's files at those paths.
                support::flags::parse(&overlay, &pod, container)
                    .unwrap_or_else(|e| panic!("{name} {}: {e}", pod.name));
                secured.push(binary.to_owned());
            }
        }
        for binary in ["infera-control", "infera-launch"] {
            assert!(
                secured.iter().any(|b| b == binary),
                "{name}: {binary} with its certificate: {secured:?}"
            );
        }
    }
}
