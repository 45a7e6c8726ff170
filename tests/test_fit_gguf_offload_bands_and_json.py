"""kvgate fit, second round of a new user's faults: GGUF widths and weights split under
-ngl, the compute buffer of a header-only GGUF, the reasons of every band, vLLM's verdict
when no KV pool is left, the newest modelled releases, flip points in the engine's flags,
the --json fields alike for every engine, and the help's commands column."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path

import pytest

from kvgate.engines.llamacpp.fit import VOCAB_HIGH, LlamaCppFlags, compute_buffer, fit_llamacpp, graph_widths
from kvgate.fit import lookup_gpu, resolve_release
from kvgate.fit.interval import Interval
from kvgate.model import load_model

GiB = 2**30
MiB = 2**20
CONF = Path(__file__).parent / "data" / "llamacpp" / "conformance"


def _without(model, *keys):
    cfg = {k: v for k, v in model.config.items() if k not in keys}
    return dataclasses.replace(model, config=cfg)


# ------------------------------------------------------------------ 1. -ngl split of a GGUF
def test_partial_offload_of_a_gguf_reads_its_own_keys(run_cli):
    """Qwen3-8B GGUF (36 layers, no tensor infos), 8.7 GB given, -ngl 20: no config.json field
    is needed. llama.cpp counts the output layer as a layer (``i_gpu_start = max(n_layer + 1 -
    ngl, 0)``, src/llama-model.cpp at 0c1e57098bba; an H100 run of Llama-3.1-8B F16 -ngl 20
    logged 19 layers' KV, 2,432 MiB): 19 repeating layers and the output on the GPU.
    KV: 19 layers × 32,768 cells × 8 heads × 128 × 2 B × 2 (K, V) = 2,432 MiB; the model
    buffer the 19 layers' share 8,700,000,000 × 19 // 36 = 4,591,666,666 B × [0.70, 1.00]
    plus the output matrix (this GGUF states qwen3.vocab_size = 128): 128 × 4,096 at q6_K's
    0.8203 B = 430,073 B at the low end."""
    m = load_model(str(CONF / "qwen3-8b.gguf"))
    a = fit_llamacpp(m, 8_700_000_000, True, "given", lookup_gpu("RTX 4090"),
                     LlamaCppFlags(ctx_size=32768, parallel=4, n_gpu_layers=20), resolve_release("llama.cpp", None))
    assert a.kv_pool == Interval.point(19 * 32768 * 8 * 128 * 2 * 2) == Interval.point(2432 * MiB)
    w = a.terms[0].value
    out_lo = 128 * 4096 * 8203 // 10000
    assert w.low == 3_214_166_666 + out_lo == 3_214_596_739
    assert w.high > 4_591_666_666 + out_lo
    out = run_cli("fit", str(CONF / "qwen3-8b.gguf"), "-c", "32768", "-np", "4", "--total", "12GiB",
                  "--weights-bytes", "8.7GB", "-ngl", "20")
    assert "CUDA0 KV buffer size = 2432.00 MiB" in out


def test_partial_offload_keeps_the_last_layers_kv():
    """llama.cpp offloads the LAST layers, the output layer counting as one (llama-model.cpp
    load_tensors at 0c1e57098bba, i_gpu_start = max(n_layer + 1 − ngl, 0)). Gemma-3-1B: 26
    layers, 5, 11, 17, 23 full attention, the others sliding (window 512 + ubatch 512 = 1,024
    cells). -ngl 4 at -c 8192 puts layers 23–25 and the output on the GPU: (8,192 + 1,024 +
    1,024) cells × 1 head × 256 × 2 B × 2 (K, V) = 10 MiB (the first three, all sliding, would
    be 3 MiB); -ngl 3 layers 24–25: 2 MiB."""
    m = load_model(str(CONF / "gemma-3-1b.gguf"))
    rel = resolve_release("llama.cpp", None)
    a = fit_llamacpp(m, 10**9, True, "given", lookup_gpu("RTX 4090"), LlamaCppFlags(ctx_size=8192, n_gpu_layers=4), rel)
    assert a.kv_pool == Interval.point((8192 + 1024 + 1024) * 256 * 2 * 2) == Interval.point(10 * MiB)
    a = fit_llamacpp(m, 10**9, True, "given", lookup_gpu("RTX 4090"), LlamaCppFlags(ctx_size=8192, n_gpu_layers=3), rel)
    assert a.kv_pool == Interval.point(2 * 1024 * 256 * 2 * 2) == Interval.point(2 * MiB)


# ------------------------------------------------------------------ 2. compute buffer from GGUF keys
def test_compute_buffer_from_gguf_keys_by_hand():
    """preset-llama-3.1-8b.gguf: n_embd 4096, n_ff 14336, vocab 128 (its llama.vocab_size);
    -c 32768 -np 4 -fa on -ub 512: n_kv = 8192, E = 512 × 4096 × 4 = 8,388,608,
    mask = 512 × 8192 × 2 = 8,388,608; FFN low 2 × 512 × 14336 × 4 + mask + 2E = 83,886,080,
    high 3 × … + mask + 4E = 130,023,424; logits 4 … 512 rows × 128 × 4 + E are smaller.
    The q8_0 cache adds CUDA flash attention's f16 copies of K and V (``ggml-cuda/fattn.cu``
    ``ggml_cuda_flash_attn_ext_get_alloc_size`` at 0c1e57098bba: 128 tokens a stream take the
    MMA kernel, which needs f16 K and V): 8192 cells × 4 streams × 1024 × 2 B × (K, V) =
    134,217,728; that phase is larger: low 134,217,728 + mask + 2E = 159,383,552, high
    + 4E = 176,160,768. Band: × 0.9 = 143,445,196 … ⌈× 1.15⌉ = 202,584,884."""
    m = load_model(str(CONF / "preset-llama-3.1-8b.gguf"))
    f = LlamaCppFlags(ctx_size=32768, parallel=4, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    assert compute_buffer(m, f, 32768, release=resolve_release("llama.cpp", None)) == Interval(143_445_196, 202_584_884)
    f16 = dataclasses.replace(f, cache_type_k="f16", cache_type_v="f16")  # no copies: the FFN phase
    assert compute_buffer(m, f16, 32768, release=resolve_release("llama.cpp", None)) == Interval(75_497_472, 149_526_938)
    fp16 = dataclasses.replace(f, cache_type_k="fp16", cache_type_v="FP16")  # the same type, kvgate's spelling
    assert compute_buffer(m, fp16, 32768, release=resolve_release("llama.cpp", None)) == Interval(75_497_472, 149_526_938)


def test_gguf_vocabulary_falls_back_to_tokens_then_unknown():
    m = load_model(str(CONF / "preset-llama-3.1-8b.gguf"))
    w = graph_widths(_without(m, "llama.vocab_size"))
    assert (w.vocab, w.vocab_source) == (128, "GGUF tokenizer.ggml.tokens count")
    none = _without(m, "llama.vocab_size", "tokenizer_tokens")
    assert graph_widths(none).vocab is None
    # not available: the logits span 0 … the largest vocabulary; -ub 512 rows × 262,144 × 4 + E
    f = LlamaCppFlags(ctx_size=4096, flash_attn="on")
    hi = compute_buffer(none, f, 4096, release=resolve_release("llama.cpp", "b7000")).high
    assert hi == -(-(512 * VOCAB_HIGH * 4 + 512 * 4096 * 4) * 115 // 100)


def test_gguf_vocabulary_from_output_tensor_shape():
    m = load_model(str(CONF / "preset-llama-3.1-8b.gguf"))
    m = _without(m, "llama.vocab_size", "tokenizer_tokens")
    m.config["gguf_tensors"] = {"layer_bytes": {}, "other_bytes": 0,
                                "output": {"bytes": 4096 * 1000 * 2, "shape": [4096, 1000]}}
    assert graph_widths(m).vocab == 1000


# ------------------------------------------------------------------ 3. the reason of the model buffer's band
def test_model_buffer_band_says_why(run_cli):
    out = run_cli("fit", str(CONF / "preset-llama-3.1-8b.gguf"), "-c", "32768", "-np", "4", "-fa", "on",
                  "--gpu", "RTX 4090", "--weights-bytes", "4.9GB", "-v")  # -v: each term's source beneath its row
    lines = out.splitlines()
    at = next(i for i, ln in enumerate(lines) if ln.startswith("model buffer"))
    below = " ".join(ln.strip() for ln in lines[at + 1:at + 4] if ln.startswith("    "))
    assert "token embeddings stay on the CPU" in below and "llama-model.cpp" in below
    assert "vocabulary 128 tokens (GGUF llama.vocab_size)" in out


# ------------------------------------------------------------------ 6. -ngl to pass
def test_ngl_flip_gives_the_value_to_pass(run_cli):
    """-ngl counts the output layer (llama-model.cpp i_gpu_start = max(n_layer + 1 - ngl, 0)):
    with ``cpu`` of 36 repeating layers on the CPU, the -ngl to pass is 36 - cpu + 1."""
    out = run_cli("fit", str(CONF / "qwen3-8b.gguf"), "-c", "32768", "-np", "4", "--total", "12GiB",
                  "--weights-bytes", "8.7GB")
    d = json.loads(run_cli("fit", str(CONF / "qwen3-8b.gguf"), "-c", "32768", "-np", "4", "--total", "12GiB",
                           "--weights-bytes", "8.7GB", "--json"))
    cpu = d["flip_points"]["layers_on_cpu_at_ctx_size"]["sure"]
    assert cpu > 0 and d["flip_points"]["n_gpu_layers_at_ctx_size"]["sure"] == 36 - cpu + 1
    assert f"{cpu} layer(s) on the CPU (pass -ngl {36 - cpu + 1})" in out


# ------------------------------------------------------------------ 4. no pool: no negative log line, words
def test_vllm_no_pool_says_so_in_words(run_cli):
    """Llama-3.1-8B at 20 GiB of weights on an L4 (CUDA total ≤ 22.08 GiB; × 0.9 ≤ 19.87 GiB):
    the weights alone exceed vLLM's share, so no pool at either end."""
    out = " ".join(run_cli("fit", "llama-3.1-8b", "--gpu", "L4", "--weights-bytes", "20GiB").split())  # unwrapped
    assert "Available KV cache memory: -" not in out and "none for sure" not in out and "0 … 0" not in out
    assert "No available memory for the cache blocks" in out
    assert "no --max-model-len fits: the weights and the activation peak leave no KV cache pool" in out
    d = json.loads(run_cli("fit", "llama-3.1-8b", "--gpu", "L4", "--weights-bytes", "20GiB", "--json"))
    assert d["fits"] == "no" and d["flip_points"]["max_model_len"] == {"sure": None, "possible": None}
    # 20 GiB + ≥ 0.45 GiB activation + ≥ 0.03 GiB non-torch + ≥ 0.08 GiB graphs over ≤ 22.08 GiB: above 0.93
    assert d["flip_points"]["gpu_memory_utilization_for_any_pool"]["possible"] >= 0.93


def test_vllm_straddling_pool_no_negative_line(run_cli):
    # the preset's config file (weights estimated: parameters × dtype, +0 … 2% as vLLM allocates
    # them), at a utilization where the pool straddles zero (−0.2 … 0.8 GiB); the preset name
    # carries the published checkpoint's exact bytes
    cfg = str(Path(__file__).parents[1] / "src" / "kvgate" / "model" / "presets" / "llama-3.1-8b.json")
    out = run_cli("fit", cfg, "--gpu", "L4", "--max-model-len", "131072",
                  "--gpu-memory-utilization", "0.74")
    assert re.search(r"= KV cache pool \(per GPU\)\s+none\s+0\.\d\d GiB", out)  # it does straddle zero
    assert "Available KV cache memory: -" not in out and "GPU KV cache size: 0 tokens" not in out
    assert "none fits for sure" in out and "To serve at least one request" in out


# ------------------------------------------------------------------ 6. vLLM flips
def test_vllm_max_num_seqs_cap_and_per_gpu(run_cli):
    out = run_cli("fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "32768", "--max-num-seqs", "16", "-tp", "2")
    out = " ".join(out.split())  # the sentences as said, unwrapped from 100 columns
    assert "but --max-num-seqs 16 caps it: 16 run at once" in out
    # 32,768 tokens × 128 KiB per token / 2 ranks = 2 GiB on each GPU
    assert "needs 2.00 GiB of KV cache per GPU" in out


# ------------------------------------------------------------------ 5. the newest modelled release
_ENGINE_FILES = {
    "vllm": ["engines/vllm/*.py"],
    "sglang": ["engines/sglang/*.py"],
    "llama.cpp": ["engines/llamacpp/*.py"],
}
_THRESHOLD = [r"(?:_FROM|_UP_TO|_CHANGED|_ROW)\s*=\s*\(([\d, ]+)\)", r"(?:<=|>=|<|>)\s*\(([\d, ]+)\)",
              r"at_least\(([\d, ]+)\)"]


def _thresholds(engine):
    import re

    src = Path(__file__).parent.parent / "src" / "kvgate"
    found = []
    for pat in _ENGINE_FILES[engine]:
        for f in sorted(src.glob(pat)):
            text = f.read_text()
            for rx in _THRESHOLD:
                for m in re.finditer(rx, text):
                    v = tuple(int(x) for x in m.group(1).replace(" ", "").split(",") if x)
                    if v:
                        found.append((v, f.name))
    return found


@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp"])
def test_newest_modelled_is_not_older_than_any_rule(engine):
    from kvgate.fit.release import NEWEST, parse_version

    found = _thresholds(engine)
    assert found  # the walk sees the engine's rules
    newest = parse_version(NEWEST[engine])
    assert all(v <= newest for v, _ in found), [(v, f) for v, f in found if v > newest]


def test_sglang_default_release_and_glm5(run_cli):
    """SGLang's rules go to 0.5.17 (engines/sglang/pool.py CELL_USES_DSA_ROW); llama.cpp's to b11312
    (0c1e57098bba); GLM-5 at the default release is a DSA model (listed from 0.5.9)."""
    assert resolve_release("sglang", None).text == "0.5.17"
    assert resolve_release("llama.cpp", None).text == "b11312"
    cfg = str(Path(__file__).parent / "data" / "configs" / "glm-5.json")
    out = run_cli("fit", cfg, "--gpu", "H200", "--tp-size", "8", "--context-length", "32768",
                  "--weights-bytes", "700GB")
    assert "SGLang 0.5.17 (newest modelled" in out and "does not list GlmMoeDsa" not in out


# ------------------------------------------------------------------ 7. --json alike for every engine
@pytest.mark.parametrize("argv,per_seq", [
    (["--max-model-len", "32768"], 32768), (["--context-length", "32768"], 32768), (["-c", "32768", "-np", "4"], 8192)])
def test_json_tokens_are_the_pools_total(run_cli, argv, per_seq):
    d = json.loads(run_cli("fit", "llama-3.1-8b", "--gpu", "H100", "--weights-bytes", "16GB", *argv, "--json"))
    assert d["tokens_per_sequence"] == {"low": per_seq, "high": per_seq}
    # the pool's tokens hold max_concurrency full-length sequences, every engine alike
    for end in ("low", "high"):
        assert d["max_concurrency"][end] == pytest.approx(d["tokens"][end] / per_seq, abs=0.01)
    if d["engine"] == "llama.cpp":  # -c 32768 is the whole KV cache: n_ctx cells, n_seq_max = 4
        assert d["tokens"] == {"low": 32768, "high": 32768}
        assert d["max_concurrency_printed"]["low"] == "n_seq_max = 4"
    if d["engine"] == "vllm":
        assert d["max_concurrency_printed"]["low"] == f"{d['max_concurrency']['low']:.2f}x"


# ------------------------------------------------------------------ 8. the help's commands column from the parsers
def test_engine_flags_commands_column_matches_every_parser():
    import argparse
    import re

    from kvgate.cli import build_parser
    from kvgate.commands._engine_flags import FLAGS

    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    seen = 0
    for engine, flags in FLAGS.items():
        for f in flags:
            names = set()
            for s in re.findall(r"(?<![\w\]-])(-{1,2}(?:\[no-\])?[a-z][a-z0-9-]*)", f.spellings):
                names |= {s.replace("[no-]", ""), s.replace("[no-]", "no-")}
            listed = {c.split(" ")[0] for c in f.commands.split(", ") if c}
            for cmd, p in sub.choices.items():
                takes = bool(names & {o for a in p._actions for o in a.option_strings})
                assert takes == (cmd in listed), (engine, f.spellings, cmd, f.commands)
                seen += takes
    assert seen > 50
    pp = next(f for f in FLAGS["vllm"] if f.spellings.startswith("-pp"))
    assert "geometry" in pp.commands
    seqs = next(f for f in FLAGS["vllm"] if f.spellings.startswith("--max-num-seqs"))
    assert "gate (also with --engine-log)" in seqs.commands


def test_cuda_total_band_is_explained_once(run_cli):
    """--total 8GiB: CUDA total 8 GiB − 793.6 MiB … 8 GiB − 404.5 MiB (every card's reserve
    band, kvgate.fit.gpus) = 7.22 … 7.60 GiB, said once."""
    out = " ".join(run_cli("fit", "qwen3-4b", "--total", "8GiB", "-c", "4096").split())  # unwrapped
    assert "CUDA total 7.22 GiB … 7.60 GiB" in out
    assert out.count("less the driver's reserve, 404–794 MiB") == 1


def test_sglang_no_pool_in_words(run_cli):
    out = run_cli("fit", "llama-3.1-8b", "--gpu", "L4", "--context-length", "131072", "--weights-bytes", "20GiB")
    assert "#tokens: 0" not in out and "up to none" not in out and "more than 1.0 (not possible)" not in out
    assert "no --context-length fits: the weights leave no KV cache pool" in out


def _gguf_with_tensors(path):
    """A 2-layer llama GGUF with tensor infos: token_embd f32 4×32 (512 B), blk.0 f16 100
    (200 B), blk.1 f16 300 (600 B), output f16 32×4 (256 B), output_norm f16 32 (64 B)."""
    import gguf
    import numpy as np

    w = gguf.GGUFWriter(str(path), "llama")
    w.add_block_count(2)
    w.add_context_length(4096)
    w.add_embedding_length(32)
    w.add_feed_forward_length(64)
    w.add_head_count(4)
    w.add_head_count_kv(2)
    w.add_layer_norm_rms_eps(1e-5)
    for name, shape, dt in (("token_embd.weight", (4, 32), np.float32), ("blk.0.ffn_up.weight", (100,), np.float16),
                            ("blk.1.ffn_up.weight", (300,), np.float16), ("output.weight", (4, 32), np.float16),
                            ("output_norm.weight", (32,), np.float16)):
        w.add_tensor(name, np.ones(shape, dtype=dt))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def test_model_buffer_exact_from_tensor_infos(tmp_path):
    """llama.cpp places the last layers on the GPU, the output layer counting as one
    (i_gpu_start = max(n_layer + 1 - ngl, 0), llama-model.cpp at 0c1e57098bba), token
    embeddings never; each tensor takes a multiple of 128 B in a CUDA buffer (ggml-alloc.c
    GGML_PAD(alloc_size, 128)): blk.0 200 → 256, blk.1 600 → 640, output 256, output_norm
    64 → 128. -ngl 1 → the output layer: 384 B; -ngl 2 → + blk.1: 1,024 B; -ngl 3 → 1,280 B;
    the --weights-bytes given does not override the file's tensor infos.
    Vocabulary from the output tensor (ne = [32, 4]): 4 tokens, no FFN key needed."""
    m = load_model(str(_gguf_with_tensors(tmp_path / "t.gguf")))
    assert graph_widths(m).vocab == 4
    for ngl, want in ((1, 384), (2, 1024), (3, 1280), (0, 0)):
        a = fit_llamacpp(m, 10**9, True, "given", lookup_gpu("RTX 4090"), LlamaCppFlags(ctx_size=256, n_gpu_layers=ngl),
                         resolve_release("llama.cpp", None))
        assert a.terms[0].value == Interval.point(want), ngl
        assert "exact from the GGUF's tensor infos" in a.terms[0].source


# ------------------------------------------------------------------ engine from the file
def test_a_gguf_with_no_engine_flags_is_fitted_as_llama_cpp(run_cli):
    """``kvgate fit model.gguf --gpu H100`` with no flag of any engine: only llama.cpp loads a
    GGUF (kvgate.engines.registry.detect_from_file), so its rules apply, with llama-server's
    defaults (-c = n_ctx_train, 4 unified slots). Seen on the H100 device run of
    benchmarks/llamacpp_gpu_buffers.py: `llama-server -m llama8b-f16.gguf` with no flags was
    refused by kvgate under vLLM's rules ("no hidden_size")."""
    doc = json.loads(run_cli("fit", str(CONF / "qwen3-8b.gguf"), "--total", "24GiB", "--weights-bytes", "8.7GB", "--json"))
    assert doc["engine"] == "llama.cpp"
    same = json.loads(run_cli("fit", str(CONF / "qwen3-8b.gguf"), "--total", "24GiB", "--weights-bytes", "8.7GB", "--json",
                              "--engine", "llama.cpp"))
    assert doc["kv_pool_bytes"] == same["kv_pool_bytes"] and doc["terms"] == same["terms"]


def test_vllm_flags_on_a_gguf_read_its_config_as_transformers_does(run_cli):
    """vLLM loads a .gguf's config through transformers (``AutoConfig.from_pretrained(…,
    gguf_file=…)``), whose GGUF_CONFIG_MAPPING names ``qwen3.embedding_length`` hidden_size:
    kvgate reads it the same way, so `fit X.gguf --max-model-len 4096` answers under vLLM's
    rules (it stopped with "model config has no hidden_size", found by the new-user trial)."""
    from kvgate.engines.registry import get_engine

    m = get_engine("vllm").load_model(str(CONF / "qwen3-8b.gguf"))
    assert m.config["hidden_size"] == m.config["qwen3.embedding_length"] == 4096
    assert m.config["num_hidden_layers"] == m.config["qwen3.block_count"]
    doc = json.loads(run_cli("fit", str(CONF / "qwen3-8b.gguf"), "--gpu", "H100", "--weights-bytes", "8.7GB",
                             "--max-model-len", "4096", "--json"))
    assert doc["engine"] == "vllm" and doc["kv_pool_bytes"]["low"] > 0


def test_would_log_kv_lines_as_the_cuda_build_prints_them(run_cli):
    """The KV buffer lines llama_kv_cache prints (the pinned CUDA build on an H100,
    benchmarks/results/llamacpp_gpu_buffers_h100_logs.tar.gz): `-ngl 0` prints the CPU line only
    (4096.00 MiB at -c 32768 for Llama-3.1-8B); `-ngl 20` the CPU line (13 layers, 1664.00) then
    CUDA0's (19 layers, 2432.00). Qwen3-8B here: 36 layers × 32,768 cells × 8 × 128 × 2 B × 2 =
    4,608 MiB in all, 128 MiB a layer; -ngl 20 keeps 19 layers on the GPU (2,432 MiB). An AMD card
    (a HIP build) names its device ROCm0 (ggml-cuda.h GGML_CUDA_NAME)."""
    base = ("fit", str(CONF / "qwen3-8b.gguf"), "--weights-bytes", "8.7GB", "-c", "32768", "--json")
    lines = json.loads(run_cli(*base, "--gpu", "H100", "-ngl", "0"))["log_lines"]["low"]
    assert [x for x in lines if "KV buffer size" in x] == ["CPU KV buffer size = 4608.00 MiB"]
    lines = json.loads(run_cli(*base, "--gpu", "H100", "-ngl", "20"))["log_lines"]["low"]
    assert [x for x in lines if "KV buffer size" in x] == ["CPU KV buffer size = 2176.00 MiB",
                                                           "CUDA0 KV buffer size = 2432.00 MiB"]
    lines = json.loads(run_cli(*base, "--gpu", "MI300X"))["log_lines"]["low"]
    assert [x for x in lines if "KV buffer size" in x] == ["ROCm0 KV buffer size = 4608.00 MiB"]
