"""vLLM's parallel layouts (pipeline parallel, decode context parallel, TP/PP from the
process tags) and logs that hold more than one startup.

Every expected figure is worked by hand in the test from the model's public config and
vLLM's own code (read at 0.12.0 and 0.33.0: ``vllm/distributed/utils.py``
``get_pp_indices``; ``vllm/v1/core/kv_cache_utils.py`` ``get_kv_cache_configs``,
``_report_kv_cache_config``; ``vllm/v1/kv_cache_interface.py``
``FullAttentionSpec.max_memory_usage_bytes``), never copied from kvgate's output.
"""

from __future__ import annotations

import pytest

from kvgate.engines import read_engine_log
from kvgate.engines.startups import StartupError
from test_engine_logs import GIB, interval
from test_engine_logs_more import compose, read

# ------------------------------------------------------------------ several startups / services


def _compose_then_plain() -> str:
    """A compose log of one service (Qwen3.6, fp8 KV, 567,978 tokens) with a plain log of
    another server (Kimi-Linear TP 2, 75,840 tokens, no service column) pasted after it."""
    a = "\n".join(compose("vllm-a-1", read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log"))) + "\n"
    return a + read("vllm_kimi-linear_tp2.log")


def test_service_choice_never_reads_a_pasted_log_under_the_services_name():
    p = read_engine_log("two.log", text=_compose_then_plain(), service="vllm-a-1")
    # service vllm-a-1's own pool: 567,978 tokens, fp8, TP 1 — not Kimi's 75,840 at TP 2
    assert p.pool_tokens == 567_978 and p.kv_format == "fp8" and p.tp == 1 and p.max_model_len == 131_072
    assert p.startup["service"] == "vllm-a-1" and len(p.startup["startups"]) == 1
    assert any("no docker compose service column" in n and "not read as service vllm-a-1" in n for n in p.notes)


def test_a_pasted_log_beside_a_compose_service_is_refused_without_a_choice():
    with pytest.raises(StartupError, match="without a docker compose service column") as e:
        read_engine_log("two.log", text=_compose_then_plain())
    assert "--service" in e.value.hint and "vllm-a-1" in str(e.value)


def test_a_pasted_log_beside_a_compose_service_without_a_pool_is_read_alone():
    text = "\n".join(compose("proxy-1", "GET /health 200\nGET /v1/models 200")) + "\n" + read("vllm_kimi-linear_tp2.log")
    p = read_engine_log("two.log", text=text)
    assert p.pool_tokens == 75_840 and p.tp == 2 and (p.pool_bytes.low, p.pool_bytes.high) == interval("2.30", GIB)
    assert p.startup["service"] is None and any("proxy-1 hold no KV pool" in n for n in p.notes)
