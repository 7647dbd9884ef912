//! `cargo xtask fresh-check [--keep] [--only demo|test] [--root DIR]`: proves the README's
//! promise that on a fresh Debian 12 with only the Rust toolchain, `cargo xtask demo` and
//! `cargo xtask test` each install everything they need themselves. As root, it makes a minimal
//! Debian 12 root (`debootstrap --variant=minbase bookworm`, by default in
//! `target/fresh-check/root`), puts a `git clone` of this repository's HEAD in it (committed
//! work only), and runs the README's two commands inside it with `chroot`: `cargo xtask demo
//! --once`, then `cargo xtask test` in the same root (`--only` runs one), each with no standard
//! input and timed. It prints each one's exit status and wall time, and fails if one failed.
//!
//! What the root holds besides minbase:
//! - the host's Rust toolchain, bind-mounted read-only: rustup's home, and the cargo home, of
//!   which only `bin/` (rustup's proxies) is used. The chroot's own `CARGO_HOME` (`/root/.cargo`)
//!   starts empty, so every crate is downloaded as on a new machine;
//! - what that toolchain cannot work without, as rustup's installer expects on Debian: a C
//!   linker (`gcc`, `libc6-dev`: rustc links with `cc`, and xtask itself is linked before it can
//!   install anything) and `ca-certificates` (cargo fetches crates over HTTPS);
//! - what makes a folder a machine: `/proc`, `/sys`, `/dev`, the host's `/etc/resolv.conf`, an
//!   `/etc/hosts` naming localhost, and a `policy-rc.d` refusing service starts, as in every
//!   Debian build chroot (no init runs there to own them);
//! - the host's network as the host reaches it: the certificate authorities added on the host
//!   (`/usr/local/share/ca-certificates`, e.g. a site's TLS-inspecting proxy, installed in the
//!   root with `update-ca-certificates`), and the variables that point tools at a CA bundle or a
//!   proxy ([`NETWORK_VARS`]) when the host sets them. A machine on that network would have
//!   them; nothing of the project's own set-up comes from the host.
//!
//! Mounts: debootstrap and each command run in a mount namespace of their own (`unshare
//! --mount`, private propagation), where the mounts are made, so they never show on the host and
//! go with the namespace's last process however the run ends, Ctrl-C included. A guard still
//! checks on every way out: it ends the processes left in the root, unmounts whatever is mounted
//! under it, and removes it unless `--keep`; it never removes a root something is mounted under,
//! nor an existing folder this task did not make. A root left by an interrupted run is removed
//! at the start of the next one.

use std::os::unix::fs::PermissionsExt as _;
use std::os::unix::process::ExitStatusExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context as _, bail, ensure};

use crate::{setup, status};

mod cleanup;

use cleanup::{Guard, end_processes, unmount_all};

/// Debian 12.
const SUITE: &str = "bookworm";
const MIRROR: &str = "http://deb.debian.org/debian";
/// What the Rust toolchain needs to build anything (see the module's comment).
const TOOLCHAIN_NEEDS: &str = "ca-certificates,gcc,libc6-dev";
/// Where, inside the root, the host's rustup home and cargo home are mounted (read-only).
const RUSTUP_MOUNT: &str = "/opt/host-rust/rustup";
const CARGO_MOUNT: &str = "/opt/host-rust/cargo";
/// The clone, inside the root.
const CLONE: &str = "/root/infera";
/// Written into a root this task makes: an existing folder without it is never removed.
const MARKER: &str = ".infera-fresh-check";
/// Where Debian keeps the certificate authorities a site adds.
const LOCAL_CAS: &str = "/usr/local/share/ca-certificates";
/// The host's network settings passed into the root when set: CA bundles per tool, proxies.
const NETWORK_VARS: &[&str] = &[
    "SSL_CERT_FILE",
    "SSL_CERT_DIR",
    "CURL_CA_BUNDLE",
    "REQUESTS_CA_BUNDLE",
    "PIP_CERT",
    "NODE_EXTRA_CA_CERTS",
    "GIT_SSL_CAINFO",
    "CARGO_HTTP_CAINFO",
    "http_proxy",
    "https_proxy",
    "no_proxy",
    "HTTP_PROXY",
    "HTTPS_PROXY",
    "NO_PROXY",
];
/// The README's two commands (after `cargo`), by the name `--only` gives them.
const COMMANDS: &[(&str, &[&str])] = &[("demo", &["xtask", "demo", "--once"]), ("test", &["xtask", "test"])];
const USAGE: &str = "usage: cargo xtask fresh-check [--keep] [--only demo|test] [--root DIR]";

/// The command line.
#[derive(Debug, PartialEq)]
struct Options {
    keep: bool,
    only: Option<String>,
    root: PathBuf,
}

fn options(repo: &Path, args: &[String]) -> anyhow::Result<Options> {
    let mut o = Options { keep: false, only: None, root: repo.join("target/fresh-check/root") };
    let mut args = args.iter();
    while let Some(arg) = args.next() {
        match arg.as_str() {
            "--keep" => o.keep = true,
            "--only" => match args.next().map(String::as_str) {
                Some(which @ ("demo" | "test")) => o.only = Some(which.to_owned()),
                other => bail!("--only takes demo or test, not {other:?}; {USAGE}"),
            },
            "--root" => o.root = PathBuf::from(args.next().context(USAGE)?),
            other => bail!("unknown flag {other:?}; {USAGE}"),
        }
    }
    Ok(o)
}

pub(crate) fn run(repo: &Path, args: &[String]) -> anyhow::Result<()> {
    let o = options(repo, args)?;
    ensure!(setup::is_root(), "fresh-check runs as root (debootstrap, mount, chroot)");
    let (rustup, cargo) = host_toolchain()?;
    let head = git_output(repo, &["rev-parse", "HEAD"])?;
    if !git_output(repo, &["status", "--porcelain", "--untracked-files=no"])?.is_empty() {
        eprintln!("xtask: fresh-check runs the commit {head}: uncommitted changes are not in it");
    }
    let debootstrap = debootstrap_program()?;
    let root = fresh_dir(&o.root)?;
    let _guard = Guard { root: root.clone(), keep: o.keep };

    eprintln!("xtask: making a minimal Debian 12 in {}", root.display());
    let started = Instant::now();
    let mut make = in_namespace();
    make.arg(debootstrap).args(["--variant=minbase", &format!("--include={TOOLCHAIN_NEEDS}"), SUITE]);
    make.arg(&root).arg(MIRROR).stdin(Stdio::null());
    status(make)?;
    let made = started.elapsed();
    prepare(&root, repo, &head)?;

    let mut results = Vec::new();
    for (_, cargo_args) in COMMANDS.iter().filter(|(name, _)| o.only.as_deref().is_none_or(|w| w == *name)) {
        let line = format!("cargo {}", cargo_args.join(" "));
        eprintln!("\n== fresh-check: {line}, in the root's {CLONE}");
        let started = Instant::now();
        let exit = in_chroot(&root, &rustup, &cargo, cargo_args)?;
        results.push((line, exit, started.elapsed()));
        end_processes(&root);
    }

    println!("\n== fresh-check: Debian 12 ({SUITE} minbase + {TOOLCHAIN_NEEDS}), commit {head}");
    println!("   {:<28} {:>10} {:>11}", "step", "exit", "wall time");
    println!("   {:<28} {:>10} {:>11}", "debootstrap", "0", clock(made));
    for (line, exit, took) in &results {
        println!("   {line:<28} {:>10} {:>11}", exit_text(*exit), clock(*took));
    }
    let failed: Vec<&str> = results.iter().filter(|r| !r.1.success()).map(|r| r.0.as_str()).collect();
    ensure!(failed.is_empty(), "on a fresh Debian 12, {} failed", failed.join(" and "));
    Ok(())
}

/// The host's rustup home and cargo home, as rustup finds them.
fn host_toolchain() -> anyhow::Result<(PathBuf, PathBuf)> {
    let home = std::env::var_os("HOME").map(PathBuf::from);
    let dir = |var: &str, default: &str| {
        std::env::var_os(var).map(PathBuf::from).or_else(|| home.as_ref().map(|h| h.join(default)))
    };
    let rustup = dir("RUSTUP_HOME", ".rustup")
        .filter(|d| d.join("toolchains").is_dir())
        .context("no rustup home with toolchains (RUSTUP_HOME or ~/.rustup)")?;
    let cargo = dir("CARGO_HOME", ".cargo")
        .filter(|d| d.join("bin/cargo").is_file())
        .context("no cargo home with bin/cargo (CARGO_HOME or ~/.cargo)")?;
    Ok((rustup, cargo))
}

fn git_output(repo: &Path, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("git")
        .arg("--no-optional-locks")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .context("cannot run git")?;
    ensure!(out.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&out.stderr));
    Ok(String::from_utf8(out.stdout)?.trim().to_owned())
}

/// debootstrap, installed on the host first if it is not there.
fn debootstrap_program() -> anyhow::Result<PathBuf> {
    let sbin = Path::new("/usr/sbin/debootstrap");
    if !setup::on_path("debootstrap") && !sbin.exists() {
        eprintln!("xtask: installing debootstrap on this machine");
        let mut update = Command::new("apt-get");
        update.args(["update", "-q"]);
        status(update)?;
        let mut install = Command::new("apt-get");
        install.args(["install", "-y", "-q", "debootstrap"]).env("DEBIAN_FRONTEND", "noninteractive");
        status(install)?;
    }
    Ok(if setup::on_path("debootstrap") { PathBuf::from("debootstrap") } else { sbin.to_owned() })
}

/// `path` made anew and empty but for [`MARKER`]; its canonical form. An earlier root there is
/// removed only if it has the marker and nothing is left mounted under it.
fn fresh_dir(path: &Path) -> anyhow::Result<PathBuf> {
    let path = std::path::absolute(path)?;
    let (Some(parent), Some(name)) = (path.parent(), path.file_name()) else {
        bail!("{} cannot be the root", path.display())
    };
    std::fs::create_dir_all(parent)?;
    let root = std::fs::canonicalize(parent)?.join(name);
    if root.symlink_metadata().is_ok() {
        let empty = std::fs::read_dir(&root).is_ok_and(|mut d| d.next().is_none());
        ensure!(
            empty || root.join(MARKER).is_file(),
            "{} is there and is not a root of fresh-check's; remove it or give another --root",
            root.display()
        );
        end_processes(&root);
        let left = unmount_all(&root);
        ensure!(left.is_empty(), "still mounted under {}: {left:?}", root.display());
        eprintln!("xtask: removing the earlier root {}", root.display());
        std::fs::remove_dir_all(&root)?;
    }
    std::fs::create_dir(&root)?;
    std::fs::write(root.join(MARKER), "made by cargo xtask fresh-check\n")?;
    Ok(root)
}

/// `path` (absolute, as seen inside) in the root.
fn inside(root: &Path, path: &str) -> PathBuf {
    root.join(path.trim_start_matches('/'))
}

/// The machine's last touches (see the module's comment) and the clone of `head`.
fn prepare(root: &Path, repo: &Path, head: &str) -> anyhow::Result<()> {
    let resolv = root.join("etc/resolv.conf");
    // Removed first: a link there would be followed to the host's file.
    let _ = std::fs::remove_file(&resolv);
    std::fs::copy("/etc/resolv.conf", &resolv).context("copying /etc/resolv.conf")?;
    let hosts = root.join("etc/hosts");
    if hosts.symlink_metadata().is_err() {
        std::fs::write(&hosts, "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n")?;
    }
    let policy = root.join("usr/sbin/policy-rc.d");
    std::fs::write(
        &policy,
        "#!/bin/sh\n# cargo xtask fresh-check: no service starts in a chroot\nexit 101\n",
    )?;
    std::fs::set_permissions(&policy, std::fs::Permissions::from_mode(0o755))?;
    for dir in [RUSTUP_MOUNT, CARGO_MOUNT] {
        std::fs::create_dir_all(inside(root, dir))?;
    }
    local_cas(root)?;
    let clone = inside(root, CLONE);
    let mut git = Command::new("git");
    git.args(["clone", "-q"]).arg(repo).arg(&clone);
    status(git)?;
    let mut checkout = Command::new("git");
    checkout.arg("-C").arg(&clone).args(["checkout", "-q", "--detach", head]);
    status(checkout)
}

/// The host's added certificate authorities, installed in the root's trust store.
fn local_cas(root: &Path) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(LOCAL_CAS) else { return Ok(()) };
    let into = inside(root, LOCAL_CAS);
    std::fs::create_dir_all(&into)?;
    let mut copied = 0;
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_some_and(|e| e == "crt") && path.is_file() {
            std::fs::copy(&path, into.join(entry.file_name()))?;
            copied += 1;
        }
    }
    if copied > 0 {
        eprintln!("xtask: the host's {copied} added certificate authorities go into the root's trust store");
        let mut update = Command::new("chroot");
        update.arg(root).args(["update-ca-certificates", "--fresh"]).stdout(Stdio::null());
        status(update)?;
    }
    Ok(())
}

/// `unshare`: what follows runs in a mount namespace of its own, private both ways.
fn in_namespace() -> Command {
    let mut cmd = Command::new("unshare");
    cmd.args(["--mount", "--propagation", "private", "--"]);
    cmd
}

/// `cargo args` in the clone inside the root, with the mounts made in its own namespace, the
/// environment of a fresh root login (plus the toolchain's), and no standard input. The root is
/// bound onto itself first so that `/` is a mount point inside, as on a machine: `ip netns
/// exec` (the failover tests) runs `mount --make-rslave /`, which fails on a plain directory.
fn in_chroot(root: &Path, rustup: &Path, cargo: &Path, args: &[&str]) -> anyhow::Result<ExitStatus> {
    let script = format!(
        r#"root=$1 rustup=$2 cargo=$3; shift 3
mount --bind "$root" "$root"
mount -t proc proc "$root/proc"
mount -t sysfs sysfs "$root/sys"
mount --rbind /dev "$root/dev"
mount --bind -o ro "$rustup" "$root{RUSTUP_MOUNT}"
mount --bind -o ro "$cargo" "$root{CARGO_MOUNT}"
exec chroot "$root" /bin/sh -c 'cd {CLONE} && exec "$@"' sh "$@""#
    );
    let mut cmd = in_namespace();
    cmd.args(["/bin/sh", "-ec", &script, "sh"]).arg(root).arg(rustup).arg(cargo).arg("cargo").args(args);
    cmd.env_clear().stdin(Stdio::null());
    cmd.env("HOME", "/root").env("USER", "root").env("LOGNAME", "root").env("LANG", "C.UTF-8");
    cmd.env(
        "PATH",
        format!("{CARGO_MOUNT}/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"),
    );
    cmd.env("RUSTUP_HOME", RUSTUP_MOUNT).env("CARGO_HOME", "/root/.cargo");
    // The toolchain the host chose (`cargo +1.95.0 xtask fresh-check`), the terminal, and the
    // network's CA bundles and proxies.
    for var in ["RUSTUP_TOOLCHAIN", "TERM"].iter().chain(NETWORK_VARS) {
        if let Some(value) = std::env::var_os(var) {
            cmd.env(var, value);
        }
    }
    cmd.status().with_context(|| format!("cannot run {cmd:?}"))
}

fn exit_text(exit: ExitStatus) -> String {
    match (exit.code(), exit.signal()) {
        (Some(code), _) => code.to_string(),
        (None, Some(signal)) => format!("signal {signal}"),
        (None, None) => "?".to_owned(),
    }
}

/// `42s`, `3m07s`, `1h02m03s`.
fn clock(took: Duration) -> String {
    let s = took.as_secs();
    match (s / 3600, s / 60 % 60, s % 60) {
        (0, 0, sec) => format!("{sec}s"),
        (0, min, sec) => format!("{min}m{sec:02}s"),
        (h, min, sec) => format!("{h}h{min:02}m{sec:02}s"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::args;

    #[test]
    fn flags() {
        let repo = Path::new("/r");
        let o = options(repo, &[]).unwrap();
        assert_eq!(o, Options { keep: false, only: None, root: PathBuf::from("/r/target/fresh-check/root") });
        let o = options(repo, &args(&["--keep", "--only", "test", "--root", "/tmp/x"])).unwrap();
        assert_eq!(o, Options { keep: true, only: Some("test".into()), root: PathBuf::from("/tmp/x") });
        assert!(options(repo, &args(&["--only", "bench"])).is_err());
        assert!(options(repo, &args(&["--only"])).is_err());
        assert!(options(repo, &args(&["--root"])).is_err());
        assert!(options(repo, &args(&["--fast"])).is_err());
    }

    #[test]
    fn clocks() {
        assert_eq!(clock(Duration::from_secs(42)), "42s");
        assert_eq!(clock(Duration::from_secs(187)), "3m07s");
        assert_eq!(clock(Duration::from_secs(3723)), "1h02m03s");
    }
}
