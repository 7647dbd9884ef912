#!/usr/bin/env python3
"""Smoke test of a running deployment: positive evidence for each feature its file turns on.

    python3 examples/kit/smoke.py DEPLOYMENT.toml [--proxy URL] [--control-metrics URL]
                                  [--timeout S] [--json FILE]

Reads the deployment file (the TOML `infera-launch up` runs) and, for every setting it turns
on, asks the running system for evidence that it took effect:

- each worker's `/get_server_info` (SGLang's `python/sglang/srt/entrypoints/http_server.py`;
  `/server_info` where the old path is gone): served model name, page size, TP/PP/DP and DP
  attention, the role's engine settings, PD mode and transfer backend, EAGLE's flags, HiCache,
  the KV-event config, the load socket, the version the file names;
- the proxy (`--proxy`, default the first of `[router] proxies`): the model is listed, a
  chat completion and a streamed one answer;
- control's `/metrics` (`--control-metrics`, default `[router] metrics_listen`, see
  manual/operations/monitoring.md): a PD request is picked on both legs
  (`infera_router_picks_total{kind="prefill"|"decode",outcome="ok"}` grows) and released at
  its end; KV events reach control (`infera_kv_subscribers`, `infera_kv_batches_total` per
  worker, `infera_kv_blocks_total{outcome="stored"}` grows after a prompt longer than a page);
- the workers' `/metrics` when `enable_metrics` is on (`sglang:` series), and speculative
  acceptance when EAGLE is on (`sglang:spec_accept_length`, from
  `python/sglang/srt/observability/metrics_collector.py`; where a worker has no /metrics, the
  `avg_spec_accept_length` of its `/get_server_info` `internal_states`).

Prints a PASS/FAIL/SKIP table (SKIP always says why) and exits 1 on any FAIL, 2 on bad usage.
Needs Python 3.11+ and the `openai` client. API keys: INFERA_API_KEY (or OPENAI_API_KEY).
"""

import argparse
import json
import sys
import time
import uuid

sys.dont_write_bytecode = True  # no __pycache__ next to the kit
import kitlib  # noqa: E402

try:
    import openai
except ImportError:
    sys.exit("smoke.py needs the openai client (pip install openai)")

# Longer than a page; a fresh prefix per run, so its pages are new blocks even where an earlier
# run's are cached.
LONG_PROMPT = f"Run {uuid.uuid4().hex}. " + " ".join(
    f"Item {i}: the quick brown fox jumps over the lazy dog near river {i % 7}." for i in range(120)
)


class Table:
    def __init__(self):
        self.rows = []

    def add(self, check, status, evidence):
        self.rows.append((check, status, evidence))

    def pass_(self, check, evidence):
        self.add(check, "PASS", evidence)

    def fail(self, check, evidence):
        self.add(check, "FAIL", evidence)

    def skip(self, check, why):
        self.add(check, "SKIP", why)

    def expect(self, check, ok, evidence):
        self.add(check, "PASS" if ok else "FAIL", evidence)

    def print(self):
        width = max(len(r[0]) for r in self.rows)
        for check, status, evidence in self.rows:
            print(f"{status:4}  {check:<{width}}  {evidence}")
        counts = {s: sum(1 for r in self.rows if r[1] == s) for s in ("PASS", "FAIL", "SKIP")}
        print(f"\n{counts['PASS']} passed, {counts['FAIL']} failed, {counts['SKIP']} skipped")


def server_info(worker):
    for path in ("/get_server_info", "/server_info"):
        try:
            status, text = kitlib.request(worker.url + path, timeout=10)
        except OSError as e:
            return None, f"{worker.url}: {e}"
        if status == 200:
            return json.loads(text), path
    return None, f"{worker.url}: /get_server_info and /server_info answer {status}"


# Role keys whose value SGLang reports under a key of /get_server_info (the launcher's flag
# of each: manual/reference/launcher.md, [prefill]/[decode]/[mixed]).
SETTINGS = {
    "tp": ("tp_size",),
    "pp": ("pp_size",),
    "chunked_prefill_size": ("chunked_prefill_size",),
    "schedule_policy": ("schedule_policy",),
    "mem_fraction_static": ("mem_fraction_static",),
    "max_running_requests": ("max_running_requests",),
    # --cuda-graph-max-bs before 0.5.20, --cuda-graph-max-bs-decode from 0.5.20.
    "cuda_graph_max_bs": ("cuda_graph_max_bs_decode", "cuda_graph_max_bs"),
    "cuda_graph_max_bs_prefill": ("cuda_graph_max_bs_prefill",),
    "disable_custom_all_reduce": ("disable_custom_all_reduce",),
    "disable_overlap_schedule": ("disable_overlap_schedule",),
    "enable_metrics": ("enable_metrics",),
}


def check_worker(t, dep, w, info):
    name = w.name
    # Served model name and version.
    t.expect(
        f"{name}: served model name",
        info.get("served_model_name") == dep.served_name,
        f"served_model_name={info.get('served_model_name')!r} (file: {dep.served_name!r})",
    )
    if dep.sglang_version:
        got = str(info.get("version", ""))
        t.expect(
            f"{name}: SGLang version",
            got.split("+")[0].startswith(dep.sglang_version),
            f"version={got!r} (file: sglang_version {dep.sglang_version!r})",
        )
    if dep.page_size is not None:
        t.expect(
            f"{name}: page size",
            info.get("page_size") == dep.page_size,
            f"page_size={info.get('page_size')} (file: {dep.page_size})",
        )
    else:
        t.skip(f"{name}: page size", f"[model] page_size unset: SGLang's default ({info.get('page_size')})")

    # The role's engine settings.
    mismatches, seen = [], []
    for key, infos in SETTINGS.items():
        if key not in w.settings:
            continue
        want = w.settings[key]
        got = [info.get(k) for k in infos if k in info]
        seen.append(f"{key}={want}")
        if want not in got:
            mismatches.append(f"{key}: file {want!r}, server_info {dict(zip(infos, got))}")
    if seen:
        t.expect(f"{name}: engine settings", not mismatches, "; ".join(mismatches) or ", ".join(seen))

    # DP attention.
    attn_dp = int(w.get("attn_dp", 1) or 1)
    if attn_dp > 1:
        ok = info.get("enable_dp_attention") is True and (
            info.get("attn_dp_size") == attn_dp or info.get("dp_size") == w.ranks
        )
        t.expect(
            f"{name}: DP attention",
            ok,
            f"enable_dp_attention={info.get('enable_dp_attention')} attn_dp_size={info.get('attn_dp_size')} "
            f"dp_size={info.get('dp_size')} (file: attn_dp {attn_dp})",
        )

    # PD.
    if w.role in ("prefill", "decode"):
        mode = info.get("disaggregation_mode")
        backend = info.get("disaggregation_transfer_backend")
        want_backend = dep.transfer.get("backend")
        evidence = f"disaggregation_mode={mode} transfer_backend={backend}"
        ok = mode == w.role and (want_backend is None or backend == want_backend)
        if w.role == "prefill":
            port = w.get("bootstrap_port", 8998)
            evidence += f" bootstrap_port={info.get('disaggregation_bootstrap_port')} (file: {port})"
            ok = ok and info.get("disaggregation_bootstrap_port") == port
        t.expect(f"{name}: PD {w.role}", ok, evidence)

    # Speculative decoding.
    spec = w.get("speculative")
    if spec:
        fields = {
            "algorithm": "speculative_algorithm",
            "num_steps": "speculative_num_steps",
            "eagle_topk": "speculative_eagle_topk",
            "num_draft_tokens": "speculative_num_draft_tokens",
        }
        bad = [f"{k}: file {spec[k]!r}, server_info {info.get(v)!r}" for k, v in fields.items()
               if k in spec and info.get(v) != spec[k]]
        t.expect(
            f"{name}: speculative ({spec.get('algorithm')})",
            not bad,
            "; ".join(bad) or ", ".join(f"{v}={info.get(v)}" for v in fields.values()),
        )

    # HiCache.
    hicache = w.get("hicache")
    if hicache:
        bad = [] if info.get("enable_hierarchical_cache") is True else ["enable_hierarchical_cache is not true"]
        for key, field in (("size_gb", "hicache_size"), ("ratio", "hicache_ratio"),
                           ("write_policy", "hicache_write_policy")):
            if key in hicache and info.get(field) != hicache[key]:
                bad.append(f"{field}={info.get(field)!r} (file: {hicache[key]!r})")
        t.expect(f"{name}: HiCache", not bad, "; ".join(bad) or
                 f"enable_hierarchical_cache=True hicache_size={info.get('hicache_size')} "
                 f"write_policy={info.get('hicache_write_policy')}")

    # KV events and the load socket.
    port = w.get("kv_events_port")
    if port is not None:
        config = info.get("kv_events_config") or ""
        t.expect(
            f"{name}: KV events config",
            f":{port}" in str(config) and f"kv@{name}" in str(config),
            f"kv_events_config={config}",
        )
        if w.get("load_events"):
            kv = info.get("kv_events") or {}
            got = info.get("load_publish_endpoint") or kv.get("load_endpoint_port_base")
            want = port + 2 * w.ranks
            t.expect(
                f"{name}: load events",
                got is not None and str(want) in str(got),
                f"load socket {got} (file: load_events, port {want})",
            )


def chat_checks(t, dep, proxy, timeout_s):
    client = openai.OpenAI(base_url=proxy + "/v1", api_key=kitlib.api_key(), timeout=120, max_retries=0)
    # A proxy learns the models from control's target list, moments after `up` is ready.
    start, last = time.monotonic(), {"models": [], "error": None}

    def listed():
        try:
            last["models"] = [m.id for m in client.models.list().data]
            last["error"] = None
        except openai.OpenAIError as e:
            last["error"] = e
        return dep.served_name in last["models"]

    if kitlib.poll(listed, timeout_s):
        t.pass_("proxy: model listed", f"/v1/models = {last['models']} (after {time.monotonic() - start:.1f} s)")
    elif last["error"] is not None:
        t.fail("proxy: model listed", f"{proxy}/v1/models: {last['error']}")
    else:
        t.fail("proxy: model listed", f"/v1/models = {last['models']} after {timeout_s:.0f} s")
    ok = True
    try:
        r = client.chat.completions.create(
            model=dep.served_name, messages=[{"role": "user", "content": "Say hello."}], max_tokens=16,
            temperature=0,
        )
        text = r.choices[0].message.content or ""
        ok = bool(text) and r.usage is not None and r.usage.completion_tokens > 0
        t.expect("proxy: chat completion", ok,
                 f"{r.usage.completion_tokens if r.usage else '?'} tokens, finish={r.choices[0].finish_reason}: {text[:40]!r}")
    except openai.OpenAIError as e:
        ok = False
        t.fail("proxy: chat completion", str(e))
    try:
        chunks, text, finish = 0, "", None
        stream = client.chat.completions.create(
            model=dep.served_name, messages=[{"role": "user", "content": "Count to five."}], max_tokens=16,
            temperature=0, stream=True,
        )
        for c in stream:
            chunks += 1
            if c.choices:
                text += c.choices[0].delta.content or ""
                finish = c.choices[0].finish_reason or finish
        t.expect("proxy: streamed chat", chunks > 1 and bool(text) and finish is not None,
                 f"{chunks} chunks, finish={finish}: {text[:40]!r}")
    except openai.OpenAIError as e:
        ok = False
        t.fail("proxy: streamed chat", str(e))
    return client, ok


def control_samples(url):
    try:
        status, text = kitlib.request(url, timeout=10)
    except OSError:
        return None
    return kitlib.parse_metrics(text) if status == 200 else None


def main(argv=None):
    ap = argparse.ArgumentParser(description="Smoke test of a running infera deployment.")
    ap.add_argument("deployment")
    ap.add_argument("--proxy", help="the proxy's base URL (default: the first of [router] proxies)")
    ap.add_argument("--control-metrics", help="control's /metrics URL (default: [router] metrics_listen)")
    ap.add_argument("--timeout", type=float, default=30, help="seconds to wait for metrics to move")
    ap.add_argument("--json", help="also write the table as JSON here")
    a = ap.parse_args(argv)

    dep = kitlib.Deployment(a.deployment)
    proxy = (a.proxy or dep.proxy_url()).rstrip("/")
    if proxy.endswith("/v1"):
        proxy = proxy[:-3]
    control = a.control_metrics or dep.control_metrics_url()
    t = Table()
    print(f"smoke: {a.deployment}: engine {dep.engine}, {len(dep.workers)} worker(s), "
          f"{'PD' if dep.pd else 'aggregated'}, model {dep.served_name!r}; proxy {proxy}; control {control}\n")

    infos = {}
    for w in dep.workers:
        info, where = server_info(w)
        if info is None:
            t.fail(f"{w.name}: server info", where)
            continue
        t.pass_(f"{w.name}: server info", f"{w.url}{where} ({w.role})")
        infos[w.name] = info
        check_worker(t, dep, w, info)

    before = control_samples(control)
    if before is None:
        t.fail("control: metrics", f"{control} does not answer")
    client, _ = chat_checks(t, dep, proxy, a.timeout)

    # A request longer than a page: its full pages become stored blocks at control.
    try:
        client.chat.completions.create(
            model=dep.served_name, messages=[{"role": "user", "content": LONG_PROMPT}], max_tokens=8, temperature=0,
        )
    except openai.OpenAIError as e:
        t.fail("proxy: long prompt", str(e))

    # PD: both legs picked and released at control.
    if before is not None:
        def legs():
            now = control_samples(control) or []
            d = {k: kitlib.metric_sum(now, "infera_router_picks_total", kind=k, outcome="ok")
                 - kitlib.metric_sum(before, "infera_router_picks_total", kind=k, outcome="ok")
                 for k in ("prefill", "decode")}
            r = {k: kitlib.metric_sum(now, "infera_router_releases_total", kind=k, reason="eof")
                 - kitlib.metric_sum(before, "infera_router_releases_total", kind=k, reason="eof")
                 for k in ("prefill", "decode")}
            return (d, r) if all(v > 0 for v in d.values()) and all(v > 0 for v in r.values()) else None
        if dep.pd:
            got = kitlib.poll(legs, a.timeout)
            if got:
                t.pass_("PD: request reaches both legs",
                        f"control picks +{got[0]['prefill']:.0f} prefill, +{got[0]['decode']:.0f} decode; "
                        f"released at end +{got[1]['prefill']:.0f}/+{got[1]['decode']:.0f}")
            else:
                t.fail("PD: request reaches both legs",
                       "infera_router_picks_total/releases_total{kind=prefill,decode} did not both grow")
        else:
            t.skip("PD: request reaches both legs", "aggregated deployment ([mixed]): no PD legs")

        # KV events at control.
        kv_workers = [w for w in dep.workers if w.get("kv_events_port") is not None]
        if kv_workers:
            def kv():
                now = control_samples(control) or []
                subs = kitlib.metric_sum(now, "infera_kv_subscribers")
                batches = {w.name: kitlib.metric_sum(now, "infera_kv_batches_total", worker=w.name) for w in kv_workers}
                stored = (kitlib.metric_sum(now, "infera_kv_blocks_total", outcome="stored")
                          - kitlib.metric_sum(before, "infera_kv_blocks_total", outcome="stored"))
                want = sum(w.ranks for w in kv_workers)
                # Workers that cache prefixes must have published; a PD decode (SGLang's
                # decode keeps no radix cache unless told to) may have nothing to say.
                caching = [w.name for w in kv_workers if w.role != "decode"]
                if caching:
                    published = all(batches[n] > 0 for n in caching)
                else:
                    published = any(v > 0 for v in batches.values())
                ok = subs >= want and published and stored > 0
                return (ok, subs, want, batches, stored)
            kitlib.poll(lambda: kv()[0], a.timeout)
            ok, subs, want, batches, stored = kv()
            per_worker = ", ".join(f"{k} {int(v)}" for k, v in batches.items())
            t.expect("KV events reach control", ok,
                     f"infera_kv_subscribers={subs:.0f} (ranks {want}); batches: {per_worker}; "
                     f"blocks stored +{stored:.0f}")
        else:
            t.skip("KV events reach control", "no worker sets kv_events_port")

    # Worker /metrics and speculative acceptance.
    for w in dep.workers:
        info = infos.get(w.name)
        if info is None:
            continue
        text = None
        if w.get("enable_metrics"):
            try:
                status, body = kitlib.request(w.url + "/metrics", timeout=10)
            except OSError as e:
                status, body = 0, str(e)
            if status == 200 and "sglang:" in body:
                text = body
                n = sum(1 for n, _, _ in kitlib.parse_metrics(body) if n.startswith("sglang:"))
                t.pass_(f"{w.name}: /metrics", f"{n} sglang: samples")
            elif dep.engine == "sim":
                t.skip(f"{w.name}: /metrics", f"the emulator serves no /metrics (status {status}; sim/src/api.rs)")
            else:
                t.fail(f"{w.name}: /metrics", f"enable_metrics is on but /metrics answers {status}")
        spec = w.get("speculative")
        if not spec:
            continue
        if w.role == "prefill":
            t.skip(f"{w.name}: speculative acceptance", "a prefill carries the decode's EAGLE flags and decodes nothing")
            continue
        accept = None
        if text is not None:
            vals = [v for n, _, v in kitlib.parse_metrics(text) if n == "sglang:spec_accept_length"]
            if vals:
                accept = (max(vals), "/metrics sglang:spec_accept_length")
        if accept is None:
            fresh, _ = server_info(w)
            states = (fresh or info).get("internal_states") or []
            vals = [s.get("avg_spec_accept_length") for s in states if s.get("avg_spec_accept_length") is not None]
            if vals:
                accept = (max(vals), "/get_server_info internal_states avg_spec_accept_length")
        if accept is None:
            t.fail(f"{w.name}: speculative acceptance", "no spec_accept_length in /metrics or internal_states")
        else:
            t.expect(f"{w.name}: speculative acceptance", accept[0] > 0, f"{accept[1]} = {accept[0]:.2f}")

    print()
    t.print()
    if a.json:
        with open(a.json, "w") as f:
            json.dump([{"check": c, "status": s, "evidence": e} for c, s, e in t.rows], f, indent=2)
    return 1 if any(r[1] == "FAIL" for r in t.rows) else 0


if __name__ == "__main__":
    sys.exit(main())
