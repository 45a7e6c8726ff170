"""Encoder-decoder models in ``kvgate fit`` and ``kvgate weights``: the weights of both
stacks (kvgate.model.encdec_weights), vLLM's cross-attention cache (CrossAttentionSpec,
kvgate.engines.vllm.cross), ``--encoder-len``, and the refusals each engine's code gives.

Published parameter counts the weights are checked against: openai/whisper-small 241,734,912
(encoder 88,154,112 + decoder 153,580,800, as printed by public training scripts, search
index file ids 19083942255 and 67221059737; keras-hub's preset metadata 14968169444);
google-t5/t5-small 60,506,624 (keras-hub preset metadata, file id 21814615183)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.model.encdec_weights import encdec_params

CONFIGS = Path(__file__).parent / "data" / "configs"
WHISPER = str(CONFIGS / "whisper-small.json")
T5 = str(CONFIGS / "t5-small.json")


def run_json(capsys, *argv):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(capsys.readouterr().out)


def test_whisper_small_weights_count_encoder_and_decoder(capsys):
    enc, dec = encdec_params(json.loads(Path(WHISPER).read_text()))
    assert (enc, dec) == (88_154_112, 153_580_800)
    code, doc = run_json(capsys, "weights", WHISPER)
    assert code == 0 and doc["params"] == 241_734_912
    assert doc["bytes"] == 241_734_912 * 4  # torch_dtype float32


def test_t5_small_weights_count_encoder_and_decoder(capsys):
    code, doc = run_json(capsys, "weights", T5)
    assert code == 0 and doc["params"] == 60_506_624


def test_vllm_whisper_request_holds_decoder_and_encoder_blocks(capsys):
    """CrossAttentionSpec: cdiv(1500, 16) = 94 blocks per cross layer whatever the decoder's
    length, beside cdiv(448, 16) = 28 per self-attention layer; a page is 16 × 2 × 12 heads
    × 64 × 2 B = 49,152 B; 12 + 12 layers in two groups of 12."""
    code, doc = run_json(capsys, "fit", WHISPER, "--gpu", "L4", "--release", "0.24.0")
    assert code == 0
    page = 16 * 2 * 12 * 64 * 2
    assert doc["request_bytes"] == 12 * page * (28 + 94)
    lo = doc["terms"][0]
    assert lo["name"] == "weights" and lo["low"] <= 241_734_912 * 4 <= lo["high"]
    # the pool's blocks of 12 layers' pages, 122 per request
    blocks = doc["kv_pool_bytes"]["high"] // (12 * page)
    assert doc["max_concurrency"]["high"] == pytest.approx(blocks / 122)


def test_vllm_refuses_encoder_decoder_other_than_whisper(capsys):
    code, doc = run_json(capsys, "fit", T5, "--gpu", "L4", "--encoder-len", "512")
    assert code == 2 and "Whisper is the only supported encoder-decoder model" in json.dumps(doc)


def test_vllm_before_its_cross_attention_spec_is_refused(capsys):
    code, doc = run_json(capsys, "fit", WHISPER, "--gpu", "L4", "--release", "0.10.0")
    assert code == 2 and "0.11.0" in json.dumps(doc)


def test_sglang_refuses_encoder_decoder(capsys):
    code, doc = run_json(capsys, "fit", WHISPER, "--gpu", "L4", "--engine", "sglang")
    assert code == 2 and "encoder-decoder" in json.dumps(doc)


def test_encoder_len_must_be_whisper_s_own_and_only_on_encoder_decoder(capsys):
    code, same = run_json(capsys, "fit", WHISPER, "--gpu", "L4", "--encoder-len", "1500")
    _, plain = run_json(capsys, "fit", WHISPER, "--gpu", "L4")
    assert code == 0 and same["request_bytes"] == plain["request_bytes"]
    assert run_json(capsys, "fit", WHISPER, "--gpu", "L4", "--encoder-len", "1000")[0] == 2
    assert run_json(capsys, "fit", str(CONFIGS / "qwen3-8b.json"), "--gpu", "L4", "--encoder-len", "1000")[0] == 2
