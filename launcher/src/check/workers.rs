//! One worker: its typed SGLang arguments and environment, and the checks across workers
//! (names, GPUs and ports that two workers on one node would both claim).

use std::collections::BTreeMap;

use infera_proto::types::Role;
use toml::Spanned;

use super::{Checker, PP_PARTITION_VAR, RoleRef, SIM_VERSION_VAR, owned_env};
use crate::deployment::{DeploymentFile, Engine, Placement, line_column};
use crate::plan::WorkerPlan;
use crate::sglang::{
    Disaggregation, DisaggregationMode, Graphs, KvEvents, LoadEvents, Parallel, Scheduling, Server,
    SglangArgs, Speculative,
};
use crate::version::SglangVersion;

/// SGLang's default bootstrap port.
const DEFAULT_BOOTSTRAP_PORT: u16 = 8998;

/// Builds one worker's plan, reporting what is wrong with its placement.
pub(super) fn build(
    file: &DeploymentFile,
    r: &RoleRef<'_>,
    placement: &Spanned<Placement>,
    field: &str,
    version: SglangVersion,
    spec: &Option<Speculative>,
    c: &mut Checker<'_>,
) -> WorkerPlan {
    let s = r.section.get_ref();
    let w = placement.get_ref();
    let parallel = Parallel {
        tp: *s.tp.get_ref(),
        pp: *s.pp.get_ref(),
        dp: *s.dp.get_ref(),
        attn_dp: *s.attn_dp.get_ref(),
    };
    let gpus = w.gpus.get_ref().clone();
    if gpus.len() as u64 != u64::from(parallel.gpus()) {
        let msg = format!(
            "lists {} GPUs but tp × pp × dp = {} × {} × {} = {}",
            gpus.len(),
            parallel.tp,
            parallel.pp,
            parallel.dp,
            parallel.gpus()
        );
        c.at(&w.gpus, format!("{field}.gpus"), msg);
    }
    let owned = owned_env(file);
    for var in w.env.get_ref().keys().filter(|k| owned.contains(&k.as_str())) {
        c.at(&w.env, format!("{field}.env.{var}"), "is set by the launcher");
    }
    let disaggregation = match r.role {
        Role::Mixed => None,
        role => Some(Disaggregation {
            mode: if role == Role::Prefill {
                DisaggregationMode::Prefill
            } else {
                DisaggregationMode::Decode
            },
            bootstrap_port: (role == Role::Prefill)
                .then(|| w.bootstrap_port.as_ref().map_or(DEFAULT_BOOTSTRAP_PORT, |p| *p.get_ref())),
            backend: file.transfer.as_ref().map(|t| t.get_ref().backend),
            ib_devices: file.transfer.as_ref().map(|t| t.get_ref().devices.clone()).unwrap_or_default(),
        }),
    };
    let speculative = match (r.role, &s.speculative) {
        (_, Some(own)) => Some(own.get_ref().clone()),
        (Role::Prefill, None) => spec.clone(),
        _ => None,
    };
    let args = SglangArgs {
        version,
        server: Server {
            model_path: file.model.path.clone(),
            served_model_name: file.model.served_name.clone(),
            host: w.host.clone(),
            port: *w.port.get_ref(),
            trust_remote_code: file.model.trust_remote_code,
            context_length: file.model.context_length,
            page_size: file.model.page_size,
            enable_metrics: s.enable_metrics,
        },
        parallel,
        disaggregation,
        scheduling: Scheduling {
            chunked_prefill_size: s.chunked_prefill_size.as_ref().map(|v| *v.get_ref()),
            schedule_policy: s.schedule_policy.as_ref().map(|v| *v.get_ref()),
            mem_fraction_static: s.mem_fraction_static.as_ref().map(|v| *v.get_ref()),
            max_running_requests: s.max_running_requests,
            disable_overlap_schedule: s.disable_overlap_schedule,
        },
        graphs: Graphs {
            max_bs_decode: s.cuda_graph_max_bs,
            max_bs_prefill: s.cuda_graph_max_bs_prefill,
            disable_custom_all_reduce: s.disable_custom_all_reduce,
        },
        hicache: s.hicache,
        speculative,
        load_events: load_events(w, parallel, field, c),
        kv_events: w.kv_events_port.as_ref().map(|p| KvEvents {
            port: *p.get_ref(),
            replay_port: p.get_ref().saturating_add(u16::try_from(parallel.dp_ranks()).unwrap_or(u16::MAX)),
            topic: format!("kv@{}", w.name.get_ref()),
        }),
        extra: s.extra_args.get_ref().clone(),
    };
    let mut env = BTreeMap::new();
    let list = |v: &[u32]| v.iter().map(u32::to_string).collect::<Vec<_>>().join(",");
    env.insert(file.platform.visible_devices_var().to_owned(), list(&gpus));
    if let Some(layers) = &s.pp_layers {
        env.insert(PP_PARTITION_VAR.to_owned(), list(layers.get_ref()));
    }
    if file.engine == Engine::Sim {
        env.insert(SIM_VERSION_VAR.to_owned(), version.to_string());
    }
    for (k, v) in file.env.iter().chain(s.env.get_ref()).chain(w.env.get_ref()) {
        env.entry(k.clone()).or_insert_with(|| v.clone());
    }
    let program = match file.engine {
        Engine::Sglang => {
            vec![file.python.get_ref().clone(), "-m".to_owned(), "sglang.launch_server".to_owned()]
        }
        Engine::Sim => vec!["infera-sim".to_owned()],
    };
    WorkerPlan {
        name: w.name.get_ref().clone(),
        role: r.role,
        host: w.host.clone(),
        gpus,
        program,
        args,
        env,
    }
}

/// `load_events = true`: rank 0's load port right after the replay ports (`kv_events_port +
/// 2 × ranks`); an error without KV events. The argv carries it only on versions that have the
/// flag ([`SglangArgs::load_publish_port`]).
fn load_events(w: &Placement, parallel: Parallel, field: &str, c: &mut Checker<'_>) -> Option<LoadEvents> {
    let on = w.load_events.as_ref().filter(|on| *on.get_ref())?;
    let Some(kv) = &w.kv_events_port else {
        let why = "needs kv_events_port (SGLang advertises the load ports with the KV-event ports)";
        c.at(on, format!("{field}.load_events"), why);
        return None;
    };
    let port = u32::from(*kv.get_ref()) + 2 * parallel.dp_ranks();
    Some(LoadEvents { port: u16::try_from(port).unwrap_or(u16::MAX) })
}

/// A resource one worker claims on its node.
struct Claim {
    host: String,
    what: &'static str,
    range: std::ops::Range<u32>,
    owner: String,
    field: String,
    span: std::ops::Range<usize>,
}

/// Names are unique; no GPU or port is claimed twice on one node.
pub(super) fn check_placements(roles: &[RoleRef<'_>], c: &mut Checker<'_>) {
    let mut names: BTreeMap<&str, usize> = BTreeMap::new();
    let mut claims = Vec::new();
    for r in roles {
        let s = r.section.get_ref();
        let ranks = s.dp.get_ref() * s.attn_dp.get_ref();
        for (i, p) in s.workers.iter().enumerate() {
            let w = p.get_ref();
            let field = format!("{}.workers[{i}]", r.key);
            let line = line_column(c.text, w.name.span().start).0;
            if let Some(first) = names.insert(w.name.get_ref(), line) {
                c.at(
                    &w.name,
                    format!("{field}.name"),
                    format!("{:?} is also the name on line {first}", w.name.get_ref()),
                );
            }
            let mut claim = |what, start: u32, len: u32, key: &str, span| {
                claims.push(Claim {
                    host: w.host.clone(),
                    what,
                    range: start..start + len,
                    owner: w.name.get_ref().clone(),
                    field: format!("{field}.{key}"),
                    span,
                });
            };
            for &g in w.gpus.get_ref() {
                claim("GPU", g, 1, "gpus", w.gpus.span());
            }
            claim("port", u32::from(*w.port.get_ref()), 1, "port", w.port.span());
            if r.role == Role::Prefill {
                let (port, span) = w
                    .bootstrap_port
                    .as_ref()
                    .map_or((DEFAULT_BOOTSTRAP_PORT, w.name.span()), |p| (*p.get_ref(), p.span()));
                claim("port", u32::from(port), 1, "bootstrap_port", span);
            }
            if let Some(k) = &w.kv_events_port {
                // PUB ports, then the replay ports right after them, then the load ports.
                let sets = if w.load_events.as_ref().is_some_and(|on| *on.get_ref()) { 3 } else { 2 };
                claim("port", u32::from(*k.get_ref()), sets * ranks, "kv_events_port", k.span());
                if u32::from(*k.get_ref()) + sets * ranks > u32::from(u16::MAX) + 1 {
                    c.at(
                        k,
                        format!("{field}.kv_events_port"),
                        format!("{} ports from here run past 65535", sets * ranks),
                    );
                }
            }
        }
    }
    // One message per pair of clashing keys (two GPU lists may share several GPUs).
    let mut reported = std::collections::BTreeSet::new();
    for (i, a) in claims.iter().enumerate() {
        let clash = claims[..i].iter().find(|b| {
            b.host == a.host && b.what == a.what && a.range.start < b.range.end && b.range.start < a.range.end
        });
        if let Some(b) = clash {
            if !reported.insert((a.field.clone(), b.field.clone())) {
                continue;
            }
            let what = match a.range.len() {
                _ if a.what == "GPU" => format!("GPU {}", a.range.start),
                1 => format!("port {}", a.range.start),
                _ => format!("ports {}–{}", a.range.start, a.range.end - 1),
            };
            let line = line_column(c.text, b.span.start).0;
            let msg =
                format!("{what} on {} is also claimed by {} ({}, line {line})", a.host, b.owner, b.field);
            c.report(a.span.clone(), a.field.clone(), msg);
        }
    }
}
