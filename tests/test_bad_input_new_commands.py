"""Bad and hostile input to fit, tier, import-log and recheck (found by a break-it pass):
each is a clear ERROR (exit 2) or an honest verdict, never a traceback or a silent answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main

LOG = str(Path(__file__).parent / "data" / "logs" / "vllm_0.8.5_qwen3-30b-a3b_tp4.log")


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:  # argparse usage errors
        code = exc.code
    out = capsys.readouterr().out
    return code, json.loads(out) if out.strip() else None


@pytest.mark.parametrize("argv", [
    ["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "99999999999999999999999"],
    ["fit", "llama-3.1-8b", "--gpu", "H100", "--max-num-seqs", "9" * 30],
])
def test_fit_refuses_implausible_integers(argv, capsys):
    code, doc = run_json(argv, capsys)
    assert code == 2 and "not plausible" in doc["error"]


def test_fit_weights_larger_than_the_card_do_not_fit_at_load(capsys):
    code, doc = run_json(["fit", "qwen3-32b", "--gpu", "RTX-4090"], capsys)
    assert code == 0 and doc["fits"] == "no"
    assert "weights alone" in doc["reason"] and "loading the model weights" in doc["engine_error"]


def test_fit_max_model_len_above_the_models_limit_is_vllms_refusal(capsys):
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--max-model-len", "200000"], capsys)
    assert code == 0 and doc["fits"] == "no" and "VLLM_ALLOW_LONG_MAX_MODEL_LEN" in doc["engine_error"]


def test_fit_kv_cache_memory_bytes_larger_than_the_card_does_not_fit(capsys):
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--kv-cache-memory-bytes", "200G"], capsys)
    assert code == 0 and doc["fits"] == "no" and "--kv-cache-memory-bytes" in doc["reason"]


def _trace(tmp_path, rows) -> str:
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return str(p)


def test_tier_refuses_an_input_length_past_any_context(tmp_path, capsys):
    t = _trace(tmp_path, [{"timestamp": 0, "input_length": 10**30, "output_length": 1, "hash_ids": [1]}])
    code, doc = run_json(["tier", "--trace", t, "--model", "llama-3.1-8b"], capsys)
    assert code == 2 and "input_length" in doc["error"] and "line 1" in doc["error"]


@pytest.mark.parametrize("flag,value", [("--at-capacity-blocks", "9" * 25), ("--min-gain", "nan"),
                                        ("--min-gain", "abc")])
def test_tier_bad_flags_are_errors_not_tracebacks(tmp_path, capsys, flag, value):
    t = _trace(tmp_path, [{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2]}])
    code, doc = run_json(["tier", "--trace", t, "--model", "llama-3.1-8b", flag, value], capsys)
    assert code == 2 and doc["exit_code"] == 2 and doc["error"]


def test_import_log_out_without_pool_bytes_is_refused_not_claimed(tmp_path, capsys):
    out = tmp_path / "m.json"
    code, doc = run_json(["import-log", LOG, "--out", str(out)], capsys)
    assert code == 2 and "no pool bytes" in doc["error"] and not out.exists()


@pytest.mark.parametrize("argv,needle", [(["--tp", "0"], "--tp"), (["--block-size", "0"], "--block-size"),
                                         (["--kv-format", "garbage"], "--kv-format"),
                                         (["--requested-kv-format", "garbage"], "--requested-kv-format")])
def test_import_log_bad_overrides_are_named(capsys, argv, needle):
    code, doc = run_json(["import-log", LOG, *argv], capsys)
    assert code == 2 and needle in doc["error"]


def test_recheck_of_a_record_without_its_digest_is_never_unchanged(tmp_path, capsys):
    rec = tmp_path / "r.json"
    assert main(["demo", "--out", str(rec)]) == 0
    capsys.readouterr()
    d = json.loads(rec.read_text())
    del d["digest"]
    d["measurement"]["peak_used_bytes"] += 10 * 2**30
    edited = tmp_path / "e.json"
    edited.write_text(json.dumps(d))
    assert main(["recheck", str(edited)]) == 4
    text = capsys.readouterr().out
    assert "none stored" in text and "measurement.peak_used_bytes vs inputs.scenario" in text


@pytest.mark.parametrize("flag", ["-np", "-ub", "-b"])
def test_fit_llamacpp_counts_of_zero_name_their_flag(capsys, flag):
    code, doc = run_json(["fit", "qwen3-4b", "-c", "4096", flag, "0", "--gpu", "L4"], capsys)
    assert code == 2 and flag in doc["error"]


def test_tier_warns_when_hash_ids_do_not_cover_the_prompt(tmp_path):
    """Empty ``hash_ids`` with 1,000-token prompts: 0% reuse is a lower bound, and said so."""
    from kvgate.tier.stream import load_hashed_trace

    t = _trace(tmp_path, [{"timestamp": i, "input_length": 1000, "output_length": 1, "hash_ids": []} for i in range(5)])
    tr = load_hashed_trace(t, block_tokens=512)
    assert any("5 of 5 requests carry fewer hash blocks" in w for w in tr.warnings)
    ok = _trace(tmp_path, [{"timestamp": 0, "input_length": 1000, "output_length": 1, "hash_ids": [1, 2]}])
    assert not load_hashed_trace(ok, block_tokens=512).warnings


@pytest.mark.parametrize("argv,needle", [(["-tp", "64"], "must be divisible by tensor parallel size (64)"),
                                         (["-tp", "3"], "attention heads (32)"),
                                         (["-pp", "33"], "more pipeline stages than the model's 32 layers")])
def test_fit_refuses_parallel_sizes_vllm_refuses(capsys, argv, needle):
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", *argv], capsys)
    assert code == 2 and needle in doc["error"]


def test_engine_log_gate_refuses_a_measurement_it_would_not_use(capsys):
    """A peak beside --engine-log would be silently unused (--total there names another GPU
    for a what-if: tests/test_whatif.py)."""
    code, doc = run_json(["gate", "--engine-log", LOG, "--model", "qwen3-30b-a3b", "--slots", "32", "--max-seq", "8192",
                          "--kv-format", "bf16", "--tp", "4", "--peak", "20GiB", "--no-record"], capsys)
    assert code == 2 and "--peak" in doc["error"]


@pytest.mark.parametrize("flag,value,why", [("--host-capacity", "-1GiB", "must not be negative"),
                                            ("--device-capacity", "lots", "cannot parse"),
                                            ("--h2d-bandwidth", "0", "must be positive")])
def test_tier_byte_flags_name_themselves_in_the_error(flag, value, why, capsys, shared_dir):
    trace = shared_dir / "traces" / "mooncake_conversation_trace.jsonl"
    argv = ["tier", "--trace", str(trace), "--model", "llama-3.1-8b", "--device-capacity", "64GiB",
            "--host-capacity", "1TiB", "--h2d-source", "test"]
    argv += [f"{flag}={value}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert f"ERROR: {flag}: " in err and why in err
