//! A container as its binary would start: `command` + `args` with `$(VAR)` expanded, and its
//! variables from `env` and `envFrom` (ConfigMaps of the same overlay; Secrets and the pod's
//! fields stand in with plausible values), parsed and checked with the binary's own parser
//! (`Args::try_parse_from`, then `Config::try_from`, as the binary does at start). Files from
//! ConfigMap volumes are written out and their paths rewritten; a Secret volume gets what its
//! Secret must hold ([`super::secrets`]).

use std::collections::BTreeMap;
use std::path::Path;

use clap::{CommandFactory, Parser};
use infera_deploy::{Rendered, as_flags};
use serde_json::Value;

use super::pods::{Container, Pod};
use super::secrets;

/// A container's start, resolved: program, argv after it, the binary's own variables.
#[derive(Debug)]
pub(crate) struct Start {
    /// The binary's name and every word after it, the variables' flags last.
    pub(crate) words: Vec<String>,
    /// `INFERA_*` variables.
    pub(crate) env: BTreeMap<String, String>,
    /// Holds the files the words name.
    pub(crate) _files: tempfile::TempDir,
}

/// Resolves `container` of `pod`.
pub(crate) fn start(overlay: &Rendered, pod: &Pod, container: &Container) -> Result<Start, String> {
    start_with(overlay, pod, container, &secrets::plausible)
}

/// What a Secret holds: its name and a folder to write its files in → its keys.
pub(crate) type Secrets<'a> = &'a dyn Fn(&str, &Path) -> Result<secrets::Keys, String>;

/// Resolves `container` of `pod`, its Secret volumes holding what `secrets` gives.
pub(crate) fn start_with(
    overlay: &Rendered,
    pod: &Pod,
    container: &Container,
    secrets: Secrets<'_>,
) -> Result<Start, String> {
    let c = &container.spec;
    let strings = |v: &Value| -> Vec<String> {
        v.as_array().into_iter().flatten().map(|s| s.as_str().expect("strings").to_owned()).collect()
    };
    let command = strings(&c["command"]);
    let program = command.first().ok_or("no command: the image's entrypoint is not checked")?.clone();
    let mut env = BTreeMap::new();
    for from in c["envFrom"].as_array().into_iter().flatten() {
        let name = from["configMapRef"]["name"].as_str().ok_or("envFrom other than a ConfigMap")?;
        let map = overlay.get("ConfigMap", name).ok_or(format!("no ConfigMap {name}"))?;
        for (k, v) in map["data"].as_object().into_iter().flatten() {
            env.insert(k.clone(), v.as_str().expect("string data").to_owned());
        }
    }
    for var in c["env"].as_array().into_iter().flatten() {
        let name = var["name"].as_str().expect("a name").to_owned();
        let from = &var["valueFrom"];
        let value = if let Some(v) = var["value"].as_str() {
            v.to_owned()
        } else if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
            match field {
                "metadata.name" => pod.name.clone(),
                "metadata.namespace" => "infera".into(),
                other => return Err(format!("{name}: fieldRef {other} is not read here")),
            }
        } else if from["configMapKeyRef"].is_object() {
            let (map, key) =
                (from["configMapKeyRef"]["name"].as_str(), from["configMapKeyRef"]["key"].as_str());
            let data = overlay
                .get("ConfigMap", map.unwrap_or_default())
                .map(|m| &m["data"][key.unwrap_or_default()]);
            data.and_then(Value::as_str)
                .ok_or(format!("{name}: no ConfigMap key {map:?}/{key:?}"))?
                .to_owned()
        } else if from["secretKeyRef"].is_object() {
            "a-value-the-site-keeps-in-its-secret".into()
        } else {
            return Err(format!("{name}: a value this check cannot resolve"));
        };
        env.insert(name, value);
    }
    let files = tempfile::tempdir().map_err(|e| e.to_string())?;
    let mut mounts = Vec::new();
    for mount in c["volumeMounts"].as_array().into_iter().flatten() {
        let (name, at) =
            (mount["name"].as_str().expect("a name"), mount["mountPath"].as_str().expect("a path"));
        let volume = pod.spec()["volumes"].as_array().into_iter().flatten().find(|v| v["name"] == name);
        let claims = pod.workload["spec"]["volumeClaimTemplates"].as_array();
        let claimed = claims.into_iter().flatten().any(|c| c["metadata"]["name"] == name);
        let volume = match volume {
            Some(v) => v,
            None if claimed => &Value::Null,
            None => return Err(format!("volume {name} is mounted but not declared")),
        };
        let here = files.path().join(at.trim_start_matches('/'));
        std::fs::create_dir_all(&here).map_err(|e| e.to_string())?;
        if let Some(map) = volume["configMap"]["name"].as_str() {
            let map = overlay.get("ConfigMap", map).ok_or(format!("no ConfigMap {map}"))?;
            for (key, text) in map["data"].as_object().into_iter().flatten() {
                std::fs::write(here.join(key), text.as_str().unwrap_or_default())
                    .map_err(|e| e.to_string())?;
            }
        } else if let Some(secret) = volume["secret"]["secretName"].as_str() {
            let held = files.path().join("secrets").join(secret);
            std::fs::create_dir_all(&held).map_err(|e| e.to_string())?;
            super::secrets::mount(&volume["secret"], &secrets(secret, &held)?, &here)?;
        }
        mounts.push((at.to_owned(), here.display().to_string()));
    }
    let local = |word: String| -> String {
        mounts
            .iter()
            .find_map(|(at, here)| word.strip_prefix(at.as_str()).map(|rest| format!("{here}{rest}")))
            .unwrap_or(word)
    };
    let expand = |word: &str| -> String {
        let mut out = word.to_owned();
        for (k, v) in &env {
            out = out.replace(&format!("$({k})"), v);
        }
        out
    };
    let mut words: Vec<String> =
        command.iter().chain(strings(&c["args"]).iter()).map(|w| local(expand(w))).collect();
    if let Some(unexpanded) = words.iter().find(|w| w.contains("$(")) {
        return Err(format!("{unexpanded}: a variable the container does not define"));
    }
    words[0] = Path::new(&program).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
    let env: BTreeMap<String, String> =
        env.into_iter().filter(|(k, _)| k.starts_with("INFERA_")).map(|(k, v)| (k, local(v))).collect();
    Ok(Start { words, env, _files: files })
}

/// A container's configuration, as its binary's own parser made it (what it configures is read
/// by the tests that check it, not by every test binary: hence `dead_code`).
#[derive(Debug)]
#[allow(dead_code)]
pub(crate) enum Parsed {
    /// `infera-control`.
    Control(Box<infera_control::Config>),
    /// `infera-proxy`.
    Proxy(Box<infera_proxy::Config>),
    /// `infera-launch up`.
    Launch(Box<infera_launcher::up::UpConfig>),
}

impl Parsed {
    /// The binary's name.
    pub(crate) fn binary(&self) -> &'static str {
        match self {
            Self::Control(_) => "infera-control",
            Self::Proxy(_) => "infera-proxy",
            Self::Launch(_) => "infera-launch",
        }
    }
}

/// Parses `container` with its binary's parser: `Some` when it is one of infera's, `None` for
/// another program (etcd).
pub(crate) fn parse(overlay: &Rendered, pod: &Pod, container: &Container) -> Result<Option<Parsed>, String> {
    parse_with(overlay, pod, container, &secrets::plausible)
}

/// [`parse`], the Secret volumes holding what `secrets` gives.
pub(crate) fn parse_with(
    overlay: &Rendered,
    pod: &Pod,
    container: &Container,
    secrets: Secrets<'_>,
) -> Result<Option<Parsed>, String> {
    if !container.spec["command"][0].as_str().is_some_and(|c| c.starts_with("infera")) {
        return Ok(None);
    }
    let start = start_with(overlay, pod, container, secrets)?;
    let parsed = match start.words[0].as_str() {
        "infera-control" => {
            let argv = argv(&start, &infera_control::Args::command())?;
            let args = infera_control::Args::try_parse_from(&argv).map_err(|e| format!("{argv:?}: {e}"))?;
            let config = infera_control::Config::try_from(args).map_err(|e| format!("{argv:?}: {e}"))?;
            if config.etcd.is_none() {
                return Err("replicas elect a leader through etcd".into());
            }
            Parsed::Control(Box::new(config))
        }
        "infera-proxy" => {
            let argv = argv(&start, &infera_proxy::Args::command())?;
            let args = infera_proxy::Args::try_parse_from(&argv).map_err(|e| format!("{argv:?}: {e}"))?;
            let config = infera_proxy::Config::try_from(args).map_err(|e| format!("{argv:?}: {e}"))?;
            if config.name.as_deref() != Some(pod.name.as_str()) {
                return Err(format!("the lease holder is {:?}, not the pod", config.name));
            }
            Parsed::Proxy(Box::new(config))
        }
        "infera-launch" => Parsed::Launch(launch(&start)?),
        other => return Err(format!("{other}: which binary is that?")),
    };
    Ok(Some(parsed))
}

/// `infera-launch up …` as the launcher checks it (the deployment file, `--only-host`).
pub(crate) fn launch(start: &Start) -> Result<Box<infera_launcher::up::UpConfig>, String> {
    let cmd = infera_launcher::Args::command();
    let up = cmd.find_subcommand("up").ok_or("an up subcommand")?;
    let argv: Vec<String> = start.words.iter().cloned().chain(as_flags(up, &start.env)?).collect();
    let args = infera_launcher::Args::try_parse_from(&argv).map_err(|e| format!("{argv:?}: {e}"))?;
    match infera_launcher::Config::try_from(args).map_err(|e| format!("{argv:?}: {e}"))?.command {
        infera_launcher::Command::Up(up) => Ok(up),
        infera_launcher::Command::Plan(_) => Err(format!("{argv:?}: plan only prints")),
    }
}

fn argv(start: &Start, cmd: &clap::Command) -> Result<Vec<String>, String> {
    Ok(start.words.iter().cloned().chain(as_flags(cmd, &start.env)?).collect())
}
