"""``fit --kv-cache-dtype`` as each engine reads it (second break-it pass of issue 28):

- llama.cpp has no ``--kv-cache-dtype`` (its KV types are ``-ctk``/``-ctv``): the flag with
  llama.cpp chosen (``--engine llama.cpp``, or llama.cpp's flags given) answered FITS for an
  f16 cache, the flag dropped; it is refused.
- SGLang's parser takes ``auto``, ``fp8_e5m2``, ``fp8_e4m3``, ``bf16``, ``bfloat16``,
  ``fp4_e2m1`` (``python/sglang/srt/server_args.py``), never vLLM's plain ``fp8``: an answer
  for ``--engine sglang --kv-cache-dtype fp8`` was one for a server that never starts.
"""

from __future__ import annotations

import pytest

from kvgate.engines.sglang.flags import KV_CACHE_DTYPE_CHOICES, check_kv_cache_dtype_flag
from kvgate.errors import KvgateError
from test_properties_commands import run_command

FIT = ["fit", "llama-3.1-8b", "--gpu", "H100"]


@pytest.mark.parametrize("flags", [["--engine", "llama.cpp"], ["-c", "4096"], ["-ctk", "q8_0", "-np", "2"]])
@pytest.mark.parametrize("dtype", ["fp8", "fp8_e5m2", "bf16"])
def test_llamacpp_refuses_kv_cache_dtype_it_does_not_read(flags, dtype):
    code, doc, _ = run_command([*FIT, *flags, "--kv-cache-dtype", dtype])
    assert code == 2 and "--kv-cache-dtype" in doc["error"] and "-ctk" in doc["hint"], doc


def test_llamacpp_still_answers_with_its_own_kv_types_and_the_flag_left_at_auto():
    code, doc, _ = run_command([*FIT, "--engine", "llama.cpp", "-ctk", "q8_0", "-ctv", "q8_0", "-c", "4096"])
    assert code == 0 and doc["settings"]["cache_type_k"] == "q8_0"
    code, _, _ = run_command([*FIT, "--engine", "llama.cpp", "--kv-cache-dtype", "auto", "-c", "4096"])
    assert code == 0


@pytest.mark.parametrize("dtype", ["fp8", "FP8_E4M3", "float8"])
def test_sglang_refuses_a_kv_cache_dtype_its_parser_refuses(dtype):
    code, doc, _ = run_command([*FIT, "--engine", "sglang", "--kv-cache-dtype", dtype])
    assert code == 2 and "SGLang" in doc["error"], doc


@pytest.mark.parametrize("dtype", ["fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "auto"])
def test_sglang_answers_for_its_own_kv_cache_dtypes(dtype):
    code, doc, _ = run_command([*FIT, "--engine", "sglang", "--kv-cache-dtype", dtype, "--context-length", "8192"])
    assert code == 0 and doc["settings"]["kv_cache_dtype"] == dtype


def test_sglang_fp8_refusal_names_the_spelling_to_use():
    with pytest.raises(KvgateError) as exc:
        check_kv_cache_dtype_flag("fp8")
    assert "fp8_e4m3" in (exc.value.hint or "") and "fp8" not in KV_CACHE_DTYPE_CHOICES


def test_tp_auto_given_twice_is_said_as_auto_not_minus_one():
    code, doc, _ = run_command([*FIT, "-tp", "auto", "--tp-size", "2"])
    assert code == 2 and "--tensor-parallel-size auto and --tp-size 2" in doc["error"]
