//! A host's `/etc/infera` in a temporary folder, made the way the guide says
//! (manual/guides/systemd.md): the env files of `deploy/systemd/` installed, the guide's own
//! blocks run (marked `<!-- deploy/tests/site: NAME -->`) with `/etc/infera` pointed here, and
//! the etcd files a site gets from etcd's CA. The units are then started as systemd would
//! ([`infera_deploy::systemd::Unit`]) on it.

use std::path::{Path, PathBuf};

use infera_deploy::systemd::{Started, Unit};

/// The shell block after the marker `<!-- deploy/tests/site: NAME -->` of the guide.
pub(crate) fn block(name: &str) -> String {
    let marker = format!("deploy/tests/site: {name}");
    infera_deploy::manual_block("guides/systemd.md", &marker).unwrap_or_else(|e| panic!("{e:#}"))
}

/// A site: `root` is its `/etc/infera`, `pki` where the guide made the files.
#[derive(Debug)]
pub(crate) struct Site {
    _dir: tempfile::TempDir,
    /// `/etc/infera`.
    pub(crate) root: PathBuf,
    /// The guide's `infera-pki` folder (the CA, the keys and tokens it gave out).
    pub(crate) pki: PathBuf,
}

impl Site {
    /// The env files installed, the guide's blocks run, etcd's CA and the client certificates of
    /// control and the launcher under `etcd/`.
    pub(crate) fn new() -> Self {
        let dir = tempfile::tempdir().expect("a temporary folder");
        let root = dir.path().join("etc/infera");
        std::fs::create_dir_all(&root).unwrap();
        for entry in std::fs::read_dir(infera_deploy::dir().join("systemd")).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_some_and(|e| e == "env") {
                std::fs::copy(&path, root.join(path.file_name().unwrap())).unwrap();
            }
        }
        run(dir.path(), &block("make"));
        let pki = dir.path().join("infera-pki");
        let etc = root.display().to_string();
        for host in ["control host", "proxy host"] {
            run(&pki, &block(host).replace("/etc/infera", &etc));
        }
        let site = Self { _dir: dir, root, pki };
        let etcd = infera_testkit::tls::TestCa::new("etcd");
        site.etcd_files(&etcd.ca(), "control", &etcd.issue("infera-control", &[]));
        site.etcd_files(&etcd.ca(), "launch", &etcd.issue("infera-launch", &[]));
        site
    }

    /// etcd's CA and `part`'s client certificate where the units and launch.env read them
    /// (`etcd/ca.pem`, `etcd/<part>.pem`, `etcd/<part>-key.pem`).
    pub(crate) fn etcd_files(&self, ca: &Path, part: &str, issued: &infera_testkit::tls::Issued) {
        let dir = self.root.join("etcd");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::copy(ca, dir.join("ca.pem")).unwrap();
        std::fs::copy(&issued.cert, dir.join(format!("{part}.pem"))).unwrap();
        std::fs::copy(&issued.key, dir.join(format!("{part}-key.pem"))).unwrap();
    }

    /// Sets `key` in the installed env file `file` to `value`, as an operator edits it for the
    /// host (the line must be there).
    pub(crate) fn set(&self, file: &str, key: &str, value: &str) {
        let path = self.root.join(file);
        let text = std::fs::read_to_string(&path).unwrap();
        let prefix = format!("{key}=");
        assert!(text.lines().any(|l| l.starts_with(&prefix)), "{file} sets no {key}");
        let edited: Vec<String> = text
            .lines()
            .map(|l| if l.starts_with(&prefix) { format!("{prefix}{value}") } else { l.to_owned() })
            .collect();
        std::fs::write(&path, edited.join("\n") + "\n").unwrap();
    }

    /// A model's tokenizer in a folder of its own (returned), made the proxies' in `proxy.env`
    /// in place of the model path this site does not have.
    pub(crate) fn tokenizer(&self) -> tempfile::TempDir {
        let model = tempfile::tempdir().unwrap();
        infera_tokenize::fixture::write_model_dir(model.path(), 300).unwrap();
        let file = model.path().join("tokenizer.json");
        self.set("proxy.env", "INFERA_PROXY_TOKENIZER", &file.display().to_string());
        model
    }

    /// The variables of the installed env file `file`.
    pub(crate) fn env(&self, file: &str) -> std::collections::BTreeMap<String, String> {
        let text = std::fs::read_to_string(self.root.join(file)).unwrap();
        infera_deploy::systemd::env_file(&text).unwrap_or_else(|e| panic!("{file}: {e:#}"))
    }

    /// A file the guide made (in `infera-pki`), trimmed.
    pub(crate) fn pki_text(&self, file: &str) -> String {
        std::fs::read_to_string(self.pki.join(file)).unwrap().trim().to_owned()
    }

    /// Starts `unit` (instance `instance`, host `node-1`) on this site; the credentials folder
    /// goes with the returned guard.
    pub(crate) fn start(&self, unit: &str, instance: &str) -> anyhow::Result<(Started, tempfile::TempDir)> {
        let credentials = tempfile::tempdir()?;
        let started = Unit::read(unit)?.start(instance, "node-1", &self.root, credentials.path())?;
        Ok((started, credentials))
    }
}

/// `started` as the argv its binary's parser sees: program, words, then the variables' flags.
pub(crate) fn argv(cmd: &clap::Command, started: &Started) -> Vec<String> {
    let flags = infera_deploy::as_flags(cmd, &started.env).unwrap_or_else(|e| panic!("{e}"));
    std::iter::once(started.program.clone()).chain(started.args.iter().cloned()).chain(flags).collect()
}

/// Runs the guide's `script` in `dir`.
fn run(dir: &Path, script: &str) {
    infera_deploy::run_sh(dir, script).unwrap_or_else(|e| panic!("{e:#}"));
}
