//! A unit of `deploy/systemd/` started as systemd would start it on a host whose `/etc/infera/`
//! is a folder of the caller's (a test's "site": every path under it, in the unit, its env files
//! and the words and values they give, is taken there): the `ExecStart` words with the specifiers `%i`
//! (instance), `%H` (host) and `%d` (the credentials folder) resolved; the environment from
//! `Environment=` and then `EnvironmentFile=` (whose values win, as in systemd; a missing file
//! fails the start unless it is written `-/path`); each `LoadCredential=ID:PATH` copied into the
//! credentials folder as `ID` (a missing source fails the start, as in systemd). Every
//! `[Service]` directive must be one this reader knows, so a misspelt one (which systemd would
//! ignore with a warning) fails the check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{Context, bail};

/// The `[Service]` directives the units may use.
const KNOWN: &[&str] = &[
    "Type",
    "EnvironmentFile",
    "Environment",
    "ExecStart",
    "ExecReload",
    "Restart",
    "RestartSec",
    "KillMode",
    "KillSignal",
    "TimeoutStopSec",
    "LimitNOFILE",
    "LoadCredential",
    "DynamicUser",
    "NoNewPrivileges",
    "ProtectSystem",
    "ProtectHome",
    "PrivateTmp",
];

/// Where the units find the site's files.
const ETC: &str = "/etc/infera/";

/// One unit file's `[Service]` section.
#[derive(Debug)]
pub struct Unit {
    /// The file name, e.g. `infera-proxy@.service`.
    pub name: String,
    service: Vec<(String, String)>,
}

/// A unit's process as systemd would start it.
#[derive(Debug)]
pub struct Started {
    /// The program's file name (`infera-control`).
    pub program: String,
    /// The words after it.
    pub args: Vec<String>,
    /// Its environment (the unit's and its env files').
    pub env: BTreeMap<String, String>,
}

impl Unit {
    /// Reads `deploy/systemd/<name>`.
    ///
    /// # Errors
    /// An unreadable file, a line that is not `Key=Value`, or a `[Service]` directive this
    /// reader does not know.
    pub fn read(name: &str) -> anyhow::Result<Self> {
        let path = crate::dir().join("systemd").join(name);
        let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
        let mut section = String::new();
        let mut service = Vec::new();
        for line in text.lines().map(str::trim).filter(|l| !l.is_empty() && !l.starts_with('#')) {
            if let Some(s) = line.strip_prefix('[').and_then(|l| l.strip_suffix(']')) {
                s.clone_into(&mut section);
                continue;
            }
            let Some((key, value)) = line.split_once('=') else { bail!("{name}: not Key=Value: {line}") };
            if section == "Service" {
                if !KNOWN.contains(&key) {
                    bail!("{name}: [Service] {key}= is not a directive these units use (misspelt?)");
                }
                service.push((key.to_owned(), value.to_owned()));
            }
        }
        Ok(Self { name: name.to_owned(), service })
    }

    /// Every value of `key`, in order.
    pub fn values<'a>(&'a self, key: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.service.iter().filter(move |(k, _)| k == key).map(|(_, v)| v.as_str())
    }

    /// `LimitNOFILE=`: soft and hard alike, or `soft:hard`; `None` when the unit leaves it.
    ///
    /// # Errors
    /// A value that is not one or two numbers.
    pub fn limit_nofile(&self) -> anyhow::Result<Option<(u64, u64)>> {
        let Some(value) = self.values("LimitNOFILE").last() else { return Ok(None) };
        let number =
            |s: &str| s.parse::<u64>().with_context(|| format!("{}: LimitNOFILE={value}", self.name));
        Ok(Some(match value.split_once(':') {
            Some((soft, hard)) => (number(soft)?, number(hard)?),
            None => (number(value)?, number(value)?),
        }))
    }

    /// Starts instance `instance` on host `host` with `/etc/infera/` at `site`, its
    /// credentials copied into `credentials`.
    ///
    /// # Errors
    /// What would stop systemd from starting it: a required env file or a credential's source
    /// missing, a line that does not parse.
    pub fn start(
        &self,
        instance: &str,
        host: &str,
        site: &Path,
        credentials: &Path,
    ) -> anyhow::Result<Started> {
        let at_site = |v: &str| v.replace(ETC, &format!("{}/", site.display()));
        let expand = |v: &str| -> String {
            v.replace("%%", "\u{0}")
                .replace("%i", instance)
                .replace("%H", host)
                .replace("%d", &credentials.display().to_string())
                .replace('\u{0}', "%")
        };
        let on_site = |path: &str| -> anyhow::Result<PathBuf> {
            let rest = path
                .strip_prefix(ETC)
                .with_context(|| format!("{}: {path} is not under {ETC}", self.name))?;
            Ok(site.join(rest))
        };
        for credential in self.values("LoadCredential") {
            let (id, source) =
                credential.split_once(':').with_context(|| format!("LoadCredential={credential}"))?;
            let from = on_site(&expand(source))?;
            std::fs::copy(&from, credentials.join(id))
                .with_context(|| format!("{}: LoadCredential={credential}: {}", self.name, from.display()))?;
        }
        let mut env = BTreeMap::new();
        for assignment in self.values("Environment") {
            let (k, v) = assignment.split_once('=').with_context(|| format!("Environment={assignment}"))?;
            env.insert(k.to_owned(), at_site(&expand(v)));
        }
        for file in self.values("EnvironmentFile") {
            let (optional, file) = file.strip_prefix('-').map_or((false, file), |f| (true, f));
            let path = on_site(&expand(file))?;
            match std::fs::read_to_string(&path) {
                Ok(text) => {
                    let values = env_file(&text).with_context(|| path.display().to_string())?;
                    env.extend(values.into_iter().map(|(k, v)| (k, at_site(&v))));
                }
                Err(_) if optional => {}
                Err(e) => bail!("{}: EnvironmentFile={file}: {}: {e}", self.name, path.display()),
            }
        }
        let exec = self.values("ExecStart").last().with_context(|| format!("{}: no ExecStart", self.name))?;
        if exec.contains('$') {
            bail!("{}: ExecStart expands variables, which this reader does not", self.name);
        }
        let mut words = exec.split_whitespace().map(|w| at_site(&expand(w)));
        let program = words.next().unwrap_or_default();
        let program = Path::new(&program).file_name().and_then(|n| n.to_str()).unwrap_or_default().to_owned();
        Ok(Started { program, args: words.collect(), env })
    }
}

/// `KEY=VALUE` lines of an env file, comments and blank lines skipped.
///
/// # Errors
/// A line that is not `KEY=VALUE`.
pub fn env_file(text: &str) -> anyhow::Result<BTreeMap<String, String>> {
    text.lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .map(|l| match l.split_once('=') {
            Some((k, v)) => Ok((k.to_owned(), v.to_owned())),
            None => bail!("not KEY=VALUE: {l}"),
        })
        .collect()
}
