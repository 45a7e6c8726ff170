"""vLLM's CUDA graph pool in the KV budget: subtracted from 0.20 (vllm/envs.py
VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to "0" at 0.19.x, "1" at 0.20.0), and for a
model with linear-attention or Mamba layers up to the 3.65 GiB vLLM estimated for Qwen3.5-9B."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from kvgate.engines.vllm.budget import BANDS, HYBRID_GRAPH_HIGH

CONFIGS = Path(__file__).parent / "data" / "configs"
LOG = Path(__file__).parent / "data" / "fit_logs" / "vllm_0.19.0_qwen3.5-9b_rtx3090_tp4_1.log"


def _graph_term(*argv: str) -> dict[str, object]:
    r = subprocess.run([sys.executable, "-m", "kvgate", "fit", *argv, "--json"], capture_output=True, text=True)
    assert r.returncode in (0, 1, 4), r.stderr
    return next(t for t in json.loads(r.stdout)["terms"] if t["name"] == "CUDA graph pool")


def test_the_graph_estimate_is_subtracted_from_0_20() -> None:
    args = ("llama-3.1-8b", "--gpu", "H100", "--max-model-len", "8192")
    assert _graph_term(*args, "--release", "0.19.1")["subtracted_from_kv_pool"] is False
    assert _graph_term(*args, "--release", "0.20.0")["subtracted_from_kv_pool"] is True
    assert _graph_term(*args, "--release", "0.20.0", "--enforce-eager")["high"] == 0


def test_a_hybrid_model_takes_the_estimate_a_hybrid_printed() -> None:
    assert "Estimated CUDA graph memory: 3.65 GiB total" in LOG.read_text(encoding="utf-8")
    assert 3.655 * 2**30 <= HYBRID_GRAPH_HIGH < 3.655 * 2**30 + 2**20
    hybrid = _graph_term(str(CONFIGS / "qwen3.5-9b.json"), "--gpu", "H100", "--max-model-len", "8192",
                         "--release", "0.24.0")
    assert hybrid["high"] == HYBRID_GRAPH_HIGH and hybrid["low"] == BANDS.cuda_graph_021.low
    plain = _graph_term("llama-3.1-8b", "--gpu", "H100", "--max-model-len", "8192", "--release", "0.24.0")
    assert plain["high"] == BANDS.cuda_graph_021.high < HYBRID_GRAPH_HIGH
