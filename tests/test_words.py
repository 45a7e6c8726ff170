"""The engine's words, not the write-up's, where the answer is an engine's: engine-log
decision records (their JSON table, their recheck), the what-if header, the engine
flags' rule next to a log, and a KV cache pool that the non-KV terms take whole.

The log (tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log) states neither its KV dtype nor
its model dtype: ``--kv-format bf16`` gives it. Its pool is 4,885,315,584 B per GPU
(tests/test_gate_engine_log.py derives it); 32 sequences of 8,192 tokens need
6,442,450,944 B.
"""

from __future__ import annotations

import json
from pathlib import Path

from kvgate.cli import main

LOG = str(Path(__file__).parent / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")
EXAMPLE = Path(__file__).parent.parent / "examples" / "h200-static-cache" / "record.json"


def _engine_record(tmp_path: Path, capsys) -> Path:
    out = tmp_path / "rec.json"
    assert main(["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--tp", "4", "--kv-format", "bf16",
                 "--max-num-seqs", "32", "--max-model-len", "8192", "--out", str(out)]) == 0
    capsys.readouterr()
    return out


def test_engine_log_record_json_says_sequences_not_slots(tmp_path, capsys):
    rec = json.loads(_engine_record(tmp_path, capsys).read_text())
    q = {r["key"]: r["quantity"] for r in rec["table"]}
    assert q["slot"] == "one sequence S(8192) (--max-model-len 8,192)"
    assert q["all_slots"] == "all 32 sequences N·S (--max-num-seqs 32)"
    assert q["headroom"] == "KV cache pool H = T − P"
    assert q["peak"] == "KV cache pool used at start P (0 sequences)"
    assert q["target"] == "32 sequences at full length"
    assert not any("slot" in s for s in q.values())
    # the byte figures are the gate's, unchanged
    b = {r["key"]: r["bytes"] for r in rec["table"]}
    assert (b["slot"], b["all_slots"], b["headroom"], b["peak"]) == (201_326_592, 6_442_450_944, 4_885_315_584, 0)


def test_engine_log_record_rechecks_unchanged_in_the_engines_words(tmp_path, capsys):
    path = _engine_record(tmp_path, capsys)
    assert main(["recheck", str(path)]) == 0  # the new JSON strings are what recomputing gives
    out = capsys.readouterr().out
    assert "(recomputed, unchanged)" in out
    assert "KV cache pool 4,659 MiB (4.55 GiB) per GPU, empty at start" in out
    assert "--max-model-len of at most 6,208 fits" in out
    assert "--max-num-seqs: at most 24 fit" in out
    assert "KV cache pool of at least 6,144 MiB (6.00 GiB) fits" in out
    assert "--max-num-seqs above 48" in out
    for word in ("slot", "card", "resident weights", "max_seq", "peak 0 MiB", "N·S / H"):
        assert word not in out, word


def test_engine_log_recheck_what_if_labels(tmp_path, capsys):
    path = _engine_record(tmp_path, capsys)
    assert main(["recheck", str(path), "--slots", "16"]) == 4
    out = capsys.readouterr().out
    assert "what-if   --max-num-seqs 16" in out and "recorded (from the log)" in out
    assert "slot" not in out


def test_write_up_record_keeps_its_words(capsys):
    """A measured record (not an engine log) keeps the write-up's table and rechecks unchanged."""
    rec = json.loads(EXAMPLE.read_text())
    assert any(r["quantity"].startswith("one slot S(") for r in rec["table"])
    assert main(["recheck", str(EXAMPLE)]) == 0
    out = capsys.readouterr().out
    assert "measured  total" in out and "slots" in out and "(recomputed, unchanged)" in out


def test_whatif_header_from_side_is_the_logs_format_as_given(capsys):
    assert main(["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--tp", "4", "--kv-format", "bf16",
                 "--max-num-seqs", "32", "--max-model-len", "8192", "--kv-cache-dtype", "fp8", "--gpu", "H100",
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "--kv-cache-dtype: bf16 (given with --kv-format) → fp8" in out
    assert "auto → fp8" not in out


def test_engine_flags_state_the_log_rule(capsys):
    assert main(["help", "engine-flags"]) == 0
    out = capsys.readouterr().out
    # the sentence as said, unwrapped (a flag is never broken at its hyphen: test_help_engine_flags)
    assert "kvgate's own spellings (--tp, --kv-format, --pp) describe the LOG" in " ".join(out.split())
    assert main(["help", "engine-flags", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    by = {(e, f["spellings"].split(",")[0]): f["with_a_log"] for e, fl in doc.items() for f in fl}
    assert "--tp (kvgate's) describes the log" in by[("vllm", "-tp")]
    assert "-tp is the what-if where it differs from the log's" in by[("vllm", "-tp")]
    assert "--kv-format (kvgate's) describes the log" in by[("vllm", "--kv-cache-dtype DTYPE")]
    assert "the log's own, with a note" in by[("vllm", "--kv-cache-dtype DTYPE")]
    assert "-ctk is the what-if where it differs" in by[("llama.cpp", "-ctk")]
    assert "-pp is refused where it differs" in by[("vllm", "-pp")]
    assert by[("vllm", "--max-num-seqs N")] is None


def test_fit_pool_table_says_none_for_a_non_positive_end(capsys):
    # the preset's config file: weights estimated (parameters × dtype, +0-2%, as vLLM allocates
    # them; the preset name carries the published checkpoint's exact bytes); at 0.74 of the L4
    # the pool's low end is below zero
    cfg = str(Path(__file__).parents[1] / "src" / "kvgate" / "model" / "presets" / "llama-3.1-8b.json")
    argv = ["fit", cfg, "--gpu", "L4", "--max-model-len", "131072", "--gpu-memory-utilization", "0.74"]
    assert main(argv) in (0, 1, 4)
    row = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("= KV cache pool (per GPU)"))
    main(argv + ["--json"])
    doc = json.loads(capsys.readouterr().out)
    assert doc["kv_pool_bytes"]["low"] < 0 < doc["kv_pool_bytes"]["high"]  # the JSON keeps the exact int
    assert row.split()[-3:] == ["none", f"{doc['kv_pool_bytes']['high'] / 2**30:.2f}", "GiB"]
