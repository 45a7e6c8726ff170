"""vLLM's online FP8 (``--quantization fp8`` on an unquantized checkpoint) as kvgate prices it
(kvgate.engines.vllm.quantization, read at vLLM 0.22.1 ``layers/quantization/fp8.py``): linear
layers and routed experts one byte a weight plus a float32 scale a tensor; embeddings, lm_head and
norms in the model dtype; the router quantized only where the model file passes its quant_config.
Real configs (tests/data/configs/SOURCES.md) and a real log (tests/data/fit_logs/SOURCES.md)."""

from __future__ import annotations

import json
from pathlib import Path

from kvgate.cli import main
from kvgate.engines.vllm.logcheck import check_logs, printed_bytes, quantization_from_log
from kvgate.engines.vllm.quantization import check_quantization, online_fp8_weight_bytes, online_quantization
from kvgate.model import load_model
from kvgate.model.quant import priced

DATA = Path(__file__).parent / "data"
LOGS = DATA / "fit_logs"
QWEN3_8B = json.loads((DATA / "configs" / "qwen3-8b.json").read_text())
ONLINE_LOG = "vllm_0.22.1_qwen3-30b-a3b-fp8online_h100_1.log"


def test_dense_model_by_the_formula():
    c = QWEN3_8B
    h, f, n, v = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * c["head_dim"], c["num_key_value_heads"] * c["head_dim"]
    assert not c.get("tie_word_embeddings")
    linears = [(h, q), (h, kv), (h, kv), (q, h), (h, f), (h, f), (f, h)]  # q, k, v, o, gate, up, down
    per_layer = sum(i * o * 1 + 4 for i, o in linears)  # FP8 weight + one float32 scale per tensor
    per_layer += (2 * h + 2 * c["head_dim"]) * 2          # two norms, q_norm, k_norm in bf16
    want = n * per_layer + 2 * v * h * 2 + h * 2          # embedding and lm_head bf16, final norm
    assert online_fp8_weight_bytes(c).bytes == want
    # float32 as the run dtype changes only what stays unquantized
    assert online_fp8_weight_bytes(c, "float32").bytes - want == n * (2 * h + 2 * c["head_dim"]) * 2 + 2 * v * h * 2 + h * 2


def test_router_quantized_only_where_the_model_file_passes_quant_config(monkeypatch):
    import kvgate.engines.vllm.quantization as vq

    cfg = load_model("qwen3-30b-a3b").config or {}
    n, h, e = cfg["num_hidden_layers"], cfg["hidden_size"], cfg["num_experts"]
    assert "qwen3_moe" in vq.ROUTER_QUANTIZED and "qwen2_moe" not in vq.ROUTER_QUANTIZED
    q3 = online_fp8_weight_bytes(cfg).bytes  # qwen3_moe.py: ReplicatedLinear(..., quant_config=quant_config)
    monkeypatch.setattr(vq, "ROUTER_QUANTIZED", frozenset())  # as qwen2_moe.py: quant_config=None
    q2 = online_fp8_weight_bytes(cfg).bytes
    assert q2 - q3 == n * (h * e * 2 - (h * e + 4))


def test_qwen3_30b_a3b_against_the_log():
    # the log: 'Model loading took 29.08 GiB' (vLLM 0.22.1, --quantization fp8, --dtype bfloat16)
    est = online_fp8_weight_bytes(load_model("qwen3-30b-a3b").config or {}, "bfloat16").bytes
    bf16 = priced(load_model("qwen3-30b-a3b").config or {}, 2).total
    printed = printed_bytes("29.08 GiB")
    assert est / bf16 < 0.55  # the experts are 95% of the model
    # the printed figure lies 0.0–0.3% above the estimate (the rotary cache and padding are not counted)
    assert est <= printed.high and est * 1.003 >= printed.low


def test_log_flag_is_the_users_not_the_resolved_method():
    assert quantization_from_log((LOGS / ONLINE_LOG).read_text()) == "fp8"
    assert quantization_from_log((LOGS / "vllm_0.13.0_qwen2.5-14b-awq_rtx-a5000_1.log").read_text()) == "awq"
    # a serialized FP8 checkpoint: the config line says quantization=fp8, the user gave none
    text = (LOGS / "vllm_0.10.0_qwen3-235b-a22b-fp8_h100_tp8ep_fp8kv_1.log").read_text()
    assert "quantization=fp8" in text and quantization_from_log(text) is None
    assert quantization_from_log("INFO vllm serve m -q fp8 --port 1") == "fp8"


def test_online_only_for_an_unquantized_checkpoint():
    assert online_quantization("FP8", QWEN3_8B) == "fp8"
    assert online_quantization("fp8", {**QWEN3_8B, "quantization_config": {"quant_method": "fp8"}}) is None
    assert online_quantization("bitsandbytes", QWEN3_8B) is None
    assert "quantizes the linear layers" in (check_quantization("fp8", QWEN3_8B, False) or "")


def test_log_check_prices_the_online_log_from_its_flag():
    est = check_logs(LOGS, only=ONLINE_LOG, weights="estimate")[0]
    w = est.terms["weights"]
    assert est.inside
    assert w["low"] < printed_bytes("29.08 GiB").low < w["high"] < 29.08 * 2**30 * 1.2


def test_fit_prices_online_fp8(capsys):
    base = [str(DATA / "configs" / "qwen3-8b.json"), "--gpu", "L4", "--max-model-len", "8192", "--json"]
    main(["fit", *base])
    plain = json.loads(capsys.readouterr().out)
    main(["fit", *base, "-q", "fp8"])
    fp8 = json.loads(capsys.readouterr().out)
    assert fp8["kv_pool_bytes"]["low"] > plain["kv_pool_bytes"]["low"]
    assert any("quantizes the linear layers" in n for n in fp8["notes"])


def test_other_online_methods_still_need_the_loaded_size(capsys):
    code = main(["fit", str(DATA / "configs" / "qwen3-8b.json"), "--gpu", "L4", "--max-model-len", "8192",
                 "-q", "bitsandbytes", "--json"])
    assert code == 2 and "kvgate does not model the loaded size" in capsys.readouterr().out
