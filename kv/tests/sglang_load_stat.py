"""Encodes LoadStat readings with SGLang's own, unmodified LoadStat class and encoder
(python/sglang/srt/managers/scheduler_components/load_publisher.py of the installed wheel).

Our test driver, not SGLang code. Run with the Python of a venv holding the sglang wheel
(installed --no-deps) plus msgspec, pyzmq, pydantic and psutil. The package __init__.py files on
the way (sglang, sglang.srt.utils, sglang.srt.managers, ...scheduler_components) import torch or
the scheduler, so those packages are registered as bare package objects and load_publisher.py is
imported from the wheel as is.

argv[1]: a JSON list of readings, each a list of LoadStat's positional fields (any prefix of
them); stdout: {"version", "topic", "payloads": [hex, ...]}. Exits 3 when the wheel has no
load publisher (SGLang < 0.5.19).
"""

import importlib.metadata
import json
import os
import sys
import sysconfig
import types

PACKAGES = ("sglang", "sglang/srt/utils", "sglang/srt/managers", "sglang/srt/managers/scheduler_components")


def main():
    root = sysconfig.get_paths()["purelib"]
    path = os.path.join(root, "sglang", "srt", "managers", "scheduler_components", "load_publisher.py")
    if not os.path.exists(path):
        print(json.dumps({"version": importlib.metadata.version("sglang"), "payloads": None}))
        sys.exit(3)
    for rel in PACKAGES:
        pkg = types.ModuleType(rel.replace("/", "."))
        pkg.__path__ = [os.path.join(root, rel)]  # skip only the heavy __init__.py
        sys.modules[pkg.__name__] = pkg
    from sglang.srt.managers.scheduler_components import load_publisher  # SGLang's own code

    readings = json.loads(sys.argv[1])
    payloads = [load_publisher._encoder.encode(load_publisher.LoadStat(*r)).hex() for r in readings]
    print(json.dumps({"version": importlib.metadata.version("sglang"), "topic": load_publisher.LOAD_TOPIC,
                      "payloads": payloads}))


if __name__ == "__main__":
    main()
