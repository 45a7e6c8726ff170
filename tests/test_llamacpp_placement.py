"""llama.cpp's buffers as a CUDA llama-server allocates them at 0c1e57098bba (issue 26 item 4)
and its --fit with host memory stated (issue 25 item 6).

The shapes are the published configs' (benchmarks/llamacpp_gpu_buffers.py SHAPES), written as
zero-weight GGUFs (sparse files); the logged numbers are issue 26's H100 runs of llama-server
at 0c1e57098bba (Llama-3.1-8B F16 -c 32768 -ngl 20: "CUDA0 model buffer size = 8906.61 MiB",
KV 2,432 MiB; Gemma-3-12B Q8_0: the tied output copied to the GPU, 1,020.25 MiB)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kvgate.engines.llamacpp.fit import LlamaCppFlags, fit_llamacpp, gpu_placement, model_buffer
from kvgate.fit import lookup_gpu, resolve_release
from kvgate.model.gguf import cuda_alloc_bytes, load_gguf

MiB = 2**20
ROOT = Path(__file__).resolve().parents[1]
REL = resolve_release("llama.cpp", None)


def _gguf(tmp_path: Path, name: str, shape: str, wtype: str):
    pytest.importorskip("gguf")
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        from llamacpp_gpu_buffers import write_header
    finally:
        sys.path.pop(0)
    p = tmp_path / f"{name}.gguf"
    size = write_header(p, shape, wtype)
    os.truncate(p, size)  # sparse: the tensor data reads as zeros
    return load_gguf(p)


def test_ngl_counts_the_output_layer():
    """i_gpu_start = max(n_layer + 1 - ngl, 0); the output layer is il = n_layer."""
    assert gpu_placement(32, 20) == (19, True)
    assert gpu_placement(32, 1) == (0, True)
    assert gpu_placement(32, 0) == (0, False)
    assert gpu_placement(32, 33) == (32, True) == gpu_placement(32, 999)
    assert gpu_placement(32, 32) == (31, True)
    # b4459 and before: the last -ngl layers, the output only above the layer count
    old = resolve_release("llama.cpp", "b4459")
    assert gpu_placement(32, 10, old) == (10, False) and gpu_placement(32, 33, old) == (32, True)


def test_llama8b_f16_ngl20_model_and_kv_as_logged(tmp_path):
    """Logged: CUDA0 model buffer 8,906.61 MiB = 19 × 416.03 MiB + output 128,256 × 4,096 × 2 B
    (1,002 MiB) + output_norm 16 KiB; CUDA0 KV 2,432 MiB = 19 layers × 32,768 × 1,024 × 2 B × 2."""
    m = _gguf(tmp_path, "l16", "llama8b", "F16")
    a = fit_llamacpp(m, m.config["weight_bytes"], True, "gguf", lookup_gpu("H100"),
                     LlamaCppFlags(ctx_size=32768, parallel=4, kv_unified=True, n_gpu_layers=20), REL)
    assert f"{a.terms[0].value.low / MiB:.2f}" == "8906.61"
    assert a.kv_pool.low == a.kv_pool.high == 2432 * MiB
    # -ngl 0: nothing; -ngl 1: the output layer alone
    assert model_buffer(m, 0, 0, REL)[0].high == 0
    assert model_buffer(m, 0, 1, REL)[0].high == 128256 * 4096 * 2 + 4096 * 4


def test_tied_output_is_copied_to_the_gpu_with_row_padding(tmp_path):
    """Gemma-3-12B Q8_0 has no output.weight: token_embd (3,840 × vocab, Q8_0) is loaded a second
    time into the output layer's CUDA buffer. Rows of 3,840 are not a multiple of 512: the CUDA
    buffer type adds ggml_row_size(Q8_0, 512 − 3,840 % 512 = 256) = 272 B to each such tensor,
    then each tensor is rounded up to 128 B."""
    m = _gguf(tmp_path, "g12", "gemma3_12b", "Q8_0")
    t = m.config["gguf_tensors"]
    assert "output" not in t
    emb = 262208 * 3840 // 32 * 34
    assert t["token_embd"]["bytes"] == emb
    assert t["token_embd"]["cuda_bytes"] == -(-(emb + 272) // 128) * 128
    full = model_buffer(m, 0, 99, REL)[0].high
    no_out = sum(t["layer_cuda_bytes"].values())
    assert full == no_out + t["token_embd"]["cuda_bytes"] + t["other_cuda_bytes"]
    assert "tied output" in model_buffer(m, 0, 99, REL)[1]


def test_cuda_alloc_bytes_pads_quantized_rows_only():
    assert cuda_alloc_bytes("Q4_0", [3840, 10], 3840 * 10 // 32 * 18) == -(-(21600 + 256 // 32 * 18) // 128) * 128
    assert cuda_alloc_bytes("Q8_0", [4096, 10], 4096 * 10 // 32 * 34) == 43520  # 4096 % 512 == 0
    assert cuda_alloc_bytes("F16", [3840, 10], 76800) == 76800
    assert cuda_alloc_bytes("F32", [100], 400) == 512


def test_no_fits_when_host_ram_cannot_hold_the_kv(run_cli):
    """-c 10,000,000 on Llama-3.1-70B at -ngl 1 (the output layer alone on the GPU): the KV of all
    80 layers (10,000,128 cells, -c padded to 256, × 80 × 4,096 B ≈ 2.98 TiB) goes to host RAM; -ngl given, so --fit changes
    nothing; the GPU part fits, a 512 GiB host does not."""
    import json

    d = json.loads(run_cli("fit", "tests/data/llamacpp/conformance/preset-llama-3.1-70b.gguf", "--weights-bytes",
                           "40GB", "-c", "10000000", "-ngl", "1", "--gpu", "H100", "--host-memory", "512GiB",
                           "--json"))
    h = d["settings"]["host_memory"]
    assert h["kv_bytes"] == 10_000_128 * 80 * 8 * 128 * 2 * 2  # cells padded to 256
    assert h["host_bytes"] == 512 * 2**30 and h["verdict"] == "no"
    assert d["fits"] == "no" and "host RAM" in d["reason"]


def test_fit_moves_layers_whatever_host_ram_and_kvgate_says_so(run_cli):
    """A 70B at -c 1048576 -np 8 on an H100: --fit moves layers to the CPU (llama.cpp looks at
    no host memory), 130 GB of weights and most of 320 GiB of KV go to host RAM: not on a
    256 GiB host; on a 2 TiB host it loads."""
    import json

    args = ["fit", "tests/data/llamacpp/conformance/preset-llama-3.1-70b.gguf", "--weights-bytes", "130GB",
            "-c", "1048576", "-np", "8", "--gpu", "H100", "--json"]
    small = json.loads(run_cli(*args, "--host-memory", "256GiB"))
    big = json.loads(run_cli(*args, "--host-memory", "2TiB"))
    assert small["fits"] == "no" and small["settings"]["host_memory"]["verdict"] == "no"
    assert small["settings"]["host_memory"]["kv_bytes"] > 256 * 2**30
    assert big["settings"]["host_memory"]["verdict"] == "yes" and big["fits"] in ("yes", "unknown")
    assert big["settings"]["n_gpu_layers"] < 80


def test_fit_target_flag_moves_more_layers(run_cli):
    """-fitt 4096 leaves 3 GiB more free than the default 1024 MiB: fewer layers stay."""
    import json

    base = ["fit", "tests/data/llamacpp/conformance/preset-llama-3.1-70b.gguf", "--weights-bytes", "40GB", "-c",
            "16384", "--gpu", "RTX 4090", "--host-memory", "1TiB", "--json"]
    a = json.loads(run_cli(*base))["settings"]["n_gpu_layers"]
    b = json.loads(run_cli(*base, "-fitt", "4096"))["settings"]["n_gpu_layers"]
    assert b < a < 81


def test_no_np_runs_four_slots_with_a_unified_cache(run_cli):
    """llama-server with no -np (tools/server/server.cpp at 0c1e57098bba: n_parallel auto → 4,
    kv_unified = true; the H100 runs logged "n_slots = 4, n_ctx_slot = 32768, kv_unified =
    'true'"): 4 sequences share one cache of -c cells, so the bytes are -np 1's; b5489 ran one."""
    import json

    args = ["fit", "qwen3-4b", "-c", "32768", "--gpu", "RTX 4090", "--json"]
    d = json.loads(run_cli(*args))
    one = json.loads(run_cli(*args, "-np", "1"))
    assert d["settings"]["parallel"] == 4 and d["settings"]["kv_unified"] is True
    assert d["tokens_per_sequence"] == {"low": 32768, "high": 32768}
    assert d["kv_pool_bytes"] == one["kv_pool_bytes"]
    assert any("-np not given" in n for n in d["notes"])
    old = json.loads(run_cli(*args, "--release", "b5489"))
    assert old["settings"]["parallel"] == 1


def test_unified_note_and_a_given_ctx_above_the_trained_length(run_cli):
    """-np not given: 4 slots share one unified cache (the note says so, not "each gets"); -c above
    n_ctx_train (40,960 for Qwen3-8B) fits, and the -c flip point says its search stops there."""
    out = run_cli("fit", "tests/data/llamacpp/conformance/qwen3-8b.gguf", "--gpu", "RTX 4090", "-c", "65536",
                  "-ngl", "99", "--weights-bytes", "5.03GB")
    flat = " ".join(out.split())
    assert "one KV cache shared by the -np 4 sequences (unified)" in flat
    assert "each of -np 4 sequences gets" not in flat
    assert "up to 40,960 (-np 4 sequences share it); the search stops at n_ctx_train, the given 65,536" in flat
