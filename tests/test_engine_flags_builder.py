"""Each engine's flags are built in one place (issue 24: "one builder of engine flags"): its
``build_flags`` (:func:`kvgate.engines.base.make_flags`), which ``kvgate fit``, the what-if
from a log and the recorded fit cases all call; no other source line constructs them."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from kvgate.engines.llamacpp.fit import LlamaCppFlags
from kvgate.engines.llamacpp.fit import build_flags as llamacpp_flags
from kvgate.engines.sglang.flags import build_flags as sglang_flags
from kvgate.engines.vllm.flags import VllmFlags
from kvgate.engines.vllm.flags import build_flags as vllm_flags
from kvgate.errors import KvgateError

SRC = Path(__file__).resolve().parents[1] / "src" / "kvgate"
FLAG_TYPES = {"VllmFlags", "SglangFlags", "LlamaCppFlags"}


def test_no_source_line_builds_an_engines_flags_but_its_builder():
    calls = []
    for path in SRC.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FLAG_TYPES:
                calls.append(f"{path.relative_to(SRC)}:{node.lineno} {node.func.id}(...)")
    assert calls == []


def test_none_is_not_given_and_a_logs_other_keys_are_left_out():
    log = {"gpu_memory_utilization": 0.85, "max_num_seqs": None, "device": "cuda", "kv_cache_dtype": None}
    f = vllm_flags(log, tensor_parallel_size=2)
    assert f == VllmFlags(gpu_memory_utilization=0.85, tensor_parallel_size=2)
    assert f.kv_cache_dtype == "auto"  # None: vLLM's default


def test_a_whatif_changes_only_what_it_gives():
    base = llamacpp_flags({"ctx_size": 8192, "parallel": 4}, ngl_given=False)
    new = llamacpp_flags(base, parallel=8, cache_type_k=None)
    assert new == LlamaCppFlags(ctx_size=8192, parallel=8, ngl_given=False)


def test_the_builder_keeps_the_flags_checks_and_refuses_unknown_names():
    with pytest.raises(KvgateError, match="gpu-memory-utilization"):
        vllm_flags(gpu_memory_utilization=1.5)
    with pytest.raises(TypeError, match="no flag max_model_len"):
        sglang_flags(max_model_len=4096)  # SGLang's spelling is context_length
