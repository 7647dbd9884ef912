//! The chaos bench's table: how the requests ended, the ledger and the engines at the end, the
//! outages, ejections, retries and the proxies' peak memory; then each error kind a client saw,
//! whether a retry could have saved it and why it happened, and the verdict on each target.

use std::collections::BTreeMap;
use std::time::Duration;

use infera_proto::pb;
use infera_testkit::http::metric_sum;
use serde_json::Value;

use super::ChaosArgs;
use super::deploy::Spec;
use super::events::{KILLED_PROXY, Outages};
use super::load::{End as Ended, Record};
use super::schedule::{Faulty, Schedule};

mod end;
mod errors;

pub(crate) use end::{End, at_zero};

use errors::{ErrorKind, attempt_of, during, explain, held_by_a_stall, windows};

pub(crate) fn header(args: &ChaosArgs, spec: &Spec, sched: &Schedule) {
    println!(
        "chaos: {} requests from {} closed-loop clients through 2 proxies, {:.0} % streamed, {}–{} tokens, \
         {:.0} % cancelled by the client within {} ms, client timeout {} s; seed {}",
        args.requests,
        args.concurrency,
        args.stream_share * 100.0,
        args.min_tokens,
        args.max_tokens,
        args.cancel_share * 100.0,
        args.cancel_within_ms,
        args.client_timeout_ms / 1_000,
        args.seed
    );
    println!(
        "  deployment: etcd; sims prefill-0, prefill-1, decode-0, decode-1 (1 rank each, speed-up {}, \
         --sim-bootstrap-timeout-ms {}) registered in it; 1 infera-control process on etcd ({}); \
         2 infera-proxy processes ({})",
        spec.speedup,
        spec.bootstrap_timeout_ms,
        spec.control_flags.join(" "),
        spec.proxy_flags.join(" ")
    );
    println!("  schedule, at the n-th request issued (faults on decode-0 and prefill-0 only):");
    let mut rows: Vec<(usize, String)> = sched
        .faults
        .iter()
        .map(|s| {
            let sim = match s.sim {
                Faulty::Decode => "decode-0",
                Faulty::Prefill => "prefill-0",
            };
            (s.at, format!("{sim} {}", s.body))
        })
        .collect();
    rows.push((
        sched.proxy_kill,
        format!("SIGKILL proxy-{KILLED_PROXY}, restart after {} ms", args.proxy_down_ms),
    ));
    rows.push((sched.control_kill, "SIGKILL control, restart at once".to_owned()));
    rows.push((sched.etcd_stop, format!("stop etcd for {} s", args.etcd_down_secs)));
    rows.sort_by_key(|r| r.0);
    for chunk in rows.chunks(3) {
        let line: Vec<String> = chunk.iter().map(|(at, what)| format!("{at:>6} {what:<44}")).collect();
        println!("   {}", line.join(" ").trim_end());
    }
}

/// The samples of `name` by their label text.
fn series(text: &str, name: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some(rest) = line.strip_prefix(name) else { continue };
        let Some((labels, value)) = rest.rsplit_once(' ') else { continue };
        if !(labels.is_empty() || labels.starts_with('{')) {
            continue;
        }
        let labels = labels.trim_start_matches('{').trim_end_matches('}').to_owned();
        *out.entry(labels).or_insert(0.0) += value.parse::<f64>().unwrap_or(0.0);
    }
    out
}

fn listed(map: &BTreeMap<String, f64>) -> String {
    let parts: Vec<String> = map
        .iter()
        .filter(|(_, v)| **v > 0.0)
        .map(|(k, v)| format!("{} {v:.0}", k.replace('"', "")))
        .collect();
    if parts.is_empty() { "none".to_owned() } else { parts.join(", ") }
}

fn add(a: &BTreeMap<String, f64>, b: &BTreeMap<String, f64>) -> BTreeMap<String, f64> {
    let mut out = a.clone();
    for (k, v) in b {
        *out.entry(k.clone()).or_insert(0.0) += v;
    }
    out
}

fn ms(d: Duration) -> String {
    format!("{:.0} ms", d.as_secs_f64() * 1e3)
}

fn mib(kb: Option<u64>) -> String {
    kb.map_or("?".to_owned(), |kb| format!("{:.1} MiB", kb as f64 / 1024.0))
}

fn verdict(met: bool) -> &'static str {
    if met { "met" } else { "NOT met" }
}

pub(crate) fn print(
    args: &ChaosArgs,
    sched: &Schedule,
    records: &[Record],
    outages: &Outages,
    end: &End,
    secs: f64,
) {
    let (logs, ejected) = (&end.logs, &end.ejected);
    let windows = windows(sched, outages, args.concurrency, args.requests / 10);
    let mut ok = 0;
    let mut errors: BTreeMap<String, ErrorKind> = BTreeMap::new();
    let mut hung_during: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cancelled, mut hung, mut hung_stalled, mut lost) = (0, 0, 0, 0);
    let mut broken: Vec<String> = Vec::new();
    let mut resent = 0;
    for r in records {
        resent += r.resent;
        match &r.end {
            Ended::Ok => ok += 1,
            Ended::Error { kind, message, chunks } => {
                let e = errors.entry(kind.clone()).or_insert_with(|| ErrorKind::new(message));
                e.n += 1;
                if e.rids.len() < 3 {
                    e.rids.push(r.request.rid.clone());
                }
                e.without_content += usize::from(*chunks == 0);
                *e.during.entry(during(r.request.i, &windows)).or_insert(0) += 1;
            }
            Ended::Cancelled => cancelled += 1,
            Ended::Hung { .. } => {
                hung += 1;
                *hung_during.entry(during(r.request.i, &windows)).or_insert(0) += 1;
                hung_stalled += usize::from(held_by_a_stall(&r.request.rid, sched, logs));
            }
            Ended::Lost => lost += 1,
            Ended::Broken(e) => broken.push(format!("{}: {e}", r.request.rid)),
        }
    }
    let streamed =
        |f: &dyn Fn(&Ended) -> bool| records.iter().filter(|r| r.request.stream && f(&r.end)).count();
    println!();
    println!(
        "  {:<72} {:>8} {:>9}",
        format!(
            "requests ({} in {secs:.0} s with the outages, {:.0}/s)",
            records.len(),
            records.len() as f64 / secs
        ),
        "count",
        "streamed"
    );
    println!("  {:<72} {:>8} {:>9}", "ok", ok, streamed(&|e| *e == Ended::Ok));
    for (kind, ErrorKind { n, .. }) in &errors {
        let s = streamed(&|e| matches!(e, Ended::Error { kind: k, .. } if k == kind));
        println!("  {:<72} {:>8} {:>9}", format!("clean error: {kind}"), n, s);
    }
    let drawn = records.iter().filter(|r| r.request.cancel_after.is_some()).count();
    println!(
        "  {:<72} {:>8} {:>9}",
        format!("cancelled by the client ({drawn} drawn to; the others ended first)"),
        cancelled,
        streamed(&|e| *e == Ended::Cancelled)
    );
    println!(
        "  {:<72} {:>8} {:>9}",
        format!("lost: in flight on proxy-{KILLED_PROXY} when it was SIGKILLed"),
        lost,
        streamed(&|e| *e == Ended::Lost)
    );
    println!(
        "  {:<72} {:>8} {:>9}",
        format!("hung: no end within the {} s client timeout", args.client_timeout_ms / 1_000),
        hung,
        streamed(&|e| matches!(e, Ended::Hung { .. }))
    );
    println!("  {:<72} {:>8}", "  of which held by a stalled engine", hung_stalled);
    println!("  {:<72} {:>8}", "broken: connection or answer cut with both proxies up", broken.len());
    for b in broken.iter().take(5) {
        println!("    {b}");
    }
    println!("  sent again to the other proxy after a refused connection (nothing had been sent): {resent}");

    println!();
    let drain = end.drain.map_or("NOT within the deadline".to_owned(), |d| format!("after {}", ms(d)));
    println!(
        "  ledger at the end (Admin/ListTargets; ledger, reservations and engines at 0 {drain} once the load was over)"
    );
    println!("  {:<14} {:>8} {:>14} {:>8} {:>14}", "target", "role", "held requests", "booked", "engine r+w");
    for t in &end.targets {
        let (id, rank) = t.target.as_ref().map_or(("?", 0), |t| (t.worker_id.as_str(), t.dp_rank));
        let role = t.worker.as_ref().map_or(0, |w| w.role);
        let role = pb::Role::try_from(role).map_or("?".to_owned(), |r| r.as_str_name().to_lowercase());
        let engine =
            end.engines.iter().find(|e| e.0 == id).map_or("?".to_owned(), |e| format!("{} + {}", e.1, e.2));
        println!(
            "  {:<14} {:>8} {:>14} {:>8} {:>14}",
            format!("{id}/{rank}"),
            role.trim_start_matches("role_"),
            t.held_requests,
            t.booked_input_tokens,
            engine
        );
    }
    println!("  reservations listed: {}", end.reservations);
    let left: Vec<String> = end
        .left_at_load_end
        .iter()
        .filter(|t| t.held_requests > 0 || t.booked_input_tokens > 0)
        .map(|t| {
            let id = t.target.as_ref().map_or("?".to_owned(), |t| format!("{}/{}", t.worker_id, t.dp_rank));
            format!("{id} {} held, {} tokens", t.held_requests, t.booked_input_tokens)
        })
        .collect();
    println!(
        "  held the moment the last request ended: {}",
        if left.is_empty() { "nothing".to_owned() } else { left.join("; ") }
    );

    println!();
    println!(
        "  restarts: proxy-{KILLED_PROXY} SIGKILLed, restarted after {} ms, ready and back in rotation {} after the kill; \
         control SIGKILLed and restarted: leading {} after the kill, warm {}; etcd stopped {} s: control stopped leading {} \
         after the stop, led again {} after etcd's start; the proxies routed {:.0} picks on their own meanwhile",
        args.proxy_down_ms,
        ms(outages.proxy_back),
        ms(outages.control_leading),
        ms(outages.control_warm),
        args.etcd_down_secs,
        outages.etcd_lapsed.map_or("—".to_owned(), ms),
        ms(outages.etcd_leading),
        outages.etcd_fallback_picks
    );
    let before = &outages.control_metrics;
    let now = &end.control_metrics;
    let ejections =
        add(&series(before, "infera_router_ejections_total"), &series(now, "infera_router_ejections_total"));
    let failures = add(
        &series(before, "infera_router_leg_failures_total"),
        &series(now, "infera_router_leg_failures_total"),
    );
    let readmissions = metric_sum(before, "infera_router_readmissions_total", "")
        + metric_sum(now, "infera_router_readmissions_total", "");
    let bypassed = metric_sum(before, "infera_router_ejection_bypassed_total", "")
        + metric_sum(now, "infera_router_ejection_bypassed_total", "");
    println!(
        "  ejections (control, both processes): {:.0} ({}), re-admissions {readmissions:.0}, picks that ignored \
         ejections {bypassed:.0}; failed legs by kind: {}",
        ejections.values().sum::<f64>(),
        listed(&ejections),
        listed(&failures)
    );
    let ever: Vec<&str> = ejected.iter().map(String::as_str).collect();
    println!(
        "  targets seen ejected (infera_router_target_ejected, read every 200 ms): {}",
        if ever.is_empty() { "none".to_owned() } else { ever.join(", ") }
    );
    let mut retries = Vec::new();
    let mut fallbacks = Vec::new();
    let mut rejected = Vec::new();
    for (i, text) in end.proxy_metrics.iter().enumerate() {
        let killed = (i == KILLED_PROXY).then_some(outages.proxy_metrics.as_str());
        // `+ 0.0`: an empty sum is -0.0.
        let sum =
            |name: &str| metric_sum(text, name, "") + killed.map_or(0.0, |k| metric_sum(k, name, "")) + 0.0;
        retries.push(format!("proxy-{i} {:.0}", sum("infera_proxy_retries_total")));
        fallbacks.push(format!("proxy-{i} {:.0}", sum("infera_proxy_fallback_picks_total")));
        rejected.push(format!("proxy-{i} {:.0}", sum("infera_proxy_rejected_total")));
    }
    println!(
        "  retries (infera_proxy_retries_total, the killed proxy's both processes): {}; picks routed without control: {}; \
         rejected (admission): {}",
        retries.join(", "),
        fallbacks.join(", "),
        rejected.join(", ")
    );
    let hwm: Vec<String> = end
        .proxy_hwm_kb
        .iter()
        .enumerate()
        .map(|(i, kb)| {
            if i == KILLED_PROXY {
                format!(
                    "proxy-{i} {} before its kill, {} after its restart",
                    mib(outages.proxy_hwm_kb),
                    mib(*kb)
                )
            } else {
                format!("proxy-{i} {}", mib(*kb))
            }
        })
        .collect();
    println!("  max RSS (VmHWM): {}", hwm.join("; "));

    println!();
    println!("  errors the clients saw, by kind (retry could have saved it? why):");
    let mut saveable = 0;
    let mut unexplained = 0;
    for (kind, ErrorKind { n, message, during: met, without_content, rids }) in &errors {
        let (save, why) = explain(kind);
        // A retry is safe only before any byte of the answer: a stream that had events is not
        // counted as one a retry could have saved.
        let could = if kind.starts_with("SSE") { *without_content } else { *n };
        let answer = match save {
            Some(true) => {
                saveable += could;
                if could == *n { "yes" } else { "yes, those without an event before it" }
            }
            Some(false) => "no",
            None => {
                unexplained += n;
                "?"
            }
        };
        println!("    {kind} × {n} — {answer}: {why}");
        if kind.starts_with("SSE") {
            println!("      no stream event before the error event in {without_content} of {n}");
        }
        if kind.starts_with("HTTP 502") {
            let attempts = |log: &Vec<Value>, rid: &str| log.iter().filter(|e| attempt_of(e, rid)).count();
            for rid in rids {
                println!(
                    "      {rid}: attempts logged by decode-0 {}, by prefill-0 {}",
                    attempts(&logs[0], rid),
                    attempts(&logs[1], rid)
                );
            }
        }
        let met: Vec<String> = met.iter().map(|(w, n)| format!("{w} ×{n}")).collect();
        println!("      during: {}", met.join(", "));
        println!("      first: {}", message.chars().take(160).collect::<String>());
    }
    if errors.is_empty() {
        println!("    none");
    }
    let met: Vec<String> = hung_during.iter().map(|(w, n)| format!("{w} ×{n}")).collect();
    println!("    hung × {hung} — during: {}", if met.is_empty() { "—".to_owned() } else { met.join(", ") });
    let left = end.targets.iter().any(|t| t.held_requests > 0 || t.booked_input_tokens > 0)
        || end.reservations != 0
        || end.engines.iter().any(|e| e.1 + e.2 > 0);
    println!();
    println!(
        "  target no request hangs past its client timeout: {} ({hung} hung, {hung_stalled} of them streams held by a \
         stalled engine, which --stream-idle-timeout-ms is there to cut)",
        verdict(hung == 0)
    );
    println!(
        "  target no error a retry could have saved: {} ({saveable} that one could have, {unexplained} unexplained; \
         {} transport breaks with both proxies up)",
        verdict(saveable + unexplained == 0 && broken.is_empty()),
        broken.len()
    );
    println!(
        "  target nothing left booked or running: {} (ledger, reservations and engines at 0 {drain})",
        verdict(!left && end.drain.is_some())
    );
}
