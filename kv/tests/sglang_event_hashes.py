"""Prints the KV-event block hashes SGLang publishes for some radix paths, computed by SGLang's
own code: `compute_node_event_hash_values` of python/sglang/srt/mem_cache/utils.py over its
C++ page hash (mem_cache/cpp_utils/hash_binding.cpp), both unmodified from the installed wheel.

Our test driver, not SGLang code. Run with the Python of a venv holding the sglang wheel
(installed --no-deps) plus pybind11, with g++ and OpenSSL's headers on the machine
(`cargo xtask setup`). SGLang builds hash_binding.cpp with torch's extension loader; here g++
builds the same file into a temporary folder, and `native_hash._load_native_hash_module` is
pointed at it. utils.py's imports of GPU kernels and of `envs` are stood in for by empty
modules: the hash functions use neither.

stdout: one JSON object, {"version", "cases": [{"page_size", "cache_salt", "extra_key",
"nodes": [[token, ...], ...], "hashes": [[int64, ...], ...]}]}: each case a radix path from
the root, node by node, and the block hashes the events publish for each node.
"""

import importlib.metadata
import json
import os
import subprocess
import sys
import sysconfig
import tempfile
import types

import sglang_wheel


def load(build_dir):
    root = sglang_wheel.bare_packages("sglang", "sglang.srt", "sglang.srt.utils")  # skip the heavy __init__.py

    class Empty(types.ModuleType):
        def __getattr__(self, _):
            return None

    for name in ("sglang.kernels", "sglang.kernels.ops", "sglang.kernels.ops.kvcache",
                 "sglang.kernels.ops.kvcache.mla_buffer", "sglang.srt.environ"):
        sys.modules[name] = Empty(name)

    import pybind11

    cpp_dir = os.path.join(root, "sglang", "srt", "mem_cache", "cpp_utils")
    module = "hicache_hash_cpp"
    out = os.path.join(build_dir, module + sysconfig.get_config_var("EXT_SUFFIX"))
    subprocess.run(
        ["g++", "-O2", "-shared", "-fPIC", "-std=c++17", "-w", f"-DTORCH_EXTENSION_NAME={module}",
         "-I" + sysconfig.get_paths()["include"], "-I" + pybind11.get_include(),
         os.path.join(cpp_dir, "hash_binding.cpp"), "-o", out, "-lcrypto"],
        check=True,
    )
    sys.path.insert(0, build_dir)
    native = __import__(module)
    from sglang.srt.mem_cache.cpp_utils import native_hash  # SGLang's own code, unmodified

    native_hash._load_native_hash_module = lambda: native
    from sglang.srt.mem_cache import utils  # SGLang's own code, unmodified

    return utils


class Key:
    """The parts of a RadixKey the hash functions read."""

    def __init__(self, token_ids, extra_key=None, cache_salt=None):
        self.token_ids = token_ids
        self.extra_key = extra_key
        self.cache_salt = cache_salt
        self.is_bigram = False

    def __len__(self):
        return len(self.token_ids)


class Node:
    """The parts of a TreeNode the hash functions read and memoise."""

    def __init__(self, key, parent):
        self.key = key
        self.parent = parent
        self.hash_value = None
        self.event_hash_value = None


def path_hashes(utils, nodes, page_size, cache_salt, extra_key):
    """Event hashes per node of a path from the root, as `record_store` takes them."""
    parent = Node(Key([]), None)
    parent.hash_value = []
    out = []
    for tokens in nodes:
        node = Node(Key(tokens, extra_key, cache_salt), parent)
        node.hash_value = utils.compute_node_hash_values(node, page_size)
        if extra_key is None and cache_salt is None:
            values = node.hash_value
        else:
            values = utils.compute_node_event_hash_values(node, page_size)
        out.append([utils.hash_str_to_int64(v) for v in values])
        parent = node
    return out


def main():
    with tempfile.TemporaryDirectory() as build_dir:
        utils = load(build_dir)
        cases = []
        for page_size in (1, 4):
            nodes = [list(range(3, 3 + 2 * page_size)), [70_000, 5, 6, 7][:page_size] * 2]
            for cache_salt, extra_key in ((None, None), ("tenant-a", None), ("tenant-é", None),
                                          (None, "x"), ("tenant-a", "x")):
                if cache_salt is not None and not hasattr(utils, "compute_node_event_hash_values"):
                    continue
                hashes = path_hashes(utils, nodes, page_size, cache_salt, extra_key)
                cases.append({"page_size": page_size, "cache_salt": cache_salt, "extra_key": extra_key,
                              "nodes": nodes, "hashes": hashes})
        print(json.dumps({"version": importlib.metadata.version("sglang"), "cases": cases}))


if __name__ == "__main__":
    main()
