//! The embedded default registry: a static TOML file of workers (`--workers FILE`).
//!
//! ```toml
//! [[workers]]
//! id = "decode-0"
//! role = "decode"            # prefill | decode | mixed
//! url = "http://127.0.0.1:30001"
//! model = "glm-5.2"
//! dp_size = 8                # DP ranks; left out: asked of the worker's /server_info
//! bootstrap_port = 8998      # prefill only; SGLang's default when omitted
//! ```

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use infera_proto::types::{RegisteredWorker, Role};
use serde::Deserialize;

/// SGLang's default `--disaggregation-bootstrap-port`.
pub const DEFAULT_BOOTSTRAP_PORT: u16 = 8998;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct WorkersFile {
    #[serde(default)]
    workers: Vec<RegisteredWorker>,
}

/// A workers file that cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum WorkersFileError {
    /// The file cannot be read.
    #[error("cannot read workers file {path}: {source}")]
    Read {
        /// The workers file given to `--workers`.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: std::io::Error,
    },
    /// Not valid TOML of the expected shape (the message names line and column).
    #[error("workers file {path}: {source}")]
    Parse {
        /// The workers file given to `--workers`.
        path: PathBuf,
        /// toml's error (names the line and column).
        #[source]
        source: Box<toml::de::Error>,
    },
    /// A worker entry with a bad value.
    #[error("workers file {path}: workers[{index}] (id {id:?}): {problem}")]
    Invalid {
        /// The workers file given to `--workers`.
        path: PathBuf,
        /// Position of the entry.
        index: usize,
        /// The entry's `id` as written.
        id: String,
        /// What is wrong.
        problem: &'static str,
    },
}

/// Reads and checks a workers file.
pub fn load(path: &Path) -> Result<Vec<RegisteredWorker>, WorkersFileError> {
    let text = std::fs::read_to_string(path)
        .map_err(|source| WorkersFileError::Read { path: path.to_owned(), source })?;
    parse(&text, path)
}

/// Parses and checks workers-file text; `path` names it in errors.
pub fn parse(text: &str, path: &Path) -> Result<Vec<RegisteredWorker>, WorkersFileError> {
    let file: WorkersFile = toml::from_str(text)
        .map_err(|e| WorkersFileError::Parse { path: path.to_owned(), source: Box::new(e) })?;
    let mut seen = HashSet::new();
    file.workers
        .into_iter()
        .enumerate()
        .map(|(index, mut w)| {
            let invalid = |problem| WorkersFileError::Invalid {
                path: path.to_owned(),
                index,
                id: w.id.to_string(),
                problem,
            };
            w.check().map_err(invalid)?;
            if !seen.insert(w.id.clone()) {
                return Err(invalid("duplicate worker id"));
            }
            if w.role == Role::Prefill {
                w.bootstrap_port.get_or_insert(DEFAULT_BOOTSTRAP_PORT);
            }
            Ok(w)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_str(text: &str) -> Result<Vec<RegisteredWorker>, WorkersFileError> {
        parse(text, Path::new("workers.toml"))
    }

    #[test]
    fn a_pd_deployment_parses_with_defaults_and_dp_size_left_to_ask() {
        let w = parse_str(
            r#"
            [[workers]]
            id = "p0"
            role = "prefill"
            url = "http://127.0.0.1:30000"
            model = "m"

            [[workers]]
            id = "d0"
            role = "decode"
            url = "http://127.0.0.1:30001"
            model = "m"
            dp_size = 8
            labels = { zone = "a" }
            "#,
        )
        .unwrap();
        assert_eq!(w[0].bootstrap_port, Some(DEFAULT_BOOTSTRAP_PORT));
        assert_eq!(w[0].dp_size, None, "left out: asked of the worker");
        assert_eq!(w[1].dp_size, Some(8), "given: kept");
        assert_eq!(w[1].labels["zone"], "a");
    }

    #[test]
    fn bad_entries_name_the_entry_and_the_problem() {
        let dup = parse_str(
            "[[workers]]\nid='a'\nrole='decode'\nurl='http://h:1'\nmodel='m'\n\
             [[workers]]\nid='a'\nrole='decode'\nurl='http://h:2'\nmodel='m'\n",
        )
        .unwrap_err()
        .to_string();
        assert!(dup.contains("workers[1]") && dup.contains("duplicate"), "{dup}");

        let url = parse_str("[[workers]]\nid='a'\nrole='decode'\nurl='h:1'\nmodel='m'\n").unwrap_err();
        assert!(url.to_string().contains("url"), "{url}");

        let dp = parse_str("[[workers]]\nid='a'\nrole='decode'\nurl='http://h:1'\nmodel='m'\ndp_size=0\n");
        assert!(dp.unwrap_err().to_string().contains("dp_size"));
    }

    #[test]
    fn unknown_keys_and_roles_are_rejected_with_a_line() {
        let e = parse_str("[[workers]]\nid='a'\nrole='decode'\nurl='http://h:1'\nmodel='m'\ndp_sise=2\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("dp_sise") && e.contains("line 6"), "{e}");
        let e = parse_str("[[workers]]\nid='a'\nrole='router'\nurl='http://h:1'\nmodel='m'\n").unwrap_err();
        assert!(e.to_string().contains("router"), "{e}");
    }
}
