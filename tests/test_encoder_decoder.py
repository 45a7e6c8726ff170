"""``kvgate geometry`` on encoder-decoder models (Whisper, T5, BART) and on a model
transformers keeps no cache for (openai-gpt), against transformers' own bytes recorded in
``tests/data/hf_encdec_cache_bytes.json`` (``EncoderDecoderCache`` on the meta device; see
``tests/test_conformance_transformers.py``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main

DATA = Path(__file__).resolve().parent / "data"
CONFIGS = DATA / "configs"
RECORDS = json.loads((DATA / "hf_encdec_cache_bytes.json").read_text())["records"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, dict]:
    rc = main(["geometry", *argv, "--json"])
    return rc, json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("name,enc", [("t5-small", 4), ("t5-small", 1000), ("kobart-summary-v3", 37),
                                      ("whisper-small", None)])
def test_geometry_slots_equal_transformers_encoder_decoder_cache(capsys, name, enc):
    rec = RECORDS[f"{name}:{enc}"]
    argv = [str(CONFIGS / f"{name}.json"), "--max-seq", str(rec["max_cache_len"]), "--slots", str(rec["batch"])]
    rc, rep = run(capsys, *argv, *(["--encoder-len", str(enc)] if enc else []))
    assert rc == 0
    assert rep["slots_bytes"] == sum(rec["self"]) + sum(rec["cross"])
    assert rep["state_bytes"] * rec["batch"] == sum(rec["cross"])
    assert rep["encoder_len"] == rec["encoder_positions"]


def test_t5_encoder_len_defaults_to_max_seq_and_says_so(capsys):
    rc, rep = run(capsys, str(CONFIGS / "t5-small.json"), "--max-seq", "512")
    assert rc == 0 and rep["encoder_len"] == 512
    assert rep["state_bytes"] == 6 * 512 * 8 * 64 * 2 * 2
    assert any("not given, so the slot's 512 positions" in n for n in rep["notes"])


def test_by_layer_lists_the_cross_attention_layers(capsys):
    rc, rep = run(capsys, str(CONFIGS / "whisper-small.json"), "--by-layer")
    assert rc == 0 and rep["max_seq"] == 448  # the decoder's max_target_positions
    assert [r["kind"] for r in rep["by_layer"]] == ["full"] * 12 + ["cross"] * 12


@pytest.mark.parametrize("argv,needle", [
    (["whisper-small.json", "--encoder-len", "4"], "always yields 1,500 positions"),
    (["qwen3-8b.json", "--encoder-len", "4"], "not an encoder-decoder model"),
    (["t5-small.json", "--encoder-len", "0"], "encoder-len"),
])
def test_encoder_len_refused_where_it_does_not_apply(capsys, argv, needle):
    try:
        rc = main(["geometry", str(CONFIGS / argv[0]), "--max-seq", "512", *argv[1:], "--json"])
    except SystemExit as exc:  # argparse's own refusal (the flag's type)
        rc = exc.code
    out = capsys.readouterr()
    assert rc == 2
    assert needle in (json.loads(out.out)["error"] if out.out else out.err)


def test_openai_gpt_keeps_no_cache(capsys):
    rc, rep = run(capsys, str(CONFIGS / "openai-gpt.json"), "--max-seq", "512")
    assert rc == 0 and rep["slots_bytes"] == 0
    assert any("keeps no KV cache for 'openai-gpt'" in n for n in rep["notes"])


def test_vllm_pages_whisper_cross_attention_and_refuses_t5(capsys):
    """vLLM's V1 CrossAttentionSpec (vllm/v1/kv_cache_interface.py) pages the cross layers:
    cdiv(1,500, 16) blocks per request beside the decoder's; its scheduler asserts "Whisper
    is the only supported encoder-decoder model" (kvgate.engines.vllm.cross)."""
    rc = main(["fit", str(CONFIGS / "whisper-small.json"), "--gpu", "H100", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 0 and doc["request_bytes"] == 12 * 16 * 2 * 12 * 64 * 2 * (28 + 94)
    rc = main(["fit", str(CONFIGS / "t5-small.json"), "--gpu", "H100", "--json"])
    doc = json.loads(capsys.readouterr().out)
    assert rc == 2 and "Whisper is the only supported encoder-decoder model" in doc["error"]
