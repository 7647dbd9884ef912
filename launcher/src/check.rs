//! Deployment file → [`Plan`], rejecting impossible combinations before anything starts.
//! Every problem names the line and the field (`decode.workers[0].gpus`); all problems of a
//! file are reported together.

mod router;
mod workers;

use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use infera_proto::types::Role;
use toml::Spanned;

use crate::deployment::{DeploymentFile, Engine, RoleSection, line_column};
use crate::detect;
use crate::plan::{Plan, Resolved, VersionSource};
use crate::sglang::{OWNED_FLAGS, Speculative};
use crate::version::SglangVersion;

/// Variables the launcher derives itself; a file may not set them.
const PP_PARTITION_VAR: &str = "SGLANG_PP_LAYER_PARTITION";
const SIM_VERSION_VAR: &str = "INFERA_SIM_SGLANG_VERSION";

/// One thing wrong with a deployment file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Problem {
    /// 1-based line (0 when the value was defaulted).
    pub line: usize,
    /// The key, as a path (`prefill.pp_layers`).
    pub field: String,
    /// What is wrong.
    pub message: String,
}

/// A deployment file whose values cannot work together.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub struct Invalid {
    /// The deployment file checked.
    pub path: PathBuf,
    /// Every problem, in file order.
    pub problems: Vec<Problem>,
}

impl fmt::Display for Invalid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} is not a valid deployment:", self.path.display())?;
        for p in &self.problems {
            write!(f, "\n  {}:{}: {}: {}", self.path.display(), p.line, p.field, p.message)?;
        }
        Ok(())
    }
}

/// Collects problems with their lines.
struct Checker<'a> {
    text: &'a str,
    problems: Vec<Problem>,
}

impl Checker<'_> {
    fn report(&mut self, span: Range<usize>, field: impl Into<String>, message: impl Into<String>) {
        let line = if span == (0..0) { 0 } else { line_column(self.text, span.start).0 };
        self.problems.push(Problem { line, field: field.into(), message: message.into() });
    }

    fn at<T>(&mut self, value: &Spanned<T>, field: impl Into<String>, message: impl Into<String>) {
        self.report(value.span(), field, message);
    }
}

/// A role's section with its name and role.
struct RoleRef<'a> {
    key: &'static str,
    role: Role,
    section: &'a Spanned<RoleSection>,
}

/// Checks a parsed file and builds its plan.
pub fn plan(file: &DeploymentFile, text: &str, path: &Path) -> Result<Plan, Invalid> {
    let mut c = Checker { text, problems: Vec::new() };
    let sglang = check_version(file, &mut c);
    let version = sglang.version;
    let roles = check_shape(file, &mut c);
    let spec = check_speculative(file, &mut c);
    let mut workers = Vec::new();
    for r in &roles {
        check_role(file, r, version, &mut c);
        for (i, w) in r.section.get_ref().workers.iter().enumerate() {
            let field = format!("{}.workers[{i}]", r.key);
            workers.push(workers::build(file, r, w, &field, version, &spec, &mut c));
        }
    }
    workers::check_placements(&roles, &mut c);
    router::check(file, &mut c);
    c.problems.sort_by_key(|p| p.line);
    if c.problems.is_empty() {
        Ok(Plan { sglang, workers })
    } else {
        Err(Invalid { path: path.to_owned(), problems: c.problems })
    }
}

/// The file's `sglang_version`; unset, the version `python` has installed (engine `sglang`)
/// or the newest supported release (engine `sim`, stated in the plan).
fn check_version(file: &DeploymentFile, c: &mut Checker<'_>) -> Resolved {
    let resolved = |version, source| Resolved { version, source };
    let (field, span, version, source) = match (&file.sglang_version, file.engine) {
        (Some(v), _) => match v.get_ref().parse::<SglangVersion>() {
            Ok(version) => ("sglang_version", v.span(), version, VersionSource::File),
            Err(e) => {
                c.at(v, "sglang_version", e.to_string());
                return resolved(SglangVersion::NEWEST, VersionSource::File);
            }
        },
        (None, Engine::Sim) => return resolved(SglangVersion::NEWEST, VersionSource::SimDefault),
        (None, Engine::Sglang) => {
            let python = file.python.get_ref();
            // A `python` the file sets is where to look; the default one is the unset version's fault.
            let field = if file.python.span() == (0..0) { "sglang_version" } else { "python" };
            let source = VersionSource::Detected { python: python.clone() };
            match detect::detect(python) {
                Ok(version) => (field, file.python.span(), version, source),
                Err(e) => {
                    let msg = format!(
                        "sglang_version is not set and cannot be detected: {e}; set sglang_version, or python to \
                         the interpreter that has SGLang installed"
                    );
                    c.report(file.python.span(), field, msg);
                    return resolved(SglangVersion::NEWEST, source);
                }
            }
        }
    };
    if !version.is_supported() {
        let whose = match &source {
            VersionSource::Detected { python } => format!("{python} has SGLang {version} installed, which"),
            _ => format!("SGLang {version}"),
        };
        let msg = format!(
            "{whose} is not supported: generated command lines are checked against SGLang's own parser for \
             {} – {}",
            SglangVersion::OLDEST,
            SglangVersion::NEWEST
        );
        c.report(span, field, msg);
    }
    resolved(version, source)
}

/// PD (prefill + decode) or aggregated (mixed), each role with workers.
fn check_shape<'a>(file: &'a DeploymentFile, c: &mut Checker<'_>) -> Vec<RoleRef<'a>> {
    let mut roles = Vec::new();
    for (key, role, section) in [
        ("prefill", Role::Prefill, &file.prefill),
        ("decode", Role::Decode, &file.decode),
        ("mixed", Role::Mixed, &file.mixed),
    ] {
        if let Some(section) = section {
            if section.get_ref().workers.is_empty() {
                c.at(section, key, format!("[{key}] lists no workers (add [[{key}.workers]])"));
            }
            roles.push(RoleRef { key, role, section });
        }
    }
    match (&file.prefill, &file.decode, &file.mixed) {
        (None, None, None) => c.report(0..0, "prefill/decode/mixed", "the file defines no workers"),
        (Some(p), None, _) => c.at(p, "decode", "a PD deployment needs [decode] workers besides [prefill]"),
        (None, Some(d), _) => c.at(d, "prefill", "a PD deployment needs [prefill] workers besides [decode]"),
        (Some(_), Some(_), Some(m)) => {
            c.at(m, "mixed", "aggregated [mixed] workers cannot share a deployment with [prefill]/[decode]")
        }
        _ => {}
    }
    if let Some(t) = &file.transfer
        && file.mixed.is_some()
        && file.prefill.is_none()
    {
        c.at(t, "transfer", "[transfer] applies to PD deployments; [mixed] workers transfer no KV");
    }
    roles
}

/// The decode's speculative settings, mirrored onto prefills so the transfer carries the
/// draft layer's KV; a prefill may repeat them but not differ.
fn check_speculative(file: &DeploymentFile, c: &mut Checker<'_>) -> Option<Speculative> {
    for (key, section) in [("prefill", &file.prefill), ("decode", &file.decode), ("mixed", &file.mixed)] {
        if let Some(s) = section.as_ref().and_then(|s| s.get_ref().speculative.as_ref()) {
            let s_ref = s.get_ref();
            if s_ref.num_steps == 0 || s_ref.eagle_topk == 0 || s_ref.num_draft_tokens == 0 {
                c.at(
                    s,
                    format!("{key}.speculative"),
                    "num_steps, eagle_topk and num_draft_tokens must be ≥ 1",
                );
            } else if s_ref.eagle_topk == 1 && s_ref.num_draft_tokens != s_ref.num_steps + 1 {
                c.at(
                    s,
                    format!("{key}.speculative.num_draft_tokens"),
                    format!(
                        "with eagle_topk = 1, num_draft_tokens must be num_steps + 1 = {} (got {}; SGLang \
                         would silently change it)",
                        s_ref.num_steps + 1,
                        s_ref.num_draft_tokens
                    ),
                );
            }
        }
    }
    let decode = file.decode.as_ref().and_then(|d| d.get_ref().speculative.as_ref());
    let prefill = file.prefill.as_ref().and_then(|p| p.get_ref().speculative.as_ref());
    match (prefill, decode) {
        (Some(p), Some(d)) if p.get_ref() != d.get_ref() => c.at(
            p,
            "prefill.speculative",
            format!(
                "differs from decode.speculative (line {}): prefills must carry the decode's draft settings",
                line_column(c.text, d.span().start).0
            ),
        ),
        (Some(p), None) => c.at(
            p,
            "prefill.speculative",
            "set without decode.speculative: the decode decides speculation and prefills mirror it",
        ),
        _ => {}
    }
    decode.map(|d| d.get_ref().clone())
}

fn check_role(file: &DeploymentFile, r: &RoleRef<'_>, version: SglangVersion, c: &mut Checker<'_>) {
    let s = r.section.get_ref();
    let key = r.key;
    for (name, v) in [("tp", &s.tp), ("pp", &s.pp), ("dp", &s.dp), ("attn_dp", &s.attn_dp)] {
        if *v.get_ref() == 0 {
            c.at(v, format!("{key}.{name}"), "must be ≥ 1");
        }
    }
    let (tp, dp, attn_dp) = (*s.tp.get_ref(), *s.dp.get_ref(), *s.attn_dp.get_ref());
    if attn_dp > 1 && tp % attn_dp != 0 {
        c.at(
            &s.attn_dp,
            format!("{key}.attn_dp"),
            format!("{attn_dp} attention-DP ranks do not divide tp = {tp}"),
        );
    }
    if attn_dp > 1 && dp > 1 && !version.has_attn_dp_size() {
        c.at(
            &s.dp,
            format!("{key}.dp"),
            format!(
                "SGLang {version} cannot combine DP replicas with attention DP (--attn-dp-size needs 0.5.22+)"
            ),
        );
    }
    check_pp_layers(file, r, c);
    if let Some(size) = &s.chunked_prefill_size
        && (*size.get_ref() == 0 || *size.get_ref() < -1)
    {
        c.at(size, format!("{key}.chunked_prefill_size"), "must be > 0, or -1 to disable chunking");
    }
    if let Some(policy) = &s.schedule_policy
        && !policy.get_ref().exists_in(version)
    {
        let msg = format!(
            "{} needs SGLang 0.5.21 or later (sglang_version = {version})",
            policy.get_ref().as_str()
        );
        c.at(policy, format!("{key}.schedule_policy"), msg);
    }
    if let Some(f) = &s.mem_fraction_static
        && !(*f.get_ref() > 0.0 && *f.get_ref() < 1.0)
    {
        c.at(f, format!("{key}.mem_fraction_static"), "must be between 0 and 1 (exclusive)");
    }
    for arg in s.extra_args.get_ref() {
        let flag = arg.split_once('=').map_or(arg.as_str(), |(f, _)| f);
        if OWNED_FLAGS.contains(&flag) {
            c.at(
                &s.extra_args,
                format!("{key}.extra_args"),
                format!("{flag} is set by a typed key; use that key"),
            );
        }
    }
    let owned = owned_env(file);
    for var in s.env.get_ref().keys().filter(|k| owned.contains(&k.as_str())) {
        c.at(&s.env, format!("{key}.env.{var}"), "is set by the launcher");
    }
    if r.role != Role::Prefill
        && let Some(w) = s.workers.iter().find(|w| w.get_ref().bootstrap_port.is_some())
    {
        let p = w.get_ref().bootstrap_port.as_ref().expect("found");
        c.at(p, format!("{key}.workers.bootstrap_port"), "only prefill workers have a bootstrap port");
    }
}

fn check_pp_layers(file: &DeploymentFile, r: &RoleRef<'_>, c: &mut Checker<'_>) {
    let s = r.section.get_ref();
    let Some(layers) = &s.pp_layers else { return };
    let field = format!("{}.pp_layers", r.key);
    let pp = *s.pp.get_ref() as usize;
    let sum: u64 = layers.get_ref().iter().map(|&l| u64::from(l)).sum();
    if pp == 1 {
        c.at(layers, field, "set without pipeline parallelism (pp = 1)");
    } else if layers.get_ref().len() != pp {
        c.at(layers, field, format!("lists {} stages but pp = {pp}", layers.get_ref().len()));
    } else if layers.get_ref().contains(&0) {
        c.at(layers, field, "every stage needs at least one layer");
    } else if let Some(n) = &file.model.num_layers {
        if sum != u64::from(*n.get_ref()) {
            let msg = format!(
                "stages sum to {sum} layers but model.num_layers = {} (line {})",
                n.get_ref(),
                line_column(c.text, n.span().start).0
            );
            c.at(layers, field, msg);
        }
    } else {
        c.at(layers, field, format!("needs model.num_layers to check the partition (it sums to {sum})"));
    }
}

/// Environment variables the launcher sets itself.
fn owned_env(file: &DeploymentFile) -> [&'static str; 3] {
    [file.platform.visible_devices_var(), PP_PARTITION_VAR, SIM_VERSION_VAR]
}
