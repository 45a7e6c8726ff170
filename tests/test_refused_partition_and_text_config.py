"""A logged VLLM_PP_LAYER_PARTITION that vLLM itself would refuse, and a config.json whose
model_type is only in its text_config (split from the round-4 review's tests)."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from kvgate.engines import read_engine_log
from kvgate.engines.crosscheck import crosscheck
from kvgate.errors import KvgateError
from kvgate.model.config import spec_from_config
from test_engine_logs_more import QWEN3_06B


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


# ------------------------------------------------------------------ 2. a partition vLLM refuses
def _pp_log(partition: str) -> str:
    return (f"$ VLLM_PP_LAYER_PARTITION={partition} vllm serve Qwen/Qwen3-0.6B -pp 2 --max-model-len 8192\n"
            "(EngineCore_DP0 pid=9) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 163,840 tokens\n"
            "(EngineCore_DP0 pid=9) INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens "
            "per request: 20.00x\n")


@pytest.mark.parametrize("partition,why", [("1,2,3", "len(partitions)=3 does not match pp_size=2"),
                                           ("16,16", "sum(partitions)=32 does not match num_hidden_layers=28")])
def test_a_partition_vllm_refuses_cannot_be_checked(partition, why):
    p = read_engine_log("pp.log", text=_pp_log(partition))
    m = spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test")
    cc = crosscheck(p, m, kv_format="bf16", pp=2)
    assert cc["status"] == "cannot-check" and why in cc["engine_error"] and why in " ".join(cc["lines"])
    # a valid one is still checked (16 + 12 = 28 over 2 stages)
    ok = crosscheck(read_engine_log("pp.log", text=_pp_log("16,12")), m, kv_format="bf16", pp=2)
    assert ok["status"] in ("agrees", "consistent")


def test_a_gate_and_what_if_on_a_refused_partition_are_refused(tmp_path, capsys):
    log = tmp_path / "pp.log"
    log.write_text(_pp_log("1,2,3"))
    code, _, err = run_json(["gate", "--engine-log", str(log), "--model", "qwen3-0.6b", "--slots", "4",
                             "--max-seq", "8192", "--gpu-memory-utilization", "0.8", "--no-record"], capsys)
    assert code == 2 and "len(partitions)=3 does not match pp_size=2" in err


# ------------------------------------------------------------------ 3. model_type only in text_config
def test_a_wrapper_with_model_type_only_in_its_text_config_is_refused_as_autoconfig_does(tmp_path, capsys):
    inner = dict(QWEN3_06B)
    cfg = {"architectures": ["Qwen3ForCausalLM"], "torch_dtype": "bfloat16", "text_config": inner}
    with pytest.raises(KvgateError) as e:
        spec_from_config(cfg, name="x", source="test")
    msg = e.value.message
    assert "top-level field 'model_type'" in msg and "text_config.model_type 'qwen3'" in msg
    assert "unknown model_type" not in msg
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    code, _, err = run_json(["geometry", str(tmp_path / "config.json"), "--max-model-len", "8192"], capsys)
    assert code == 2 and "top-level field 'model_type'" in err
    # the same text config alone is read
    assert spec_from_config(inner, name="x", source="test").num_layers == 28
