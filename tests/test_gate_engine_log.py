"""``kvgate gate --engine-log``: the gate for a pool a vLLM startup log shows.

The log (tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log) says 198,784 tokens = 12,424
blocks of 16. Qwen3-30B-A3B bf16 under TP 4: 48 layers × 1 KV head × 128 × 2 (K, V) × 2 B
= 24,576 B per token per rank, so the pool is 198,784 × 24,576 = 4,885,315,584 B and one
8,192-token sequence is 201,326,592 B: 32 of them (6,442,450,944 B) do not fit, 24 do
(24 × 201,326,592 = 4,831,838,208 ≤ 4,885,315,584 < 25 × 201,326,592).
"""

from __future__ import annotations

from pathlib import Path

from kvgate.cli import main

LOG = str(Path(__file__).parent / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
BASE = ["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--tp", "4", "--no-record"]


def test_engine_log_gate_with_kvgate_flags(capsys):
    assert main(BASE + ["--slots", "32", "--max-seq", "8192"]) == 0
    out = capsys.readouterr().out
    assert "KV cache pool 4,885,315,584 B per GPU" in out
    assert "32 sequences of 8,192 tokens need 32 × 201,326,592 = 6,442,450,944 B (does not fit)" in out
    assert "24 sequences of 8,192 tokens fit at once" in out
    # vLLM's words, not the write-up's: vLLM already pages, so no slots, mirror or paging verdict
    for word in ("slot", "mirror", "paging", "max_seq", "pays"):
        assert word not in out.lower(), word


def test_engine_log_gate_with_vllm_flags_is_the_same(capsys):
    assert main(BASE + ["--slots", "32", "--max-seq", "8192"]) == 0
    ours = capsys.readouterr().out
    assert main(BASE + ["--max-num-seqs", "32", "--max-model-len", "8192"]) == 0
    assert capsys.readouterr().out == ours


def test_gate_without_model_or_engine_log_is_one_error(capsys):
    rc = main(["gate", "--slots", "8", "--max-seq", "8192", "--total", "32GiB", "--peak", "20GiB", "--no-record"])
    err = capsys.readouterr().err
    assert rc == 2 and "needs --model" in err


def _replay_json(capsys, *extra: str) -> dict:
    import json

    trace = str(Path(__file__).parent / "data" / "traces" / "mooncake_conversation_head.jsonl")
    assert main(["replay", "--model", "qwen3-0.6b", "--max-seq", "8192", "--slots", "4", "--trace", trace,
                 "--json", *extra]) == 0
    return json.loads(capsys.readouterr().out)


def test_time_unit_flag_reaches_the_trace_reader(capsys):
    """Mooncake timestamps are milliseconds (issue 11, fault 6): the format says so, and
    ``--time-unit`` overrides it on the command line."""
    default = _replay_json(capsys)
    assert default["trace"]["time_unit"] == "ms" and default["trace"]["format"] == "mooncake"
    given_s = _replay_json(capsys, "--time-unit", "s")
    assert given_s["trace"]["time_unit"] == "s" and given_s["trace"]["time_unit_reason"] == "given"
    assert given_s["summary"] != default["summary"]  # 1000× sparser arrivals replay differently


def test_import_log_cross_check_that_differs_exits_changed(capsys):
    """The vLLM 0.24.0 log of Qwen3.6-35B-A3B (fp8 KV) logs its available KV memory and its
    block count; Qwen3-30B-A3B's bytes per block cannot give that count from that memory:
    EXIT_CHANGED (4), not the internal-error code 1."""
    from kvgate.errors import EXIT_CHANGED

    log = str(Path(__file__).parent / "data" / "logs" / "vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log")
    rc = main(["import-log", log, "--model", "qwen3-30b-a3b"])
    out = capsys.readouterr().out
    assert "cross-check: differs" in out, out
    assert rc == EXIT_CHANGED
