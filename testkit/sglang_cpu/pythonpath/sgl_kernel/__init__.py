"""A stand-in for SGLang's kernel package on a CPU without AMX (no CPU build of it is on PyPI).

SGLang 0.5.23 on `SGLANG_USE_CPU_ENGINE=1` imports a few names from `sgl_kernel` at start-up.
Two of them run on every request, and both are bookkeeping, written here in plain torch with the
semantics of SGLang's own Triton kernels:

- `assign_req_to_token_pool_cpu`: `sglang/srt/mem_cache/allocation.py`,
  `assign_req_to_token_pool_func` (Triton: `assign_req_to_token_pool`);
- `copy_all_layer_kv_cache_cpu`: `sglang/kernels/ops/kvcache/cache_move.py`,
  `copy_all_layer_kv_cache_func` (Triton: `copy_all_layer_kv_cache_tiled`).

The speculative-decoding helpers are imported at module level by
`sglang/kernels/ops/speculative/spec_tree.py` and `…/speculative/*.py` but called only when
speculative decoding runs, which the CPU path cannot (manual/guides/testing.md): here they raise.
Every model layer takes its native-torch path without AMX, so no `torch.ops.sgl_kernel`
operator is needed.
"""

import ctypes


def assign_req_to_token_pool_cpu(req_pool_indices, req_to_token, start_offset, end_offset, out_cache_loc, pool_len):
    """Request i's slots start[i]:end[i] take the i-th run of `out_cache_loc`, runs laid end to end."""
    del pool_len  # the row length; `req_to_token`'s shape already says it
    offset = 0
    rows = zip(req_pool_indices.tolist(), start_offset.tolist(), end_offset.tolist())
    for row, start, end in rows:
        n = end - start
        req_to_token[row, start:end] = out_cache_loc[offset : offset + n].to(req_to_token.dtype)
        offset += n


def copy_all_layer_kv_cache_cpu(data_ptrs, strides, tgt_loc, src_loc):
    """In every layer's buffer (address `data_ptrs[l]`, rows of `strides[l]` bytes): row src → row tgt."""
    pairs = list(zip(tgt_loc.tolist(), src_loc.tolist()))
    for ptr, stride in zip(data_ptrs.tolist(), strides.tolist()):
        for tgt, src in pairs:
            ctypes.memmove(ptr + tgt * stride, ptr + src * stride, stride)


def _speculative_only(name):
    def refuse(*_args, **_kwargs):
        raise NotImplementedError(f"sgl_kernel.{name}: speculative decoding does not run on this CPU stand-in")

    refuse.__name__ = name
    return refuse


assign_draft_cache_locs_contiguous_cpu = _speculative_only("assign_draft_cache_locs_contiguous_cpu")
assign_extend_cache_locs_cpu = _speculative_only("assign_extend_cache_locs_cpu")
build_tree_kernel_efficient_cpu = _speculative_only("build_tree_kernel_efficient_cpu")
fill_accept_out_cache_loc_cpu = _speculative_only("fill_accept_out_cache_loc_cpu")
fill_bonus_tokens_cpu = _speculative_only("fill_bonus_tokens_cpu")
verify_tree_greedy_cpu = _speculative_only("verify_tree_greedy_cpu")
