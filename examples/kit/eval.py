#!/usr/bin/env python3
"""GSM8K through the deployment's proxy, scored as lm-evaluation-harness's `gsm8k` task.

    python3 examples/kit/eval.py DEPLOYMENT.toml [--proxy URL] [--dataset PATH|URL]
        [--fewshot PATH|URL] [--num-fewshot 5] [--limit N] [--concurrency 16]
        [--max-tokens 512] [--json FILE]
    python3 examples/kit/eval.py --self-check

The model is the deployment's served name, the proxy the first of `[router] proxies` unless
`--proxy` says otherwise.

What is sent (lm-evaluation-harness `lm_eval/tasks/gsm8k/gsm8k.yaml`, run as a chat model with
`--apply_chat_template --fewshot_as_multiturn`): per question, the few-shot examples as
alternating turns — user `Question: {question}\\nAnswer:`, assistant `{answer}` — then the
question as the last user turn; greedy (temperature 0), stop at `Question:`, `</s>`,
`<|im_end|>`.

How it is scored (the same file's filters and metric): exact match, ignoring case, after
removing `,`, `$`, everything up to `#### `, and a final `.` from both the extracted answer and
the reference, where the extracted answer is
- strict: the first match of `#### (\\-?[0-9\\.\\,]+)`;
- flexible: the last match of `(-?[$0-9.,]{2,})|(-?[0-9]+)`.
A response with no match scores as `[invalid]`.

Data: `--dataset` is a JSONL file (or URL) of `{"question", "answer"}` objects (GSM8K's own
format, answer ending in `#### N`), or a `.parquet` file or URL if pyarrow is installed (the
test split's: https://huggingface.co/datasets/openai/gsm8k/resolve/main/main/
test-00000-of-00001.parquet, cached like the default download). Without it,
the `openai/gsm8k` test split (config `main`, 1,319 questions) is downloaded from Hugging
Face's dataset viewer API (https://datasets-server.huggingface.co/rows?dataset=openai/gsm8k&
config=main&split=test, JSON pages of 100 rows) and cached under
`$XDG_CACHE_HOME/infera-kit/` (default `~/.cache/infera-kit/`). The few-shot examples are the
first `--num-fewshot` of the train split (lm-eval's `first_n` sampler), downloaded the same way
when the test split is; with a local `--dataset` and no `--fewshot`, the five examples bundled
in `fixtures/gsm8k_fewshot.jsonl` (written for this kit, not GSM8K's) are used instead.

Prints the strict and flexible accuracy and writes them with every sample to `--json`
(default `gsm8k-result.json`). Exit 0 when the run completed (whatever the accuracy), 1 when
requests failed, 2 on bad usage.
"""

import argparse
import concurrent.futures
import json
import os
import re
import sys
import time
import urllib.request

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.dont_write_bytecode = True  # no __pycache__ next to the kit

STOP = ["Question:", "</s>", "<|im_end|>"]
STRICT = re.compile(r"#### (\-?[0-9\.\,]+)")
FLEXIBLE = re.compile(r"(-?[$0-9.,]{2,})|(-?[0-9]+)")
IGNORE = [re.compile(p) for p in (r",", r"\$", r"(?s).*#### ", r"\.$")]
INVALID = "[invalid]"
ROWS_API = "https://datasets-server.huggingface.co/rows?dataset=openai/gsm8k&config=main&split={split}&offset={offset}&length={length}"
TEST_ROWS = 1319
# The same split as one parquet file (needs pyarrow): `--dataset HF_PARQUET`.
HF_PARQUET = "https://huggingface.co/datasets/openai/gsm8k/resolve/main/main/test-00000-of-00001.parquet"


def strict_extract(response):
    m = STRICT.findall(response)
    return m[0].strip() if m else INVALID


def flexible_extract(response):
    matches = FLEXIBLE.findall(response)
    if not matches:
        return INVALID
    last = matches[-1]
    return [g for g in last if g][0].strip()


def normalize(text):
    for r in IGNORE:
        text = r.sub("", text)
    return text.lower()


def exact_match(prediction, reference):
    return normalize(prediction) == normalize(reference)


def self_check():
    """The scoring on responses whose scores lm-eval's filters give (see the module doc)."""
    ref = "Natalia sold 48/2 = <<48/2=24>>24 clips.\n#### 72"
    cases = [
        ("She sold 72 clips.\n#### 72", True, True),
        ("#### 72.", True, True),  # the final period is ignored
        ("The answer is $72.", False, True),  # no ####: strict is [invalid]
        ("48 + 24 = 72, so 72 clips. Then 5", False, False),  # flexible: the last number (5)
        ("#### 1,072", False, False),
        ("no digits at all", False, False),
    ]
    for response, strict, flexible in cases:
        s, f = exact_match(strict_extract(response), ref), exact_match(flexible_extract(response), ref)
        assert (s, f) == (strict, flexible), (response, s, f)
    assert exact_match(strict_extract("#### 1,250"), "x\n#### 1250")
    assert flexible_extract("costs $1,250.") == "$1,250."
    print("eval.py self-check: ok")


def cache_dir():
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "infera-kit")


def download_split(split, count):
    """The first `count` rows of openai/gsm8k `split`, from the dataset viewer API (cached)."""
    path = os.path.join(cache_dir(), f"gsm8k-{split}-{count}.jsonl")
    if os.path.isfile(path):
        return read_jsonl(path)
    rows = []
    while len(rows) < count:
        url = ROWS_API.format(split=split, offset=len(rows), length=min(100, count - len(rows)))
        with urllib.request.urlopen(url, timeout=60) as r:
            page = json.load(r)["rows"]
        if not page:
            break
        rows.extend({"question": p["row"]["question"], "answer": p["row"]["answer"]} for p in page)
    os.makedirs(cache_dir(), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    return rows


def read_jsonl(path_or_url):
    if path_or_url.startswith(("http://", "https://")) and path_or_url.endswith(".parquet"):
        # e.g. HF_PARQUET: fetched once into the cache, read as a local parquet file.
        local = os.path.join(cache_dir(), os.path.basename(path_or_url))
        if not os.path.isfile(local):
            os.makedirs(cache_dir(), exist_ok=True)
            urllib.request.urlretrieve(path_or_url, local + ".part")
            os.replace(local + ".part", local)
        return read_jsonl(local)
    if path_or_url.startswith(("http://", "https://")):
        with urllib.request.urlopen(path_or_url, timeout=60) as r:
            text = r.read().decode()
    elif path_or_url.endswith(".parquet"):
        import pyarrow.parquet as pq  # optional: only for parquet files

        return [{"question": r["question"], "answer": r["answer"]} for r in pq.read_table(path_or_url).to_pylist()]
    else:
        with open(path_or_url, encoding="utf-8") as f:
            text = f.read()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def messages(shots, question):
    out = []
    for s in shots:
        out.append({"role": "user", "content": f"Question: {s['question']}\nAnswer:"})
        out.append({"role": "assistant", "content": s["answer"]})
    out.append({"role": "user", "content": f"Question: {question}\nAnswer:"})
    return out


def main(argv=None):
    ap = argparse.ArgumentParser(description="GSM8K (lm-eval gsm8k scoring) through the deployment's proxy.")
    ap.add_argument("deployment", nargs="?")
    ap.add_argument("--proxy", help="the proxy's base URL (default: the first of [router] proxies)")
    ap.add_argument("--model", help="the model name sent (default: the deployment's served name)")
    ap.add_argument("--dataset", help="JSONL/parquet path or JSONL URL (default: openai/gsm8k test from Hugging Face)")
    ap.add_argument("--fewshot", help="JSONL path or URL of the few-shot examples (see the module doc)")
    ap.add_argument("--num-fewshot", type=int, default=5)
    ap.add_argument("--limit", type=int, help="only the first N questions")
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=512)
    ap.add_argument("--timeout", type=float, default=600, help="seconds per request")
    ap.add_argument("--json", default="gsm8k-result.json")
    ap.add_argument("--self-check", action="store_true", help="check the scoring on fixed responses and exit")
    a = ap.parse_args(argv)
    if a.self_check:
        self_check()
        return 0
    if not a.deployment:
        ap.error("the deployment file is required")

    import kitlib
    import openai

    dep = kitlib.Deployment(a.deployment)
    proxy = (a.proxy or dep.proxy_url()).rstrip("/")
    base = proxy if proxy.endswith("/v1") else proxy + "/v1"
    model = a.model or dep.served_name

    if a.dataset:
        docs = read_jsonl(a.dataset)
        shots_src = a.fewshot or os.path.join(HERE, "fixtures", "gsm8k_fewshot.jsonl")
        shots = read_jsonl(shots_src)[: a.num_fewshot]
    else:
        docs = download_split("test", TEST_ROWS)
        shots_src = a.fewshot or "openai/gsm8k train (first_n)"
        shots = read_jsonl(a.fewshot)[: a.num_fewshot] if a.fewshot else download_split("train", a.num_fewshot)
    if a.limit is not None:
        docs = docs[: a.limit]
    if len(shots) < a.num_fewshot:
        print(f"eval: only {len(shots)} few-shot examples in {shots_src}", file=sys.stderr)
        return 2
    print(f"eval: GSM8K, {len(docs)} questions, {a.num_fewshot}-shot ({shots_src}), model {model!r} at {base}, "
          f"concurrency {a.concurrency}")

    client = openai.OpenAI(base_url=base, api_key=kitlib.api_key(), timeout=a.timeout, max_retries=2)

    def one(i):
        doc = docs[i]
        try:
            r = client.chat.completions.create(
                model=model, messages=messages(shots, doc["question"]), temperature=0,
                max_tokens=a.max_tokens, stop=STOP,
            )
            response, error = r.choices[0].message.content or "", None
        except openai.OpenAIError as e:
            response, error = "", str(e)
        strict, flexible = strict_extract(response), flexible_extract(response)
        return {
            "index": i, "question": doc["question"], "target": doc["answer"], "response": response,
            "error": error, "strict_pred": strict, "flexible_pred": flexible,
            "strict_match": error is None and exact_match(strict, doc["answer"]),
            "flexible_match": error is None and exact_match(flexible, doc["answer"]),
        }

    start = time.monotonic()
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, a.concurrency)) as pool:
        samples = sorted(pool.map(one, range(len(docs))), key=lambda s: s["index"])
    elapsed = time.monotonic() - start
    n = len(samples)
    errors = sum(1 for s in samples if s["error"])
    strict = sum(s["strict_match"] for s in samples) / n if n else 0.0
    flexible = sum(s["flexible_match"] for s in samples) / n if n else 0.0
    result = {
        "task": "gsm8k", "model": model, "proxy": base, "deployment": a.deployment, "n": n,
        "num_fewshot": a.num_fewshot, "fewshot_source": shots_src, "errors": errors,
        "exact_match": {"strict-match": strict, "flexible-extract": flexible},
        "elapsed_s": elapsed, "samples": samples,
    }
    with open(a.json, "w", encoding="utf-8") as f:
        json.dump(result, f, indent=2)
    print(f"gsm8k exact_match strict-match {strict:.4f} flexible-extract {flexible:.4f} "
          f"({n} questions, {errors} failed requests, {elapsed:.1f} s) -> {a.json}")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
