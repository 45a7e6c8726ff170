"""Round-4 faults: engine releases outside the range kvgate models, a logged
VLLM_PP_LAYER_PARTITION that vLLM itself would refuse, and a config.json whose
model_type is only in its text_config."""

from __future__ import annotations

import json
from importlib import metadata

import pytest

from kvgate.cli import main
from kvgate.engines import read_engine_log
from kvgate.engines.crosscheck import crosscheck
from kvgate.errors import KvgateError
from kvgate.fit import release as rel
from kvgate.fit.release import NEWEST, OLDEST, parse_version, resolve_release
from kvgate.model.config import spec_from_config
from test_engine_logs_more import QWEN3_06B


def run_json(argv, capsys):
    try:
        code = main([*argv, "--json"])
    except SystemExit as exc:
        code = exc.code
    out = capsys.readouterr()
    return code, (json.loads(out.out) if out.out.strip() else None), out.err


# ------------------------------------------------------------------ 1. releases out of range
@pytest.mark.parametrize("engine", ["vllm", "sglang", "llama.cpp"])
def test_a_release_newer_than_modelled_uses_the_newest_rules_and_says_so(engine):
    newest = NEWEST[engine]
    given = "b999999" if engine == "llama.cpp" else "99.0"
    r = resolve_release(engine, given)
    assert r.text == given and r.version == parse_version(newest)
    assert f"rules of {newest} used" in r.how
    assert r.note and "newest kvgate models" in r.note and given in r.note


@pytest.mark.parametrize("argv", [["--release", "99.0"], ["--vllm-version", "99.0"],
                                  ["--engine", "sglang", "--release", "99.0"]])
def test_fit_header_and_notes_say_the_newest_rules_are_used(argv, capsys):
    code, doc, _ = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", *argv], capsys)
    newest = NEWEST[doc["engine"]]
    assert code == 0 and doc["release"] == "99.0"
    assert f"rules of {newest} used" in doc["release_how"]
    assert any("newer than any" in n and newest in n for n in doc["notes"])
    assert main(["fit", "llama-3.1-8b", "--gpu", "H100", *argv]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert f"rules of {newest} used" in head


@pytest.mark.parametrize("engine,given", [("vllm", "0.0.1"), ("sglang", "0.3.9"), ("llama.cpp", "b1")])
def test_a_release_older_than_modelled_is_refused_naming_the_flag_and_range(engine, given):
    with pytest.raises(KvgateError) as e:
        resolve_release(engine, given)
    assert "--release" in e.value.message and OLDEST[engine][0] in e.value.message and NEWEST[engine] in e.value.message


def test_fit_refuses_an_old_or_unreadable_release(capsys):
    for bad in ("0.0.1", "latest"):
        code, _, err = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--release", bad], capsys)
        assert code == 2 and "ERROR" in err and "--release" in err


def test_the_oldest_modelled_release_is_taken():
    assert resolve_release("vllm", "0.4").how == "given"  # 0.4 is 0.4.0, not older


@pytest.mark.parametrize("given", ["0.3.36", "latest"])
def test_llamacpp_release_must_be_a_build_number(given):
    with pytest.raises(KvgateError) as e:
        resolve_release("llama.cpp", given)
    assert "--release" in e.value.message and "build number" in e.value.message


def test_installed_llama_cpp_python_version_is_not_read_as_a_build(monkeypatch):
    real = metadata.version

    def fake(dist):
        if dist == "llama_cpp_python":
            return "0.3.36"
        return real(dist)
    monkeypatch.setattr(rel.metadata, "version", fake)
    r = resolve_release("llama.cpp", None)
    assert r.version == parse_version(NEWEST["llama.cpp"]) and r.text == NEWEST["llama.cpp"]
    assert r.note and "0.3.36" in r.note and "not a llama.cpp build number" in r.note


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
