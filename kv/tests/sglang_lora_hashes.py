"""Prints the KV-event block hashes SGLang 0.5.23 publishes for one radix path stored by a LoRA
adapter's requests, for several `lora_id`s of adapters named alike, computed by SGLang's own
code: `LoRARef` (python/sglang/srt/lora/lora_registry.py) mints the ids, `Req` appends the id to
the request's `extra_key` (python/sglang/srt/managers/schedule_batch.py), and
`KVCacheEventRecorder.record_store` (python/sglang/srt/mem_cache/events.py) publishes
`namespaced_block_hash(event hash, kv_event_namespace_seed(extra_key))`
(python/sglang/srt/disaggregation/kv_events.py) over `compute_node_event_hash_values`
(python/sglang/srt/mem_cache/utils.py) when the adapter is registered for events. The last two
steps are the recorder's own lines, repeated here; every function called is the wheel's.

Our test driver, not SGLang code; set up as sglang_event_hashes.py (next to this file).
sglang/srt/utils/__init__.py imports torch: the package is registered bare, with the one name
lora_registry.py imports from it (`ConcurrentCounter`, unused by `LoRARef`) stood in for.

stdout: one JSON object, {"version", "page_size", "tokens", "base": [int64, ...],
"adapters": [{"name", "how", "lora_id", "hashes": [int64, ...]}]}.
"""

import importlib.metadata
import json
import sys
import tempfile

import sglang_event_hashes
import sglang_wheel

PAGE_SIZE = 4
TOKENS = list(range(3, 3 + 3 * PAGE_SIZE))


def main():
    # Before the hash functions' loader stands in for `sglang.srt.environ`, which kv_events.py
    # reads at import.
    sglang_wheel.bare_packages("sglang", "sglang.srt", "sglang.srt.utils", "sglang.srt.lora")
    sys.modules["sglang.srt.utils"].ConcurrentCounter = object
    from sglang.srt.disaggregation import kv_events  # SGLang's own code, unmodified
    from sglang.srt.lora.lora_registry import LoRARef  # SGLang's own code, unmodified

    with tempfile.TemporaryDirectory() as build_dir:
        utils = sglang_event_hashes.load(build_dir)

        def published(extra_key):
            (values,) = sglang_event_hashes.path_hashes(utils, [TOKENS], PAGE_SIZE, None, extra_key)
            seed = kv_events.kv_event_namespace_seed(extra_key=extra_key, cache_salt=None)
            return [kv_events.namespaced_block_hash(h, namespace_seed=seed) for h in values]

        adapters = []
        for how, lora_id in (
            ("loaded at run time", LoRARef(lora_name="sql", lora_path="/adapters/sql").lora_id),
            ("loaded again", LoRARef(lora_name="sql", lora_path="/adapters/sql").lora_id),
            ("--lora-paths", LoRARef.deterministic_id("sql", "/adapters/sql")),
            ("--lora-paths, another path", LoRARef.deterministic_id("sql", "/mnt/sql")),
        ):
            adapters.append({"name": "sql", "how": how, "lora_id": lora_id, "hashes": published(lora_id)})
        (base,) = sglang_event_hashes.path_hashes(utils, [TOKENS], PAGE_SIZE, None, None)
        print(json.dumps({"version": importlib.metadata.version("sglang"), "page_size": PAGE_SIZE,
                          "tokens": TOKENS, "base": base, "adapters": adapters}))


if __name__ == "__main__":
    main()
