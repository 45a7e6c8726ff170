"""vLLM's --quantization in ``kvgate fit`` (kvgate.engines.vllm.quantization): the
checkpoint's own method runs (GPTQ/AWQ also under their Marlin kernels) and changes no
figure; another method stops vLLM with its ValueError; on an unquantized checkpoint the
loaded size is modelled for fp8 only; another method needs --weights-bytes. Real configs of
tests/data/configs (SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvgate.cli import main
from kvgate.engines.vllm.quantization import check_quantization, checkpoint_method

CONFIGS = Path(__file__).parent / "data" / "configs"
AWQ = str(CONFIGS / "deepseek-r1-awq-reconstructed.json")
FP8 = str(CONFIGS / "mimo-v2-flash.json")
PLAIN = str(CONFIGS / "qwen3-8b.json")


def fit_json(capsys, *argv):
    try:
        code = main(["fit", *argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    return code, json.loads(capsys.readouterr().out)


def test_checkpoint_methods_read_from_real_configs():
    assert checkpoint_method(json.loads(Path(AWQ).read_text())) == "awq"
    assert checkpoint_method(json.loads(Path(FP8).read_text())) == "fp8"
    assert checkpoint_method(json.loads(Path(PLAIN).read_text())) is None


@pytest.mark.parametrize("q", ["awq", "awq_marlin", "marlin", "AWQ"])
def test_awq_checkpoint_runs_under_its_own_methods_and_nothing_changes(capsys, q):
    base = (AWQ, "--gpu", "H200", "-tp", "8", "--max-model-len", "8192")
    _, plain = fit_json(capsys, *base)
    code, given = fit_json(capsys, *base, "--quantization", q)
    assert code == 0
    assert given["kv_pool_bytes"] == plain["kv_pool_bytes"] and given["tokens"] == plain["tokens"]
    assert any(n.startswith(f"--quantization {q.lower()}") for n in given["notes"])


@pytest.mark.parametrize(("model", "q", "method"), [(AWQ, "gptq", "awq"), (FP8, "awq", "fp8"), (AWQ, "fp8", "awq")])
def test_other_method_stops_vllm_with_its_message(capsys, model, q, method):
    code, doc = fit_json(capsys, model, "--gpu", "H200", "-tp", "8", "--max-model-len", "8192", "-q", q)
    assert code == 2
    text = json.dumps(doc)
    assert (f"Quantization method specified in the model config ({method}) does not match the quantization method "
            f"specified in the `quantization` argument ({q})") in text


def test_online_quantization_needs_the_loaded_size(capsys):
    # fp8 is modelled (tests/test_vllm_online_fp8.py); bitsandbytes on the fly is not
    code, _ = fit_json(capsys, PLAIN, "--gpu", "L4", "--max-model-len", "8192", "-q", "bitsandbytes")
    assert code == 2
    code, doc = fit_json(capsys, PLAIN, "--gpu", "L4", "--max-model-len", "8192", "-q", "bitsandbytes",
                         "--weights-bytes", "9GB")
    assert code == 0 and any("quantizes the weights while loading" in n for n in doc["notes"])


def test_no_flag_no_note():
    assert check_quantization(None, {}, False) is None
