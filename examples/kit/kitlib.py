"""What the kit scripts share: the deployment file read back, and small HTTP helpers.

The deployment file is the TOML `infera-launch` runs (manual/reference/launcher.md). It is
read here with the standard library's tomllib (Python 3.11+): `infera-launch plan` prints
shell commands, not a machine-readable form. Only what the scripts check is derived; the
launcher's own rules are taken from its reference:

- a role table (`[prefill]`, `[decode]`, `[mixed]`) holds the settings of its workers; a
  worker's own keys override them;
- `[ROLE.speculative]` unset on a prefill takes the decode's (the launcher mirrors it so the
  KV transfer includes the draft layer's);
- `kv_events_port` turns KV events on; `[ROLE.hicache]` turns on the hierarchical cache;
- `[router]`: `proxies` (default one on 127.0.0.1:8000), `metrics_listen` (control's
  /metrics, default 127.0.0.1:9464).
"""

import json
import os
import re
import sys
import time
import urllib.error
import urllib.request

try:
    import tomllib
except ImportError:  # Python < 3.11
    sys.exit("the kit scripts need Python 3.11+ (tomllib)")

ROLES = ("prefill", "decode", "mixed")


def http_url(addr):
    """An `IP:PORT` (or URL) as a URL a client on this host can reach."""
    if addr.startswith(("http://", "https://")):
        return addr.rstrip("/")
    host, _, port = addr.rpartition(":")
    if host in ("", "0.0.0.0", "[::]", "::"):
        host = "127.0.0.1"
    return f"http://{host}:{port}"


class Worker:
    def __init__(self, role, settings, worker):
        self.role = role
        self.name = worker.get("name", f"{role}-?")
        self.host = worker.get("host", "127.0.0.1")
        self.port = worker["port"]
        # The role's settings, then the worker's own.
        self.settings = {k: v for k, v in settings.items() if k != "workers"}
        self.settings.update(worker)
        self.url = http_url(f"{self.host}:{self.port}")

    def get(self, key, default=None):
        return self.settings.get(key, default)

    @property
    def ranks(self):
        """DP ranks behind the port (`dp × attn_dp`, manual/reference/launcher.md)."""
        return int(self.get("dp", 1) or 1) * int(self.get("attn_dp", 1) or 1)


class Deployment:
    def __init__(self, path):
        self.path = path
        with open(path, "rb") as f:
            self.doc = tomllib.load(f)
        d = self.doc
        self.engine = d.get("engine", "sglang")
        self.sglang_version = d.get("sglang_version")
        model = d.get("model", {})
        self.model_path = model.get("path")
        self.served_name = model.get("served_name") or self.model_path
        self.page_size = model.get("page_size")
        self.transfer = d.get("transfer", {})
        self.router = d.get("router", {})
        self.workers = []
        for role in ROLES:
            settings = d.get(role)
            if not settings:
                continue
            for w in settings.get("workers", []):
                self.workers.append(Worker(role, settings, w))
        decode_spec = d.get("decode", {}).get("speculative")
        for w in self.workers:
            if w.role == "prefill" and not w.get("speculative") and decode_spec:
                w.settings["speculative"] = decode_spec

    @property
    def pd(self):
        roles = {w.role for w in self.workers}
        return "prefill" in roles and "decode" in roles

    def proxy_url(self):
        proxies = self.router.get("proxies") or ["127.0.0.1:8000"]
        return http_url(proxies[0])

    def control_metrics_url(self):
        return http_url(self.router.get("metrics_listen", "127.0.0.1:9464")) + "/metrics"


def request(url, method="GET", body=None, timeout=30, headers=None):
    """(status, body text). A connection failure raises OSError."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    req.add_header("content-type", "application/json")
    for k, v in (headers or {}).items():
        req.add_header(k, v)
    try:
        with urllib.request.urlopen(req, timeout=timeout) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def get_json(url, timeout=30):
    status, text = request(url, timeout=timeout)
    if status != 200:
        raise RuntimeError(f"GET {url}: {status} {text[:200]}")
    return json.loads(text)


SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)")
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_metrics(text):
    """Prometheus/OpenMetrics text → [(name, {label: value}, float)]."""
    out = []
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, value))
    return out


def metric_sum(samples, name, **labels):
    """The sum of `name`'s samples whose labels include `labels`."""
    return sum(v for n, ls, v in samples if n == name and all(ls.get(k) == str(x) for k, x in labels.items()))


def poll(fn, timeout_s, interval_s=0.2):
    """fn() until it returns a true value or `timeout_s` passes; the last value."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = fn()
        if value or time.monotonic() >= deadline:
            return value
        time.sleep(interval_s)


def api_key():
    """The proxy's API key, if the deployment asks for one (INFERA_API_KEY or OPENAI_API_KEY)."""
    return os.environ.get("INFERA_API_KEY") or os.environ.get("OPENAI_API_KEY") or "none"
