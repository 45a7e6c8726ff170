"""``--kv-cache-dtype auto`` (and llama.cpp's unset ``-ctk``) as each engine resolves it,
asked through the Engine interface: vLLM and SGLang cache in the dtype they run the model
in (float32 models downcast each its own way), llama.cpp in f16 whatever the model."""

import pytest

from kvgate.engines.pool import kv_format_name
from kvgate.engines.registry import get_engine
from kvgate.errors import KvgateError
from kvgate.model import ModelSpec
from kvgate.options import EngineOptions


def _model(dtype, model_type="llama"):
    return ModelSpec(name="m", source="t", layers=[], dtype=dtype,
                     config={"model_type": model_type, **({"torch_dtype": dtype} if dtype else {})})


@pytest.mark.parametrize("engine, dtype, model_type, gpu, want", [
    ("vllm", "float32", "llama", "H100", "bf16"),    # _resolve_auto_dtype: downcast to bfloat16 (sm ≥ 8.0)
    ("vllm", "float32", "llama", "T4", "fp16"),      # no bfloat16 before sm 8.0
    ("vllm", None, "llama", "H100", "bf16"),         # an unstated dtype is float32 to vLLM
    ("vllm", "float16", "llama", "H100", "fp16"),
    ("sglang", "float32", "llama", "H100", "fp16"),  # model_config.py: float32 runs in float16
    ("sglang", "float32", "gemma2", "H100", "bf16"),  # ... bfloat16 for Gemma
    ("sglang", "bfloat16", "llama", "H100", "bf16"),
    ("llama.cpp", "float32", "llama", "H100", "fp16"),  # -ctk defaults to f16
    ("llama.cpp", "bfloat16", "llama", "H100", "fp16"),
])
def test_auto_kv_format_of_each_engine(engine, dtype, model_type, gpu, want):
    assert get_engine(engine).auto_kv_format(_model(dtype, model_type), gpu) == want


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_auto_follows_the_dtype_the_model_runs_in(engine):
    """``--dtype float32``: the cache is float32 too; a log's stated dtype is followed."""
    e = get_engine(engine)
    assert e.kv_format("auto", "float32") == "fp32"
    assert e.kv_format(None, "torch.bfloat16") == "bf16"
    assert e.kv_format("auto", None) is None
    assert kv_format_name(engine, "auto", "torch.float16") == "fp16"


def test_llamacpp_cache_type_ignores_the_model_dtype():
    e = get_engine("llama.cpp")
    assert e.kv_format(None, "float32") == "fp16"
    assert e.kv_format("q8_0", "bfloat16") == "q8_0"


def test_each_engine_refuses_the_other_engines_spellings():
    with pytest.raises(KvgateError, match="not one of SGLang's"):
        get_engine("sglang").kv_format("float16", "bfloat16")
    with pytest.raises(KvgateError, match="not one of vLLM's"):
        get_engine("vllm").kv_format("q8_0", "bfloat16")


def test_geometry_auto_asks_the_layouts_engine():
    """kvgate's ``--kv-format auto`` under the llama.cpp layout is llama.cpp's f16; with no
    engine named, the default engine's (vLLM's bf16 for a float32 model)."""
    m = _model("float32")
    assert EngineOptions(kv_format="auto", layout="llama.cpp").formats_for(m) == ("fp16", None)
    assert EngineOptions(kv_format="auto").formats_for(m) == ("bf16", None)


def test_whatif_start_is_auto_for_a_float32_model_that_vllm_ran_in_bf16():
    """A vLLM log of a float32 model whose pool is bf16 (vLLM's auto) starts the what-if at
    ``auto``, not at an explicit ``bfloat16``."""
    from kvgate.engines.pool import EnginePool
    from kvgate.fit.whatif import log_kv_dtype

    pool = EnginePool(engine="vllm", version=None, model="m", kv_format="bf16", pool_bytes=None, pool_tokens=1)
    assert log_kv_dtype(pool, _model("float32")) == "auto"
    pool = EnginePool(engine="vllm", version=None, model="m", kv_format="fp8", pool_bytes=None, pool_tokens=1)
    assert log_kv_dtype(pool, _model("float32")) == "fp8"


@pytest.mark.parametrize("dtype, kv, want", [
    ("float32", "fp32", "fp32"),  # --dtype float32: the model, its KV cache and its Mamba state run in float32
    ("float32", "bf16", "bf16"),  # a float32 config under --dtype auto: vLLM runs it in bf16
    ("bfloat16", "bf16", "bf16"),
])
def test_vllm_mamba_state_auto_is_the_dtype_vllm_runs_the_model_in(dtype, kv, want):
    """vLLM's ``mamba_cache_dtype auto`` is ``model_config.dtype`` (vllm/config/cache.py);
    Qwen3-Next's gated delta net layers (tests/data/configs/qwen3-next-80b-a3b.json)."""
    from dataclasses import replace
    from pathlib import Path

    from kvgate.engines.vllm.pool import VLLM
    from kvgate.geometry import KVGeometry
    from kvgate.model import load_model

    m = load_model(Path(__file__).parent / "data" / "configs" / "qwen3-next-80b-a3b.json")
    g = KVGeometry(replace(m, dtype=dtype), kv, layout=VLLM())
    assert [f.name for f in g.layout.state_formats(g)] == [want, want]
