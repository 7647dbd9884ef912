"""Runs the same OpenAI-client calls (and raw /generate and Anthropic /v1/messages calls) against
two base URLs — a proxy and the SGLang server behind it — and prints every answer as JSON, so the
Rust test can check that the proxy answers as SGLang does: `{"case": {"proxy": …, "direct": …}}`.

usage: python openai_calls.py PROXY_URL DIRECT_URL MODEL [SKIP_CASE…]
(DIRECT_URL `-`: the proxy only, e.g. in front of a PD pair, which no single server stands for)
"""

import json
import sys

import urllib.request
from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "The weather in a city.",
            "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
        },
    }
]
SCHEMA = {
    "type": "json_schema",
    "json_schema": {
        "name": "city",
        "schema": {"type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]},
    },
}
MESSAGES = [{"role": "user", "content": "What is the capital of France?"}]


def cases(client, base, model):
    chat = client.chat.completions
    yield "chat", lambda: chat.create(model=model, messages=MESSAGES, max_tokens=8, temperature=0)
    yield "chat_stream", lambda: list(
        chat.create(
            model=model,
            messages=MESSAGES,
            max_tokens=8,
            temperature=0,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    yield "chat_stop", lambda: chat.create(
        model=model, messages=MESSAGES, max_tokens=16, temperature=0, stop=["a", "e", "o"]
    )
    yield "chat_n2", lambda: chat.create(model=model, messages=MESSAGES, max_tokens=6, temperature=0, n=2)
    yield "chat_logprobs", lambda: chat.create(
        model=model, messages=MESSAGES, max_tokens=4, temperature=0, logprobs=True, top_logprobs=2
    )
    yield "chat_json_schema", lambda: chat.create(
        model=model, messages=MESSAGES, max_tokens=24, temperature=0, response_format=SCHEMA
    )
    yield "chat_tools", lambda: chat.create(
        model=model, messages=MESSAGES, max_tokens=8, temperature=0, tools=TOOLS, tool_choice="auto"
    )
    comp = client.completions
    yield "completion", lambda: comp.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0)
    yield "completion_stream", lambda: list(
        comp.create(model=model, prompt="The quick brown fox", max_tokens=8, temperature=0, stream=True)
    )
    yield "completion_logprobs", lambda: comp.create(
        model=model, prompt="The quick brown fox", max_tokens=4, temperature=0, logprobs=2
    )
    yield "completion_batch", lambda: comp.create(
        model=model, prompt=["The quick brown fox", "Hello there"], max_tokens=4, temperature=0
    )
    yield "responses", lambda: client.responses.create(
        model=model, input="What is the capital of France?", max_output_tokens=8, temperature=0
    )
    yield "responses_stream", lambda: list(
        client.responses.create(
            model=model, input="What is the capital of France?", max_output_tokens=8, temperature=0, stream=True
        )
    )
    generate = {"text": "The quick brown fox", "sampling_params": {"max_new_tokens": 8, "temperature": 0}}
    yield "generate", lambda: post(base + "/generate", generate)["body"]
    yield "generate_stream", lambda: sse(base + "/generate", {**generate, "stream": True})
    batch = {"text": ["The quick brown fox", "Hello there"], "sampling_params": {"max_new_tokens": 4, "temperature": 0}}
    yield "generate_batch", lambda: post(base + "/generate", batch)["body"]
    # Anthropic's Messages API (SGLang's python/sglang/srt/entrypoints/anthropic/serving.py).
    message = {
        "model": model,
        "max_tokens": 8,
        "temperature": 0,
        "system": [{"type": "text", "text": "Answer briefly."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "What is the capital of France?"}]}],
    }
    yield "messages", lambda: post(base + "/v1/messages", message)["body"]
    yield "messages_stream", lambda: sse(base + "/v1/messages", {**message, "stream": True})
    counted = {k: v for k, v in message.items() if k in ("model", "system", "messages")}
    yield "messages_count_tokens", lambda: post(base + "/v1/messages/count_tokens", counted)["body"]


def post(url, body, stream=False):
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"content-type": "application/json"}, method="POST"
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        if not stream:
            return {"status": response.status, "body": json.loads(response.read())}
        events = []
        for line in response:
            line = line.decode().rstrip("\r\n")
            if line.startswith("data: "):
                data = line[len("data: ") :]
                events.append(data if data == "[DONE]" else json.loads(data))
        return {"status": response.status, "events": events}


def sse(url, body):
    return post(url, body, stream=True)


def dump(value):
    if isinstance(value, list):
        return [dump(v) for v in value]
    if hasattr(value, "model_dump"):
        return value.model_dump(mode="json")
    return value


def run(base, model, skip):
    client = OpenAI(base_url=base + "/v1", api_key="unused", max_retries=0, timeout=60)
    out = {}
    for name, call in cases(client, base, model):
        if name in skip:
            continue
        try:
            out[name] = dump(call())
        except Exception as e:  # the test shows which call failed and how
            out[name] = {"error": type(e).__name__, "message": str(e)}
    return out


def main():
    proxy, direct, model = sys.argv[1:4]
    skip = set(sys.argv[4:])
    a = run(proxy, model, skip)
    b = run(direct, model, skip) if direct != "-" else {}
    print(json.dumps({name: {"proxy": a[name], "direct": b.get(name)} for name in a}))


if __name__ == "__main__":
    main()
