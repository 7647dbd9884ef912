"""Runs at the start of every Python process of a CPU SGLang worker (this folder is on its
PYTHONPATH), the scheduler processes included.

One thing only: the Mooncake KV sender's host-index fast path is turned off. SGLang 0.5.23's
prefill (`sglang/srt/disaggregation/prefill.py`, `send_kv_chunk`) takes it when the sender says
`supports_host_tensor_indices` (`MooncakeKVSender`, `sglang/srt/disaggregation/mooncake/conn.py`),
and it copies the page indices into pinned memory and records a CUDA event, neither of which
exists without a GPU. With the flag false the prefill takes SGLang's own other branch
(`kv_to_page_indices`) and the sender, the bootstrap handshake and the transfer are unchanged.
"""

import importlib.abc
import importlib.util
import sys

_MOONCAKE_CONN = "sglang.srt.disaggregation.mooncake.conn"


class _AfterMooncakeImport(importlib.abc.MetaPathFinder):
    """Lets the module load as usual, then sets the class attribute."""

    def find_spec(self, name, path, target=None):
        if name != _MOONCAKE_CONN:
            return None
        sys.meta_path.remove(self)
        try:
            spec = importlib.util.find_spec(name)
        finally:
            sys.meta_path.insert(0, self)
        if spec is None or spec.loader is None:
            return spec
        load = spec.loader.exec_module

        def exec_module(module):
            load(module)
            module.MooncakeKVSender.supports_host_tensor_indices = False

        spec.loader.exec_module = exec_module
        return spec


sys.meta_path.insert(0, _AfterMooncakeImport())
