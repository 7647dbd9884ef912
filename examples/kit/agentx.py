#!/usr/bin/env python3
"""AgentX: agentic coding sessions replayed closed loop through the deployment's proxy.

    python3 examples/kit/agentx.py DEPLOYMENT.toml --trace FILE [--proxy URL]
        [--sessions N] [--max-turns K] [--concurrency C] [--think-cap-s 300]
        [--output-scale X] [--duration-s S] [--bench PATH] [--json FILE] [-- BENCH FLAGS…]

A wrapper of `infera-bench replay` (manual/guides/benchmarking.md, "Replay"), which replays a
trace against any OpenAI-compatible URL: this script gives it the deployment's proxy and served
model name and closed-loop pacing, and prints its report's TTFT, ITL and throughput.

- `--trace`: agentic session JSONL (the kv-cache-tester "Weka" format AgentX replays: one
  session per line, `requests` with `t`, `in`, `out`, `think_time`, `hash_ids`), plain or `.gz`.
- `--sessions N` / `--max-turns K`: replay only the first N sessions, each cut to its first K
  model requests (sub-agent markers past the cut are dropped with them); the slice is written
  to a temporary file.
- `--concurrency C`: sessions in flight (the bench's lanes, default 16).
- `--think-cap-s`: each think time between turns is capped at this many seconds (default 300,
  the bench's `--idle-gap-cap-s`).
- `--output-scale`: `max_tokens` = the trace's output length × this (default 1).
- Anything after `--` goes to `infera-bench replay` as is (e.g. `--match-seed-load`).

The bench binary: `--bench`, else `infera-bench` in `$INFERA_BIN_DIR`, on `PATH`, or the
workspace's `target/release` then `target/debug` (`cargo build --release -p infera-bench`).

Prints TTFT and ITL p50/p90/mean, output tok/s, requests/s and interactivity; writes the
bench's JSON report to `--json` (default `agentx-result.json`). Exit code: the bench's, or 1
when a request failed.
"""

import argparse
import gzip
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ next to the kit
ROOT = os.path.dirname(os.path.dirname(HERE))

import kitlib  # noqa: E402


def find_bench(explicit):
    if explicit:
        return explicit
    candidates = []
    if os.environ.get("INFERA_BIN_DIR"):
        candidates.append(os.path.join(os.environ["INFERA_BIN_DIR"], "infera-bench"))
    on_path = shutil.which("infera-bench")
    if on_path:
        candidates.append(on_path)
    candidates += [os.path.join(ROOT, "target", p, "infera-bench") for p in ("release", "debug")]
    for c in candidates:
        if os.path.isfile(c) and os.access(c, os.X_OK):
            return c
    sys.exit("agentx: no infera-bench (cargo build --release -p infera-bench, or give --bench)")


def open_text(path):
    return gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")


def cut_session(session, max_turns):
    """The session's first `max_turns` model requests (markers before the cut are kept)."""
    if max_turns is None:
        return session
    kept, turns = [], 0
    for r in session.get("requests", []):
        if r.get("type") == "subagent":
            if turns < max_turns:
                kept.append(r)
            continue
        if turns >= max_turns:
            break
        kept.append(r)
        turns += 1
    out = dict(session)
    out["requests"] = kept
    out.pop("totals", None)
    return out


def write_slice(trace, sessions, max_turns, dest):
    """The first `sessions` sessions of `trace`, cut to `max_turns`, as JSONL in `dest`."""
    n = 0
    with open_text(trace) as src, open(dest, "w", encoding="utf-8") as out:
        for line in src:
            if not line.strip():
                continue
            if sessions is not None and n >= sessions:
                break
            out.write(json.dumps(cut_session(json.loads(line), max_turns)) + "\n")
            n += 1
    return n


def fmt(d, unit=""):
    if not d:
        return "n/a"
    return " ".join(f"{k} {d[k]:.1f}{unit}" for k in ("p50", "p90", "mean") if d.get(k) is not None)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    extra = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description="AgentX trace replay through the deployment's proxy.")
    ap.add_argument("deployment")
    ap.add_argument("--trace", required=True, help="agentic session JSONL (.gz)")
    ap.add_argument("--proxy", help="the proxy's base URL (default: the first of [router] proxies)")
    ap.add_argument("--model", help="the model name sent (default: the deployment's served name)")
    ap.add_argument("--sessions", type=int, help="replay only the first N sessions")
    ap.add_argument("--max-turns", type=int, help="cut each session to its first K model requests")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--think-cap-s", type=float, default=300.0)
    ap.add_argument("--output-scale", type=float, default=1.0)
    ap.add_argument("--duration-s", type=float)
    ap.add_argument("--bench", help="the infera-bench binary")
    ap.add_argument("--json", default="agentx-result.json")
    a = ap.parse_args(argv)

    dep = kitlib.Deployment(a.deployment)
    proxy = (a.proxy or dep.proxy_url()).rstrip("/")
    model = a.model or dep.served_name
    bench = find_bench(a.bench)

    with tempfile.TemporaryDirectory(prefix="agentx-") as tmp:
        trace = a.trace
        if a.sessions is not None or a.max_turns is not None:
            trace = os.path.join(tmp, "slice.jsonl")
            n = write_slice(a.trace, a.sessions, a.max_turns, trace)
            print(f"agentx: {n} session(s) of {a.trace}"
                  + (f", cut to {a.max_turns} turn(s)" if a.max_turns is not None else ""))
        cmd = [bench, "replay", "--trace", trace, "--format", "agentic", "--mode", "closed",
               "--url", proxy, "--model", model, "--concurrency", str(a.concurrency),
               "--idle-gap-cap-s", str(a.think_cap_s), "--output-scale", str(a.output_scale),
               "--json", a.json, "--quiet"]
        if a.duration_s is not None:
            cmd += ["--duration-s", str(a.duration_s)]
        cmd += extra
        print("agentx: " + " ".join(cmd), flush=True)
        rc = subprocess.call(cmd)
    if rc != 0:
        print(f"agentx: infera-bench exited {rc}", file=sys.stderr)
        return rc
    with open(a.json, encoding="utf-8") as f:
        r = json.load(f)
    print(f"\nagentx: {model!r} at {proxy}: {r['completed']} requests completed, {r['failed']} failed, "
          f"window {r['window_s']:.1f} s")
    print(f"  TTFT ms          {fmt(r.get('ttft_ms'))}")
    print(f"  ITL ms           {fmt(r.get('itl_ms'))}")
    print(f"  tok/s per user   {fmt(r.get('interactivity_tok_per_s'))}")
    print(f"  throughput       {r['tokens_per_s']:.1f} output tok/s, {r['requests_per_s']:.2f} requests/s "
          f"({r['output_tokens']} output, {r['input_tokens']} input tokens)")
    print(f"  report           {a.json}")
    return 1 if r["failed"] or not r["completed"] else 0


if __name__ == "__main__":
    sys.exit(main())
