"""Builds DeepseekV2Model's pipeline stages from one copy of SGLang's
`python/sglang/srt/models/deepseek_v2.py` as ROCm gfx950 with aiter would (MI355X:
`_use_aiter_gfx95`), on CPU, and prints what each stage's constructor did as JSON.

    python sglang_pp_stage.py FILE

Run by deploy/tests/sglang_patches.rs with the Python of the real SGLang engine venv (torch on
CPU), on the installed file and on the patched one. FILE is executed as the module
`sglang.srt.models.deepseek_v2`; what needs GPUs or SGLang's initialised process groups is
replaced in that module only: the parallel state (`get_parallel`, `get_pp_group`: pipeline rank
and size), the speculative settings (`get_spec`), the MoE all-to-all backend queries, and
`make_pp_layers`, which here returns the same layout as SGLang's (`PPMissingLayer` stand-ins
outside the stage's [start_layer, end_layer), from `python/sglang/srt/utils/common.py`) with
each stage layer a module whose `.mlp` is a DeepseekV2MoE (past `first_k_dense_replace`) or
not. The constructor runs for real up to the end of the allocator block: the next statement,
`self.layers_to_capture = []`, is where the result is read (and construction stops).

Each case: model shape (DeepSeek V3's hidden 7168 or GLM-5's 6144, 256 routed experts), PP
size and rank, whether EAGLE is on; the output is `{"size": N}` (the allocator size the
stage computed) or `{"error": "AttributeError: ..."}`.
"""

import json
import sys
import types
import warnings

warnings.filterwarnings("ignore")

import torch  # noqa: E402
from transformers import PretrainedConfig  # noqa: E402

import sglang.srt.models.deepseek_v2 as installed  # noqa: E402  (its imports, once)
from sglang.srt.layers.utils import PPMissingLayer  # noqa: E402


class Reached(Exception):
    pass


def load(path):
    module = types.ModuleType("sglang.srt.models.deepseek_v2")
    module.__file__ = path
    module.__package__ = "sglang.srt.models"
    code = compile(open(path, encoding="utf-8").read(), path, "exec")
    exec(code, module.__dict__)
    return module


def allocator_size_function():
    """SGLang's own `get_dsv3_gemm_output_zero_allocator_size`
    (`python/sglang/srt/layers/rocm_linear_utils.py`), which the model file imports only under
    `_use_aiter_gfx95`; that module imports aiter, so the function alone is taken out of it."""
    import ast
    import importlib.util

    path = importlib.util.find_spec("sglang.srt.layers").submodule_search_locations[0] + "/rocm_linear_utils.py"
    tree = ast.parse(open(path, encoding="utf-8").read())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "get_dsv3_gemm_output_zero_allocator_size")
    scope = {}
    exec(compile(ast.Module(body=[fn], type_ignores=[]), path, "exec"), scope)
    return scope[fn.name]


def case(m, hidden, layers, pp_size, pp_rank, eagle):
    per_stage = layers // pp_size
    start, end = pp_rank * per_stage, (pp_rank + 1) * per_stage
    first_k_dense = 3

    pp_group = types.SimpleNamespace(
        is_first_rank=pp_rank == 0, is_last_rank=pp_rank == pp_size - 1, rank_in_group=pp_rank, world_size=pp_size
    )
    parallel = types.SimpleNamespace(
        pp_group=pp_group, pp_rank=pp_rank, pp_size=pp_size, tp_size=1, tp_rank=0, attn_cp_size=1
    )
    backend = types.SimpleNamespace(
        is_deepep=lambda: False, is_mooncake=lambda: False, is_deepep_v2=lambda: False, is_none=lambda: True
    )

    class Layer(torch.nn.Module):
        def __init__(self, moe):
            super().__init__()
            if moe:
                mlp = m.DeepseekV2MoE.__new__(m.DeepseekV2MoE)
                torch.nn.Module.__init__(mlp)
            else:
                mlp = torch.nn.Identity()
            self.mlp = mlp

    def make_pp_layers(num_hidden_layers, layer_fn, prefix="", **kwargs):
        mods = [Layer(i >= first_k_dense) if start <= i < end else PPMissingLayer() for i in range(num_hidden_layers)]
        return torch.nn.ModuleList(mods), start, end

    m._use_aiter_gfx95 = True
    m.get_dsv3_gemm_output_zero_allocator_size = allocator_size_function()
    m._is_cuda = False
    m.get_parallel = lambda: parallel
    m.get_pp_group = lambda: pp_group
    m.get_spec = lambda: types.SimpleNamespace(speculative_algorithm="EAGLE" if eagle else None)
    m.make_pp_layers = make_pp_layers
    # The embedding where a stage has one: torch's, whose embedding_dim is what
    # VocabParallelEmbedding(vocab_size, hidden_size) has (without its TP group).
    m.VocabParallelEmbedding = lambda vocab, hidden, **kwargs: torch.nn.Embedding(vocab, hidden)
    m.get_embedding_tp_kwargs = lambda: {}
    m.is_deepep_class_backend = lambda: False
    m.get_moe_a2a_backend = lambda: backend
    for name in ("is_dsa_enable_prefill_cp", "is_prefill_context_parallel_enabled"):
        if hasattr(m, name):
            setattr(m, name, lambda: False)

    config = PretrainedConfig(
        pad_token_id=0, vocab_size=1024, first_k_dense_replace=first_k_dense, num_hidden_layers=layers,
        hidden_size=hidden, n_routed_experts=256, moe_intermediate_size=2048, n_shared_experts=1,
        rms_norm_eps=1e-6, num_experts_per_tok=8, qk_rope_head_dim=64, architectures=["DeepseekV3ForCausalLM"],
    )

    class Probe(m.DeepseekV2Model):
        def __setattr__(self, name, value):
            if name == "layers_to_capture":
                raise Reached(self.gemm_output_zero_allocator_size)
            super().__setattr__(name, value)

    try:
        Probe(config)
    except Reached as r:
        return {"size": r.args[0]}
    except AttributeError as e:
        return {"error": f"AttributeError: {e}"}
    return {"error": "the constructor finished without reaching layers_to_capture"}


def main():
    m = load(sys.argv[1])
    out = {}
    for name, hidden in (("deepseek_v3", 7168), ("glm5", 6144)):
        out[f"{name} pp1 rank0 eagle=False"] = case(m, hidden, 16, 1, 0, False)
        for rank in range(4):
            for eagle in (False, True):
                out[f"{name} pp4 rank{rank} eagle={eagle}"] = case(m, hidden, 16, 4, rank, eagle)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
