"""The engine-log paths as a new user meets them: one rule for the log's settings and the
what-ifs in ``import-log`` and ``gate --engine-log``, llama.cpp's -ctk/-fa and printed model
buffer, the GPU change worded alike, the gate's target judged by the what-if.

Hand-worked figures:

- Qwen3-30B-A3B (48 layers, 4 KV heads, head_dim 128) at TP 4: one KV head per rank; fp8
  K+V = 2 × 128 × 1 B × 48 layers = 12,288 B per token, 196,608 B per block of 16; the vLLM
  0.8.5 log's 198,784 tokens = 12,424 blocks → 12,424 × 196,608 = 2,442,657,792 B per rank.
- Qwen3-0.6B (28 layers, 8 KV heads, head_dim 128) bf16: 2 × 8 × 128 × 2 B × 28 = 114,688 B
  per token, 1,835,008 B per block; the vLLM 0.8 V0 log's 36,184 blocks → 66,397,929,472 B.
- llama.cpp, the same model, 4,096 cells: K q8_0 = 1,024 values / 32 × 34 B = 1,088 B per
  layer and cell, V f16 = 2,048 B; (1,088 + 2,048) × 28 × 4,096 = 359,661,568 B (343.00 MiB);
  were V q8_0 too it would be 1,088 × 2 × 28 × 4,096 = 249,561,088 B.
- The jetson log's "CPU_Mapped model buffer size = 456.11 MiB": at most 456.115 × 2^20 =
  478,271,242 B.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvgate.cli import main

DATA = Path(__file__).parent / "data"
LOG_30B = str(DATA / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
V0_LOG = str(DATA / "fit_logs" / "vllm_0.8-v0_qwen3-0.6b_h100_1.log")
LCPP = str(next((DATA / "fit_logs").glob("llamacpp_b5489_qwen3-0.6b*jetson*.log")))
MiB = 2**20


def _json(capsys, argv: list[str], rc: tuple[int, ...] = (0,)) -> dict:
    assert main([*argv, "--json"]) in rc
    return json.loads(capsys.readouterr().out)


def test_engine_spellings_are_the_logs_own_when_it_is_silent_in_both_commands(capsys):
    flags = ["--model", "qwen3-30b-a3b", "-tp", "4", "--kv-cache-dtype", "fp8"]
    gate = _json(capsys, ["gate", "--engine-log", LOG_30B, *flags, "--max-num-seqs", "32", "--max-model-len", "8192",
                          "--no-record"])
    imp = _json(capsys, ["import-log", LOG_30B, *flags])
    fp8_block = 2 * 1 * 128 * 1 * 48 * 16
    assert fp8_block == 196_608
    assert gate["pool_bytes"] == imp["crosscheck"]["pool_bytes"] == 12_424 * fp8_block == 2_442_657_792
    for doc in (gate, imp):
        notes = doc["pool"]["notes"]
        assert any(n.startswith("-tp 4: the log does not state its tensor parallel size; taken as the log's own")
                   for n in notes), notes
        assert any(n.startswith("--kv-cache-dtype fp8: the log does not state its KV cache dtype; taken as the log's")
                   for n in notes), notes
        assert "what_if" not in doc and not any(n.startswith(("kv_format fp8 from", "tp 4 from")) for n in notes)


def test_gate_takes_vllm_auto_as_the_models_dtype_like_import_log(capsys):
    doc = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--max-num-seqs", "64",
                         "--max-model-len", "8192", "--no-record"])
    assert doc["kv_format"] == "bf16" and doc["pool_bytes"] == 36_184 * 1_835_008 == 66_397_929_472
    assert any("bf16, the model's dtype, assumed" in ln for ln in doc["crosscheck"]["lines"])


def test_an_engine_tp_the_logs_pool_contradicts_is_a_what_if(capsys):
    """The 0.6B log states no TP; its budget holds 36,184 bf16 blocks at TP 1, half as many
    bytes at TP 2: -tp 2 is what the user asks about."""
    doc = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "-tp", "2", "--max-num-seqs", "512",
                         "--max-model-len", "4096", "--no-record"])
    assert doc["crosscheck"]["status"] == "agrees" and doc["pool_bytes"] == 66_397_929_472
    assert "-tp: 1 → 2" in doc["what_if"]["changes"]
    assert any("agrees with TP 1 and not with 2" in n for n in doc["pool"]["notes"])


def test_a_gate_whose_crosscheck_differs_is_refused(capsys):
    """--tp 2 says the log ran at TP 2; its budget then holds 2× the blocks it logged:
    no verdict from a sizing that does not rebuild the logged pool."""
    rc = main(["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--tp", "2", "--max-num-seqs", "64",
               "--max-model-len", "8192", "--no-record"])
    err = capsys.readouterr().err
    assert rc == 2 and "the cross-check differs" in err and "no verdict" in err


def test_kv_cache_dtype_the_logs_blocks_contradict_is_a_what_if(capsys):
    doc = _json(capsys, ["import-log", V0_LOG, "--model", "qwen3-0.6b", "--kv-cache-dtype", "fp8"])
    w = doc["what_if"]
    assert w["changes"] == ["--kv-cache-dtype: auto → fp8"] and doc["crosscheck"]["status"] == "agrees"
    assert w["kv_pool_bytes"]["low"] // (1_835_008 // 2) * 16 == w["tokens"]["low"]


def test_llamacpp_ctk_alone_leaves_v_and_fa_is_a_what_if(capsys):
    w = _json(capsys, ["import-log", LCPP, "--model", "qwen3-0.6b", "-ctk", "q8_0", "-fa", "on",
                       "--total", "8GiB"])["what_if"]
    assert (w["settings"]["cache_type_k"], w["settings"]["cache_type_v"], w["settings"]["flash_attn"]) == (
        "q8_0", "f16", "on")
    assert w["kv_pool_bytes"] == {"low": 359_661_568, "high": 359_661_568} == {
        "low": (1_088 + 2_048) * 28 * 4_096, "high": (1_088 + 2_048) * 28 * 4_096}
    assert "-ctv: f16 → q8_0" not in " ".join(w["changes"]) and "-fa: off → on" in w["changes"]


def test_llamacpp_what_if_carries_the_printed_model_buffer(capsys):
    w = _json(capsys, ["import-log", LCPP, "--model", "qwen3-0.6b", "--total", "8GiB"] + ["-c", "8192"])["what_if"]
    mb = next(t for t in w["terms"] if t["name"].startswith("model buffer"))
    assert mb["high"] == 478_271_242 and "456.11 MiB" in mb["source"]
    how = {c["name"]: c["how"] for c in w["carried_terms"]}
    assert how["model buffer (weights on the GPU)"] == "carried"


def test_llamacpp_non_kv_block_is_printed_once(capsys):
    assert main(["import-log", LCPP, "--model", "qwen3-0.6b", "--total", "8GiB", "-c", "8192"]) == 0
    out = capsys.readouterr().out
    assert out.count("non-KV terms, from the log or not:") == 1
    assert sum(ln.lstrip().startswith("model buffer (weights on the GPU)") for ln in out.splitlines()) == 1


def test_the_gpu_change_is_worded_alike(capsys):
    v = _json(capsys, ["import-log", LOG_30B, "--model", "qwen3-30b-a3b", "--tp", "4", "--kv-format", "bf16",
                       "--gpu", "H200"])["what_if"]
    assert v["changes"][0] == "GPU: the log's GPU (not named; total not printed) → H200"
    ll = _json(capsys, ["import-log", LCPP, "--model", "qwen3-0.6b", "--total", "8GiB", "-c", "8192"])["what_if"]
    assert ll["changes"][0].startswith("GPU: the log's GPU (not named; total not printed) → --total 8,589,934,592 B")


def test_the_gate_target_is_what_the_what_if_judges(capsys):
    w = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--max-num-seqs", "512",
                       "--max-model-len", "4096", "--gpu", "H200", "--no-record"])["what_if"]
    assert w["settings"]["max_num_seqs"] == 512 and w["settings"]["max_model_len"] == 4096
    assert "--max-num-seqs: not logged (default) → 512" in w["changes"]
    assert any(n.startswith("--max-num-seqs 512: only ") for n in w["notes"])


def test_engine_log_record_speaks_sequences(capsys, tmp_path):
    doc = _json(capsys, ["gate", "--engine-log", V0_LOG, "--model", "qwen3-0.6b", "--max-num-seqs", "512",
                         "--max-model-len", "4096", "--out", str(tmp_path)])
    md = next(tmp_path.glob("*.md")).read_text()
    assert "512 sequences of 4,096 tokens (--max-num-seqs 512, --max-model-len 4,096)" in md.splitlines()[0]
    assert "slot" not in md.replace("sampler", "")
    # the record's JSON keeps its keys; the candidates carry the engine's flag as label
    labels = {c["name"]: c["label"] for c in doc["candidates"] if "label" in c}
    assert labels == {"kv-quant:fp8": "--kv-cache-dtype fp8", "max-model-len cut": "--max-model-len",
                      "fewer slots": "--max-num-seqs"}
    assert doc["sequence_bytes"] == doc["slot_bytes"] == 4_096 * 114_688
    assert not any("slot" in n for n in doc["record"]["notes"])


def test_geometry_engine_layouts_speak_sequences(capsys):
    assert main(["geometry", "qwen3-0.6b", "--max-seq", "32768", "--layout", "vllm"]) == 0
    out = capsys.readouterr().out
    assert "one sequence at --max-model-len 32,768" in out and "1 sequence (--max-num-seqs 1)" in out
    assert "slot" not in out
    assert main(["geometry", "qwen3-0.6b", "--max-seq", "32768"]) == 0
    assert "one slot at max_seq 32,768" in capsys.readouterr().out


def test_gate_engine_log_takes_the_logs_format_and_a_whatif_format_together(capsys, tmp_path):
    """``--kv-format bf16`` names the (silent) log's KV format, ``--kv-cache-dtype fp8`` asks the
    what-if: both at once are not "given twice". The logged pool stays bf16's: 12,424 blocks ×
    393,216 B = 4,885,315,584 B per GPU; the what-if runs with fp8."""
    from kvgate.cli import main

    log = Path(__file__).parent / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log"
    rc = main(["gate", "--engine-log", str(log), "--model", "qwen3-30b-a3b", "--tp", "4", "--kv-format", "bf16",
               "--max-num-seqs", "32", "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--gpu", "H100",
               "--out", str(tmp_path / "r.json")])
    out = capsys.readouterr().out
    assert rc == 0
    assert "KV cache pool 4,885,315,584 B per GPU" in out
    assert "→ fp8" in out and "--kv-cache-dtype fp8" in out
