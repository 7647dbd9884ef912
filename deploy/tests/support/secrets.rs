//! What each Secret the manifests mount must hold, written as files: the keys the guide's
//! commands (manual/guides/kubernetes.md) put in it, with contents the binaries accept — real
//! certificates of a test CA, a tokens file, a token. A volume's `items` pick and rename keys as
//! the kubelet does, so a key the Secret does not hold fails the check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;

/// An API keys file as the Secret `infera-api-keys` holds it (manual/operations/security.md).
const API_KEYS: &str = "[[keys]]\nname = \"team-a\"\nsha256 = \"3f79bb7b435b05321651daefd374cdc681dc06faa65e374e38337b88ca046dea\"\n";

/// The proxies' token for control's Router, as the Secret `infera-control-proxy` holds it.
pub(crate) const PROXY_TOKEN: &str = "5f0c3b1e9d2a47c8b6e1f0a9d8c7b6a5";

/// Every name the control replicas are reached by (their advertised URLs, the proxies' list).
pub(crate) const CONTROL_NAMES: [&str; 3] =
    ["infera-control-0.infera-control", "infera-control-1.infera-control", "infera-control-2.infera-control"];

/// A Secret's keys, as files: key → the file holding its value.
pub(crate) type Keys = BTreeMap<String, PathBuf>;

/// Writes what Secret `name` holds into `dir` (one file per key) and returns its keys.
///
/// # Errors
/// A Secret the manifests should not mount, or a file that cannot be written.
pub(crate) fn plausible(name: &str, dir: &Path) -> Result<Keys, String> {
    let write = |key: &str, text: &str| -> Result<(String, PathBuf), String> {
        let path = dir.join(key);
        std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
        Ok((key.to_owned(), path))
    };
    let issued = |ca_name: &str, common: &str, names: &[&str]| -> Result<Keys, String> {
        let ca = infera_testkit::tls::TestCa::new(ca_name);
        let leaf = ca.issue(common, names);
        let mut keys = Keys::new();
        for (key, from) in [("ca.crt", ca.ca()), ("tls.crt", leaf.cert), ("tls.key", leaf.key)] {
            let text = std::fs::read_to_string(&from).map_err(|e| format!("{}: {e}", from.display()))?;
            keys.extend([write(key, &text)?]);
        }
        Ok(keys)
    };
    match name {
        "infera-api-keys" => Ok([write("keys", API_KEYS)?].into()),
        "infera-control-server" => issued("control", "infera-control", &CONTROL_NAMES),
        "infera-proxy-server" => issued("proxy", "infera-proxy", &["infera-proxy.infera.svc"]),
        "infera-control-tokens" => {
            let sha = sha256_hex(PROXY_TOKEN)?;
            let toml = format!("[[tokens]]\nidentity = \"infera-proxy\"\nsha256 = \"{sha}\"\n");
            Ok([write("tokens.toml", &toml)?].into())
        }
        "infera-control-proxy" => {
            let mut keys = issued("control", "unused", &[])?;
            keys.retain(|k, _| k == "ca.crt");
            keys.extend([write("token", &format!("{PROXY_TOKEN}\n"))?]);
            Ok(keys)
        }
        other => match other.strip_prefix("infera-etcd-") {
            // An etcd client: a certificate whose common name is the etcd user.
            Some(user) => issued("etcd", &format!("infera-{user}"), &[]),
            None => Err(format!("Secret {other}: no check knows what it holds")),
        },
    }
}

/// Mounts Secret volume `volume` (its `secret` object) at `here` as the kubelet does: every key,
/// or only `items` (each key at its `path`), from `keys`.
///
/// # Errors
/// An item naming a key the Secret does not hold, or a file that cannot be copied.
pub(crate) fn mount(volume: &Value, keys: &Keys, here: &Path) -> Result<(), String> {
    let name = volume["secretName"].as_str().unwrap_or_default();
    let picked: Vec<(String, String)> = match volume["items"].as_array() {
        Some(items) => items
            .iter()
            .map(|i| {
                (
                    i["key"].as_str().unwrap_or_default().to_owned(),
                    i["path"].as_str().unwrap_or_default().to_owned(),
                )
            })
            .collect(),
        None => keys.keys().map(|k| (k.clone(), k.clone())).collect(),
    };
    for (key, path) in picked {
        let from =
            keys.get(&key).ok_or(format!("Secret {name} holds no key {key:?}: it has {:?}", keys.keys()))?;
        std::fs::copy(from, here.join(&path)).map_err(|e| format!("{}: {e}", from.display()))?;
    }
    Ok(())
}

/// The SHA-256 of `text` in hex, as `printf %s "$TOKEN" | sha256sum` prints it (the guide's way).
///
/// # Errors
/// When `sha256sum` (coreutils) cannot run.
pub(crate) fn sha256_hex(text: &str) -> Result<String, String> {
    let mut cmd = std::process::Command::new("sha256sum");
    let out = infera_deploy::run(&mut cmd, Some(text)).map_err(|e| format!("{e:#}"))?;
    out.split_whitespace().next().map(str::to_owned).ok_or(format!("sha256sum printed {out:?}"))
}
