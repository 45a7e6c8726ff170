"""llama.cpp's GPU compute buffer while CPU layers' ops are offloaded (0c1e57098bba: ggml-backend.cpp
op offload, ggml-cuda.cu offload_op batch >= 32). Model: preset-llama-3.1-8b.gguf's keys with the
Llama-3.1-8B F16 tensor sizes (ffn 4096 x 14336 x 2 B, attn_q 4096 x 4096 x 2 B) set by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from kvgate.engines.llamacpp.fit import LlamaCppFlags, compute_phases
from kvgate.fit import resolve_release
from kvgate.model import load_model

CONF = Path(__file__).parent / "data" / "llamacpp" / "conformance"
MiB = 2**20


def _llama8b_f16():
    m = load_model(str(CONF / "preset-llama-3.1-8b.gguf"))
    n = m.num_layers
    m.config["gguf_tensors"] = {"layer_bytes": {i: 1 for i in range(n)},
                                "layer_max_cuda_bytes": {i: 4096 * 14336 * 2 for i in range(n)},
                                "layer_attn_max_cuda_bytes": {i: 4096 * 4096 * 2 for i in range(n)},
                                "output": {"bytes": 128 * 4096 * 2, "shape": [4096, 128], "cuda_bytes": 128 * 4096 * 2}}
    return m


def test_offloaded_cpu_layer_by_hand():
    """-c 32768, 4 unified slots, -ngl 0, -ub 512: E = 8 MiB, mask 32 MiB, K + V copies 32768 x 1024
    x 2 B x 2 = 128 MiB, gate+up 56 MiB, weight 112 MiB. Low max(128 + 32 + 3E, 112 + 56 + 2E) = 184
    MiB; high 2E + 32 + 128 + 32 + 112 + 56 = 376 MiB (the H100 and the RPC reserve: 320 MiB)."""
    f = LlamaCppFlags(ctx_size=32768, parallel=4, kv_unified=True, n_gpu_layers=0, n_outputs_max=4)
    lo, hi = compute_phases(_llama8b_f16(), f, 32768, release=resolve_release("llama.cpp", None))
    assert (lo, hi) == (184 * MiB, 376 * MiB)
    assert lo * 0.9 <= 320 * MiB <= hi * 1.15


def test_no_op_offload_or_small_ubatch_leaves_nothing_on_the_gpu_at_ngl_0():
    f = LlamaCppFlags(ctx_size=32768, parallel=4, kv_unified=True, n_gpu_layers=0, n_outputs_max=4)
    rel = resolve_release("llama.cpp", None)
    m = _llama8b_f16()
    assert compute_phases(m, dataclasses.replace(f, op_offload=False), 32768, release=rel) == (0, 0)
    assert compute_phases(m, dataclasses.replace(f, ubatch_size=16), 32768, release=rel) == (0, 0)

