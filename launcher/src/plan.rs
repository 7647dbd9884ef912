//! The product of a deployment file: per worker, the program, its SGLang argv and its
//! environment, ready to exec, and their copy-pasteable shell form.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use infera_proto::types::Role;

use crate::sglang::SglangArgs;
use crate::version::SglangVersion;

/// Every worker of a deployment, in file order (prefills, decodes, mixed).
#[derive(Clone, Debug, PartialEq)]
pub struct Plan {
    /// The SGLang version the command lines are spelled for, and where it came from.
    pub sglang: Resolved,
    /// One entry per worker process, in file order.
    pub workers: Vec<WorkerPlan>,
}

/// The SGLang version of a deployment and its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Resolved {
    /// The SGLang release the command lines are spelled for.
    pub version: SglangVersion,
    /// Where it came from.
    pub source: VersionSource,
}

/// Where a deployment's SGLang version came from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum VersionSource {
    /// The file's `sglang_version`.
    File,
    /// Asked of the file's `python` (engine `sglang` without `sglang_version`).
    Detected {
        /// The file's `python`, which was asked for its SGLang version.
        python: String,
    },
    /// Engine `sim` without `sglang_version`: the newest supported release.
    SimDefault,
}

impl std::fmt::Display for Resolved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let v = self.version;
        match &self.source {
            VersionSource::File => write!(f, "SGLang {v} (sglang_version)"),
            VersionSource::Detected { python } => write!(f, "SGLang {v} (detected from {})", quote(python)),
            VersionSource::SimDefault => {
                write!(
                    f,
                    "SGLang {v} (sglang_version unset: engine sim emulates the newest supported release)"
                )
            }
        }
    }
}

/// One worker, ready to exec.
#[derive(Clone, Debug, PartialEq)]
pub struct WorkerPlan {
    /// Unique in the deployment.
    pub name: String,
    /// What it does.
    pub role: Role,
    /// The node it runs on.
    pub host: String,
    /// GPU ids on that node.
    pub gpus: Vec<u32>,
    /// The program and its fixed leading arguments (`python3 -m sglang.launch_server`).
    pub program: Vec<String>,
    /// The SGLang arguments.
    pub args: SglangArgs,
    /// Variables set on top of the launcher's own environment.
    pub env: BTreeMap<String, String>,
}

impl WorkerPlan {
    /// Program and arguments.
    pub fn argv(&self) -> Vec<String> {
        self.program.iter().cloned().chain(self.args.render()).collect()
    }

    /// `env K=V … program --flag value \` lines, one flag per line, shell-quoted.
    pub fn shell(&self) -> String {
        let mut lines = Vec::new();
        let mut head: Vec<String> = vec!["env".to_owned()];
        head.extend(self.env.iter().map(|(k, v)| format!("{k}={}", quote(v))));
        lines.push(head.join(" "));
        lines.push(format!("  {}", self.program.iter().map(|p| quote(p)).collect::<Vec<_>>().join(" ")));
        let args = self.args.render();
        let mut i = 0;
        while i < args.len() {
            let mut line = format!("  {}", quote(&args[i]));
            if let Some(value) = args.get(i + 1).filter(|next| !next.starts_with("--")) {
                let _ = write!(line, " {}", quote(value));
                i += 1;
            }
            lines.push(line);
            i += 1;
        }
        lines.join(" \\\n")
    }
}

impl Plan {
    /// What `infera-launch plan` prints: the SGLang version the command lines are spelled for,
    /// then per worker a comment line and its command.
    pub fn render(&self) -> String {
        let mut out = format!("# {}\n", self.sglang);
        for w in &self.workers {
            out.push('\n');
            let gpus = w.gpus.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
            let _ = writeln!(out, "# {} ({} on {}, GPUs {gpus})", w.name, w.role.as_str(), w.host);
            out.push_str(&w.shell());
            out.push('\n');
        }
        out
    }
}

/// POSIX shell quoting: plain words stay as they are, anything else goes in single quotes.
pub fn quote(word: &str) -> String {
    let plain =
        !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_./:=,@%+".contains(&b));
    if plain { word.to_owned() } else { format!("'{}'", word.replace('\'', r"'\''")) }
}

#[cfg(test)]
mod tests {
    use super::quote;

    #[test]
    fn words_are_quoted_only_when_needed() {
        assert_eq!(quote("--tp-size"), "--tp-size");
        assert_eq!(quote("/models/GLM-5.2"), "/models/GLM-5.2");
        assert_eq!(quote(r#"{"a":1}"#), r#"'{"a":1}'"#);
        assert_eq!(quote("it's"), r"'it'\''s'");
        assert_eq!(quote(""), "''");
        assert_eq!(quote("a b"), "'a b'");
    }
}
