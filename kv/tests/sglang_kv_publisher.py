"""Publishes KV events through SGLang's own, unmodified ZmqEventPublisher
(python/sglang/srt/disaggregation/kv_events.py of the installed wheel).

Our test driver, not SGLang code. Run with the Python of a venv holding the sglang wheel
(installed --no-deps) plus msgspec, pyzmq, pydantic and psutil. sglang/__init__.py and
sglang/srt/utils/__init__.py import torch, so both packages are registered as bare package
objects (sglang_wheel.py) and kv_events.py is imported from the wheel as is.

Protocol (one JSON object per line):
  stdout, first:  {"version", "port", "replay_port", "rank", "topic"}  (ports chosen here, free)
  stdin:          {"publish": i}  -> stdout {"seq", "payload" (hex, as SGLang encoded it),
                                             "expect" (the batch as JSON), "lossless"}
                  {"events": [{"type": "BlockStored", ...fields}, {"type": "BlockRemoved", ...},
                              {"type": "AllBlocksCleared"}]}
                                  -> publishes them as one batch, stdout {"seq"}
                  {"quit": true}  -> shuts the publisher down and exits 0
"""

import importlib.metadata
import json
import os
import socket
import sys
import time

import sglang_wheel

RANK = 1
TOPIC = "kv@sglang"


def load_kv_events():
    root = sglang_wheel.bare_packages("sglang", "sglang.srt.utils")  # skip only the heavy __init__.py
    if not os.path.exists(os.path.join(root, "sglang", "srt", "disaggregation", "kv_events.py")):
        sys.exit(f"no sglang wheel under {root}")
    from sglang.srt.disaggregation import kv_events  # SGLang's own code, unmodified

    return kv_events


def free_port_after_base():
    """A base port whose rank-RANK offset (base + RANK) was free a moment ago."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1] - RANK


# Integers that take every msgpack width, both signs.
WIDE = [0, 1, -1, 127, 128, -32, -33, 255, 256, 65535, 65536, -129, -32769,
        2**31, -(2**31) - 1, 2**32, 2**63 - 1, -(2**63)]
MEDIA = ["GPU", "CPU_PINNED", None, "DISK"]


def make_batch(kv, i):
    """Batch i: varied hashes, media, parents; bigrams and metadata now and then."""
    hashes = [WIDE[(i + k) % len(WIDE)] for k in range(3)] + [(-1) ** i * (i * 7919 + 1) * 1_000_003]
    tokens = [(i * 1000 + k * 37_717) % 200_000 for k in range(8)]
    medium = MEDIA[i % len(MEDIA)]
    parent = None if i % 2 == 0 else WIDE[i % len(WIDE)]
    lossless = medium is not None
    token_ids = tokens
    if i % 5 == 4:  # EAGLE: bigram keys
        token_ids = [[t, t + 1] for t in tokens]
        lossless = False
    fields = dict(block_hashes=hashes, parent_block_hash=parent, token_ids=token_ids,
                  block_size=2, lora_id=None, medium=medium)
    stored = kv.BlockStored(**fields)
    salt = None
    lora_name = None
    if i % 7 in (2, 5):  # i = 5: CPU_PINNED, no bigrams: lossless
        if hasattr(kv, "BlockStoredWithMetadata"):  # 0.5.18/0.5.19: 8-element array
            stored = kv.BlockStoredWithMetadata(**fields, metadata=kv.BlockStoredMetadata(cache_salt="salt"))
            salt = "salt"
        elif "session_id" in kv.BlockStored.__struct_fields__:  # 0.5.20+: extra map keys
            extra = {"session_id": "sess"} if i % 7 == 2 else {}
            if i % 7 == 5 and "lora_name" in kv.BlockStored.__struct_fields__:  # 0.5.23: kept
                extra = {"lora_name": "sql"}
                lora_name = "sql"
            stored = kv.BlockStored(**fields, cache_salt="salt", **extra)
            salt = "salt"
            lossless = lossless and "session_id" not in extra  # session_id is not kept
    events = [stored, kv.BlockRemoved(block_hashes=hashes[:2], medium=medium)]
    expect = [
        {"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": parent,
         "token_ids": tokens, "block_size": 2, "medium": medium, "cache_salt": salt,
         "lora_name": lora_name},
        {"type": "BlockRemoved", "block_hashes": hashes[:2], "medium": medium},
    ]
    if i % 3 == 0:
        events.append(kv.AllBlocksCleared())
        expect.append({"type": "AllBlocksCleared"})
    ts = 1000.0 + i * 0.25
    return kv.KVEventBatch(ts=ts, events=events), {"ts": ts, "events": expect, "attn_dp_rank": RANK}, lossless


def event_from_json(kv, e):
    """One event as SGLang's scheduler records it, from the test's JSON."""
    fields = {k: v for k, v in e.items() if k != "type" and (k != "lora_name" or v is not None)}
    if e["type"] == "BlockStored":
        fields.setdefault("lora_id", None)
    return getattr(kv, e["type"])(**fields)


def main():
    kv = load_kv_events()
    import msgspec

    port, replay_port = free_port_after_base(), free_port_after_base()
    config = json.dumps({"publisher": "zmq", "endpoint": f"tcp://*:{port}",
                         "replay_endpoint": f"tcp://*:{replay_port}", "topic": TOPIC})
    # The three lines of kv_events_publisher.py: rank, factory, publish.
    publisher = kv.EventPublisherFactory.create(config, attn_dp_rank=RANK)
    hello = {"version": importlib.metadata.version("sglang"), "port": port + RANK,
             "replay_port": replay_port + RANK, "rank": RANK, "topic": TOPIC}
    print(json.dumps(hello), flush=True)
    encoder = msgspec.msgpack.Encoder()
    seq = 0
    for line in sys.stdin:
        command = json.loads(line)
        if command.get("quit"):
            break
        if "events" in command:
            events = [event_from_json(kv, e) for e in command["events"]]
            publisher.publish(kv.KVEventBatch(ts=time.time(), events=events))
            print(json.dumps({"seq": seq}), flush=True)
            seq += 1
            continue
        batch, expect, lossless = make_batch(kv, command["publish"])
        publisher.publish(batch)  # sets attn_dp_rank, as the scheduler's wrapper relies on
        payload = encoder.encode(batch).hex()  # what the publisher thread sends
        print(json.dumps({"seq": seq, "payload": payload, "expect": expect, "lossless": lossless}), flush=True)
        seq += 1
    publisher.shutdown()


if __name__ == "__main__":
    main()
