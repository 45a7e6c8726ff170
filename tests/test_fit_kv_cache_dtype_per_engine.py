"""``fit --kv-cache-dtype`` as each engine reads it (second break-it pass of issue 28):

- llama.cpp has no ``--kv-cache-dtype`` (its KV types are ``-ctk``/``-ctv``): the flag with
  llama.cpp chosen (``--engine llama.cpp``, or llama.cpp's flags given) answered FITS for an
  f16 cache, the flag dropped; it is refused.
"""

from __future__ import annotations

import pytest

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


def test_tp_auto_given_twice_is_said_as_auto_not_minus_one():
    code, doc, _ = run_command([*FIT, "-tp", "auto", "--tp-size", "2"])
    assert code == 2 and "--tensor-parallel-size auto and --tp-size 2" in doc["error"]
