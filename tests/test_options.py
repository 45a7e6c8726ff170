"""Typed options (kvgate.options) and the engines' own flags.

Each engine flag must give the same numbers as kvgate's own flag, and the numbers are
checked against hand calculations from the engines' rules:

- Qwen3-30B-A3B (bundled preset): 48 full-attention layers, 4 KV heads × head_dim 128,
  max_position_embeddings 40960, torch_dtype bfloat16. bf16 K+V per position:
  48 × 2 × 4 × 128 × 2 B = 98,304 B.
- gpt-oss-20b: 12 sliding (window 128) + 12 full layers, 8 KV heads × 64: 2,048 B per
  layer-position in bf16.
- llama.cpp (src/llama-context.cpp): n_ctx = pad256(c); per-sequence streams:
  n_ctx_seq = pad256(n_ctx / n_seq), n_ctx = n_ctx_seq · n_seq; unified: one stream of
  n_ctx. iSWA (src/llama-kv-cache-iswa.cpp): pad256(min(n_ctx_seq, W + n_ubatch)) cells per
  stream. Types: q8_0 = 34 B per 32 values, f16 = 2 B.
- vLLM: ceil(L / block_size) blocks of block_size positions per sequence.
"""

import argparse
import json
import subprocess
import sys

import pytest

from kvgate.cli import main
from kvgate.errors import KvgateError
from kvgate.options import EngineOptions, GateOptions, ReplayOptions, llamacpp_max_seq

QWEN_POS = 48 * 2 * 4 * 128 * 2  # 98,304 B per position, bf16/f16
GPTOSS_LAYER_POS = 2 * 8 * 64 * 2  # 2,048 B per layer-position, bf16/f16


def geometry(argv, capsys):
    code = main(["geometry", *argv, "--json"])
    cap = capsys.readouterr()
    assert code == 0, cap.err
    return json.loads(cap.out)


def refused(argv, capsys):
    code = main(argv)
    cap = capsys.readouterr()
    assert code == 2, cap.out
    lines = [ln for ln in cap.err.splitlines() if ln.startswith("ERROR:")]
    assert len(lines) == 1, cap.err
    return lines[0]


def engine(argv, check=True):
    from kvgate.commands._args import add_engine_flags, engine_options_from_args

    p = argparse.ArgumentParser()
    add_engine_flags(p, model="optional")
    return engine_options_from_args(p.parse_args(argv), check=check)


FIGURES = ("bytes_per_token", "slot_bytes", "slots_bytes", "max_seq", "slots", "layout", "kv_format_k", "kv_format_v")


def same(a, b):
    for k in FIGURES:
        assert a.get(k) == b.get(k), k


# ------------------------------------------------------------------ vLLM spellings

def test_vllm_max_model_len_and_max_num_seqs_are_max_seq_and_slots(capsys):
    vllm = geometry(["qwen3-30b-a3b", "--max-model-len", "8200", "--max-num-seqs", "4", "--block-size", "32"], capsys)
    ours = geometry(["qwen3-30b-a3b", "--layout", "vllm", "--max-seq", "8200", "--slots", "4", "--block-size", "32"],
                    capsys)
    same(vllm, ours)
    assert vllm["layout"]["name"] == "vllm"  # inferred from the engine flags
    # ceil(8200 / 32) = 257 blocks of 32 positions
    assert vllm["slot_bytes"] == 257 * 32 * QWEN_POS == 808_452_096
    assert vllm["slots_bytes"] == 4 * 808_452_096


def test_vllm_kv_cache_dtype_is_kv_format(capsys):
    a = geometry(["qwen3-30b-a3b", "--max-model-len", "8192", "--kv-cache-dtype", "fp8"], capsys)
    b = geometry(["qwen3-30b-a3b", "--layout", "vllm", "--max-seq", "8192", "--kv-format", "fp8"], capsys)
    same(a, b)
    assert a["bytes_per_token"] == QWEN_POS // 2 == 49_152


def test_vllm_kv_cache_dtype_auto_is_the_models_dtype(capsys):
    a = geometry(["qwen3-30b-a3b", "--max-model-len", "8192", "--kv-cache-dtype", "auto"], capsys)
    assert a["bytes_per_token"] == QWEN_POS  # torch_dtype bfloat16
    from kvgate.model import ModelSpec

    # vLLM downcasts a float32 (or absent) config dtype to 16 bits (_resolve_auto_dtype)
    for dtype, want in (("float32", "bf16"), (None, "bf16"), ("float16", "float16"), ("bfloat16", "bfloat16")):
        m = ModelSpec(name="m", source="t", layers=[], dtype=dtype)
        assert EngineOptions(kv_format="auto").formats_for(m) == (want, None)


def test_tp_spellings(capsys):
    a = geometry(["qwen3-30b-a3b", "--layout", "vllm", "--max-seq", "8192", "-tp", "4"], capsys)
    b = geometry(["qwen3-30b-a3b", "--layout", "vllm", "--max-seq", "8192", "--tensor-parallel-size", "4"], capsys)
    c = geometry(["qwen3-30b-a3b", "--layout", "vllm", "--max-seq", "8192", "--tp", "4"], capsys)
    same(a, c)
    same(b, c)
    assert a["bytes_per_token"] == QWEN_POS // 4 == 24_576  # 4 KV heads over 4 ranks: one each
    assert engine(["-tp", "4"]).layout == "vllm"  # -tp is vLLM's: it selects vLLM's layout


# ------------------------------------------------------------------ llama.cpp spellings

def test_llamacpp_ctx_size_is_the_whole_context(capsys):
    cpp = geometry(["qwen3-30b-a3b", "-c", "16384", "-np", "8"], capsys)
    ours = geometry(["qwen3-30b-a3b", "--layout", "llama.cpp", "--n-seq", "8", "--max-seq", "2048", "--slots", "8"],
                    capsys)
    same(cpp, ours)
    assert cpp["layout"] == {**cpp["layout"], "name": "llama.cpp", "n_seq": 8}
    assert cpp["max_seq"] == 2048
    # the whole cache is 16,384 cells (8 streams of 2,048), as llama.cpp allocates it
    assert cpp["engine_cache_bytes"] == 16384 * QWEN_POS == 1_610_612_736 == cpp["slots_bytes"]


def test_llamacpp_context_padding_rule():
    # pad256(10000) = 10240; 10240 // 3 = 3413 → pad256 → 3584 per sequence (n_ctx becomes 10752)
    assert llamacpp_max_seq(10000, 3) == 3584
    # unified: one stream of 10240 cells; a sequence's share 10240 // 3 = 3413
    assert llamacpp_max_seq(10000, 3, unified=True) == 3413
    assert llamacpp_max_seq(4096) == 4096 and llamacpp_max_seq(4000) == 4096
    with pytest.raises(KvgateError, match="LLAMA_MAX_SEQ"):
        llamacpp_max_seq(4096, 257)


def test_llamacpp_uneven_context_matches_the_engines_cells(capsys):
    split = geometry(["qwen3-30b-a3b", "-c", "10000", "-np", "3"], capsys)
    assert split["engine_cache_bytes"] == 3 * 3584 * QWEN_POS  # 3 streams of n_ctx_seq 3584
    unified = geometry(["qwen3-30b-a3b", "-c", "10000", "-np", "3", "-kvu"], capsys)
    assert unified["engine_cache_bytes"] == 10240 * QWEN_POS  # one stream of pad256(10000)


def test_llamacpp_ctx_zero_is_the_models_context(capsys):
    d = geometry(["qwen3-30b-a3b", "-c", "0", "-np", "4"], capsys)
    assert d["max_seq"] == 40960 // 4 == 10240  # n_ctx_train 40960 (max_position_embeddings)


def test_llamacpp_cache_types(capsys):
    both = geometry(["qwen3-30b-a3b", "-c", "8192", "-ctk", "q8_0", "-ctv", "q8_0"], capsys)
    ours = geometry(["qwen3-30b-a3b", "--layout", "llama.cpp", "--max-seq", "8192", "--kv-format", "q8_0"], capsys)
    same(both, ours)
    assert both["bytes_per_token"] == 48 * 2 * (512 // 32 * 34) == 52_224
    # -ctk alone: V keeps llama.cpp's default f16 (common_params.cache_type_v)
    k_only = geometry(["qwen3-30b-a3b", "-c", "8192", "-ctk", "q8_0"], capsys)
    assert k_only["bytes_per_token"] == 48 * (512 // 32 * 34 + 512 * 2) == 75_264
    assert k_only["kv_format_v"] == "fp16"


def test_llamacpp_ubatch_and_swa_full(capsys):
    # gpt-oss-20b, -c 16384 -np 4: n_ctx_seq 4096, 4 streams. Sliding layers (W 128):
    # pad256(min(4096, 128 + 256)) = 512 cells per stream with -ub 256.
    ub = geometry(["gpt-oss-20b", "-c", "16384", "-np", "4", "-ub", "256"], capsys)
    ours = geometry(["gpt-oss-20b", "--layout", "llama.cpp", "--max-seq", "4096", "--n-seq", "4", "--slots", "4",
                     "--n-ubatch", "256"], capsys)
    same(ub, ours)
    assert ub["engine_cache_bytes"] == 12 * GPTOSS_LAYER_POS * (4 * 4096 + 4 * 512) == 452_984_832
    full = geometry(["gpt-oss-20b", "-c", "16384", "-np", "4", "--swa-full"], capsys)
    assert full["engine_cache_bytes"] == 24 * GPTOSS_LAYER_POS * 4 * 4096 == 805_306_368
    same(full, geometry(["gpt-oss-20b", "--layout", "llama.cpp", "--max-seq", "4096", "--n-seq", "4", "--slots", "4",
                         "--sliding-full"], capsys))


def test_engine_flags_map_to_layout_options():
    e = engine(["--block-size", "32", "--max-num-batched-tokens", "8192", "--disable-hybrid-kv-cache-manager",
                "--no-enable-prefix-caching", "--speculative-config", '{"method": "ngram", "num_speculative_tokens": 4}',
                "--vllm-version", "0.11.0", "--mamba-ssm-dtype", "float32", "--mamba-cache-dtype", "bfloat16"])
    assert e.layout == "vllm" and e.engine == "vllm"
    assert e.layout_options == {
        "block_size": 32, "max_num_batched_tokens": 8192, "disable_hybrid_kv_cache_manager": True,
        "enable_prefix_caching": False, "speculative_config": {"method": "ngram", "num_speculative_tokens": 4},
        "version": "0.11.0", "ssm_format": "float32", "conv_format": "bfloat16",
    }
    e = engine(["-np", "4", "-ub", "256", "-fa", "on", "--swa-full", "-kvu"], check=False)
    assert e.layout == "llama.cpp" and e.slots == 4
    assert e.layout_options == {"n_seq": 4, "n_ubatch": 256, "flash_attn": "on", "swa_full": True, "unified": True}
    assert engine(["-fa"], check=False).layout_options == {"flash_attn": "on"}  # older llama.cpp: a bare switch
    assert engine(["--sliding-full"]).layout_options == {"sliding_full": True}


# ------------------------------------------------------------------ refusals

@pytest.mark.parametrize("argv,needle", [
    (["--max-model-len", "8192", "-np", "4"], "two engines"),
    (["--block-size", "32", "--swa-full"], "two engines"),
    (["--layout", "contiguous", "--block-size", "32"], "--block-size is vllm's, and --layout is contiguous"),
    (["--layout", "vllm", "-c", "8192"], "llama.cpp's"),
    (["--max-seq", "4096", "--max-model-len", "8192"], "max_seq given twice"),
    (["--slots", "16", "-np", "4"], "slots given twice"),
    (["--kv-format", "fp8", "--kv-cache-dtype", "fp16"], "K format given twice"),
    (["--layout", "zz"], "unknown layout 'zz'"),
])  # fmt: skip
def test_refused_flag_combinations(capsys, argv, needle):
    line = refused(["geometry", "qwen3-30b-a3b", *argv], capsys)
    assert needle in line


def test_an_option_the_layout_does_not_take_is_named():
    from kvgate.session import build_layout

    with pytest.raises(KvgateError, match="--n-seq"):
        build_layout(EngineOptions(layout="vllm", layout_options={"n_seq": 4}))
    with pytest.raises(KvgateError, match="--block-size"):
        build_layout(EngineOptions(layout="contiguous", layout_options={"block_size": 16}))


def test_typed_options_check_their_values():
    with pytest.raises(KvgateError, match="--margin"):
        GateOptions(slots_target=8, margin=1)
    with pytest.raises(KvgateError, match="--page-size"):
        ReplayOptions(trace="t.csv", page_size=0)
    with pytest.raises(KvgateError, match="--weights-max"):
        GateOptions(slots_target=8, weights_max_bytes=1 << 30)


# ------------------------------------------------------------------ --page-size vs --block-size

def _tiny(tmp_path):
    p = tmp_path / "t.csv"
    p.write_text("time,prompt_tokens,output_tokens\n0,10,10\n3,20,4\n")
    return str(p)


def test_replay_page_size_defaults_to_vllms_block(tmp_path, capsys):
    base = ["replay", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "2", "--trace", _tiny(tmp_path),
            "--json"]
    out = {}
    for flag in ("--page-size", "--block-size"):
        assert main([*base, flag, "32"]) == 0
        out[flag] = json.loads(capsys.readouterr().out)
    assert out["--page-size"]["geometry"]["block_bytes"] == 32 * QWEN_POS == 3_145_728
    assert out["--block-size"]["geometry"]["block_bytes"] == 32 * QWEN_POS
    assert out["--page-size"]["summary"] == out["--block-size"]["summary"]
    assert main([*base]) == 0
    assert json.loads(capsys.readouterr().out)["geometry"]["block_bytes"] == 16 * QWEN_POS


def test_gate_trace_with_vllm_block_size(tmp_path, capsys):
    """`kvgate gate --trace X --block-size 32` (it failed on the default layout)."""
    argv = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots-measured", "4", "--slots", "8",
            "--total", "32607MiB", "--peak", "19625MiB", "--no-record", "--trace", _tiny(tmp_path), "--json"]
    assert main([*argv, "--block-size", "32"]) == 0, capsys.readouterr().err
    d = json.loads(capsys.readouterr().out)
    assert d["inputs"]["layout"]["name"] == "vllm" and d["inputs"]["layout"]["block_size"] == 32
    assert d["inputs"]["measured_reclaim_source"]["block_size"] == 32
    assert main([*argv, "--page-size", "32"]) == 0
    e = json.loads(capsys.readouterr().out)
    assert e["inputs"]["layout"]["name"] == "contiguous"
    assert e["inputs"]["measured_reclaim_bytes"] == d["inputs"]["measured_reclaim_bytes"]


def test_replay_flags_need_a_trace(capsys):
    line = refused(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--slots", "8", "--total", "32GiB",
                    "--peak", "20GiB", "--no-record", "--page-size", "32"], capsys)
    assert "--page-size applies to --trace only" in line


# ------------------------------------------------------------------ the library API

def test_decide_from_options_is_the_gate_command(tmp_path, capsys):
    from kvgate.measure.measurement import Measurement
    from kvgate.session import decide_from_options

    mib = 1 << 20
    d = decide_from_options(
        EngineOptions(model="qwen3-30b-a3b", kv_format="int8-f32scale", max_seq=8192, slots=8),
        GateOptions(slots_target=8, slots_measured=4),
        Measurement(total_bytes=32607 * mib, peak_used_bytes=19625 * mib, idle_used_bytes=936 * mib),
    )
    # the write-up: S = 48 × 8192 × (2·512 + 8·4) = 415,236,096 B; P_target = 19,625 + 4·396 MiB
    assert d.record["geometry"]["slot_bytes"] == 48 * 8192 * (2 * 512 + 8 * 4) == 415_236_096
    assert d.record["projection"]["kv_only_bytes"] == 19625 * mib + 4 * 415_236_096
    assert d.record["verdicts"] == {"paging": "not-a-bottleneck", "tiering": "not-a-bottleneck"}
    assert main(["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
                 "--slots-measured", "4", "--slots", "8", "--total", "32607MiB", "--idle", "936MiB",
                 "--peak", "19625MiB", "--no-record", "--json"]) == 0
    cli = json.loads(capsys.readouterr().out)
    assert cli["projection"] == d.record["projection"] and cli["boundaries"] == d.record["boundaries"]


def test_gate_plan_loads_the_model_once_and_replays_once(tmp_path, monkeypatch):
    import kvgate.model as model
    import kvgate.replay.reclaim as reclaim
    import kvgate.session as session
    from kvgate.measure.measurement import Measurement

    loads, replays = [], []
    real_load, real_replay = model.load_model, reclaim.paging_reclaim  # the engine's load_model calls it
    monkeypatch.setattr(model, "load_model", lambda ref: loads.append(ref) or real_load(ref))
    monkeypatch.setattr(reclaim, "paging_reclaim", lambda *a, **k: replays.append(1) or real_replay(*a, **k))
    plan = session.GatePlan(EngineOptions(model="qwen3-30b-a3b", max_seq=8192, slots=8),
                            GateOptions(slots_target=8, slots_measured=1), ReplayOptions(trace=_tiny(tmp_path)))
    plan.check()
    m = Measurement(total_bytes=80 << 30, peak_used_bytes=20 << 30, idle_used_bytes=1 << 30)
    a, b = plan.decide(m), plan.decide(m)
    assert loads == ["qwen3-30b-a3b"] and replays == [1]
    assert a.record["inputs"]["measured_reclaim_bytes"] == b.record["inputs"]["measured_reclaim_bytes"]


# ------------------------------------------------------------------ version and start-up

HEAVY = {"matplotlib", "numpy", "pynvml", "transformers", "torch", "pydantic"}
# What kvgate itself would pull in for `geometry` if its imports were not lazy: charts,
# the sampler, the replay (numpy), the record schema (pydantic), the decision.
NOT_FOR_GEOMETRY = {"matplotlib", "pydantic", "kvgate.measure", "kvgate.replay", "kvgate.gate.schema",
                    "kvgate.gate.decision", "kvgate.commands.gate", "kvgate.commands.run"}


def _imported(argv):
    code = (
        "import sys, io, contextlib\n"
        "from kvgate.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        f"    rc = main({argv!r})\n"
        "print(rc)\n"
        "for m in sys.modules: print(m)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.split()
    assert lines and lines[0] == "0", out.stdout + out.stderr
    return set(lines[1:])


def test_version_imports_nothing_heavy():
    mods = _imported(["--version"])
    assert not {m.split(".")[0] for m in mods} & HEAVY
    assert not any(m.startswith("kvgate.commands.") for m in mods)  # no command module at all


def test_geometry_imports_only_what_it_uses():
    mods = _imported(["geometry", "qwen3-0.6b", "--max-seq", "1024"])
    got = {m for m in mods for want in NOT_FOR_GEOMETRY if m == want or m.startswith(want + ".")}
    assert not got, sorted(got)


def test_gate_with_engine_flags_is_the_gate_with_kvgates(capsys):
    base = ["gate", "--model", "qwen3-30b-a3b", "--slots-measured", "4", "--total", "80GiB", "--peak", "30GiB",
            "--no-record", "--json"]
    out = []
    for flags in (["-c", "65536", "-np", "8", "-ctk", "q8_0", "-ctv", "q8_0"],
                  ["--layout", "llama.cpp", "--n-seq", "8", "--slots", "8", "--max-seq", "8192", "--kv-format", "q8_0"]):
        assert main([*base, *flags]) == 0, capsys.readouterr().err
        out.append(json.loads(capsys.readouterr().out))
    cpp, ours = out
    for key in ("geometry", "projection", "verdicts", "boundaries", "sensitivity"):
        assert cpp[key] == ours[key], key
    # 8192 positions × 48 layers × 2 × (512 // 32 × 34 B) per slot
    assert cpp["geometry"]["slot_bytes"] == 8192 * 48 * 2 * 544 == 427_819_008
    assert "llama.cpp -c 65536 -np 8: 8,192 positions per sequence (n_ctx_seq, src/llama-context.cpp)" in cpp["notes"]
    unified = geometry(["qwen3-30b-a3b", "-c", "10000", "-np", "3", "-kvu"], capsys)
    assert any("one unified cache of 10,240 cells" in n for n in unified["notes"])


def test_measure_options():
    from kvgate.commands._args import add_measure_flags, measure_options_from_args
    from kvgate.measure.runner import DEFAULT_SETTLE_S

    p = argparse.ArgumentParser()
    add_measure_flags(p)
    m = measure_options_from_args(p.parse_args(["--interval", "500ms", "--", "python", "serve.py"]))
    assert m.command == ("python", "serve.py") and m.interval_s == 0.5 and m.gpus == "all"
    assert m.settle_s == DEFAULT_SETTLE_S  # the flag's default is the runner's
    with pytest.raises(KvgateError, match="no command"):
        measure_options_from_args(p.parse_args([]))
    with pytest.raises(KvgateError, match="--interval must be positive"):
        measure_options_from_args(p.parse_args(["--interval", "0s", "--", "true"]))
