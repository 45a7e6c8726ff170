"""Reading engines' live metrics: Prometheus text (``/metrics``) and llama-server ``/slots``.

Names read, per engine (what each means, from the engine's source):

- **llama-server** (``tools/server/server-task.cpp``, ``to_metrics``):
  ``llamacpp:requests_processing``, ``llamacpp:requests_deferred`` (queued: no free
  slot), ``llamacpp:n_tokens_max``; older builds also ``llamacpp:kv_cache_usage_ratio``
  and ``llamacpp:kv_cache_tokens`` (removed by the pinned commit this repo's benchmark
  uses, so KV use comes from ``/slots`` there). ``/slots``
  (``server-context.cpp``, ``server_slot::to_json``): per slot ``n_ctx``,
  ``is_processing``, ``n_prompt_tokens`` (prompt + generated so far: see :func:`slots_usage`).
- **vLLM** (``vllm/v1/metrics/loggers.py``): ``vllm:kv_cache_usage_perc`` (V1; a ratio
  0 … 1 despite its name; older ``vllm:gpu_cache_usage_perc``),
  ``vllm:num_requests_running``, ``vllm:num_requests_waiting``,
  ``vllm:num_preemptions_total`` (older ``vllm:num_preemptions``). Several engines
  (label ``engine``) are summed (counts) or averaged (usage).
- **SGLang** (``srt/metrics/collector.py``): ``sglang:token_usage`` (0 … 1),
  ``sglang:num_used_tokens``, ``sglang:num_running_reqs``, ``sglang:num_queue_reqs``.

:func:`engine_sample` returns one normalized sample: ``kv_usage`` (0 … 1), ``kv_tokens``,
``running``, ``waiting``, ``preemptions`` (a counter), each ``None`` when the server does
not report it — never 0 for "unknown".
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from kvgate.errors import KvgateError

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{[^}]*\})?\s+(\S+)(?:\s+\d+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


class MetricsError(KvgateError):
    """A metrics page kvgate cannot read."""


def parse_prometheus(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Prometheus text exposition → ``{name: [(labels, value), ...]}``.

    Comments (``# HELP`` / ``# TYPE``) and blank lines are skipped; values ``NaN``,
    ``+Inf``, ``-Inf`` are read as floats.

    Raises:
        MetricsError: a sample line that is not ``name{labels} value [timestamp]``
            (naming the line).
    """
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for n, line in enumerate(text.splitlines(), start=1):
        s = line.strip()
        if not s or s.startswith("#"):
            continue
        m = _SAMPLE.match(s)
        if not m:
            raise MetricsError(f"metrics line {n} is not a Prometheus sample: {s[:80]!r}")
        try:
            value = float(m.group(3))
        except ValueError as exc:
            raise MetricsError(f"metrics line {n}: value {m.group(3)!r} is not a number") from exc
        labels = dict(_LABEL.findall(m.group(2) or ""))
        out.setdefault(m.group(1), []).append((labels, value))
    return out


def _sum(metrics: dict, *names: str) -> float | None:
    for name in names:
        if name in metrics:
            vals = [v for _, v in metrics[name] if not math.isnan(v)]
            return sum(vals) if vals else None
    return None


def _mean(metrics: dict, *names: str) -> float | None:
    for name in names:
        if name in metrics:
            vals = [v for _, v in metrics[name] if not math.isnan(v)]
            return sum(vals) / len(vals) if vals else None
    return None


def detect_metrics_engine(metrics: dict) -> str | None:
    """``llama.cpp``, ``vllm`` or ``sglang`` by the names' prefix; ``None`` if none."""
    for prefix, eng in (("llamacpp:", "llama.cpp"), ("vllm:", "vllm"), ("sglang:", "sglang")):
        if any(k.startswith(prefix) for k in metrics):
            return eng
    return None


def slots_usage(slots: Any) -> dict[str, Any]:
    """llama-server ``/slots`` JSON → ``{slots, busy, n_ctx_total, kv_tokens, kv_usage}``.

    KV tokens of a busy slot = ``n_prompt_tokens``: ``server_slot::to_json`` reports
    ``prompt.tokens.size()``, and every sampled token is pushed onto ``prompt.tokens``
    (``server-context.cpp``), so it counts prompt and generated tokens alike (adding
    ``n_decoded`` would count the generated ones twice). An idle slot's cells are counted
    free (llama-server keeps them for prompt reuse; the next task overwrites them).
    ``kv_usage`` = kv_tokens / Σ n_ctx.

    Raises:
        MetricsError: not a list of slot objects with ``n_ctx``.
    """
    if isinstance(slots, (str, bytes)):
        try:
            slots = json.loads(slots)
        except json.JSONDecodeError as exc:
            raise MetricsError(f"/slots is not JSON: {exc}") from exc
    if not isinstance(slots, list) or not all(isinstance(s, dict) and "n_ctx" in s for s in slots):
        raise MetricsError("/slots must be a JSON list of slots with n_ctx",
                           hint="is the server started with --slots (on by default) and is this llama-server?")
    n_ctx = sum(int(s["n_ctx"]) for s in slots)
    busy = [s for s in slots if s.get("is_processing")]
    tokens = sum(int(s.get("n_prompt_tokens") or 0) for s in busy)
    return {"slots": len(slots), "busy": len(busy), "n_ctx_total": n_ctx, "kv_tokens": tokens,
            "kv_usage": tokens / n_ctx if n_ctx else None}


def engine_sample(metrics: dict, *, slots: Any = None, engine: str | None = None) -> dict[str, Any]:
    """One normalized sample (module docstring) from parsed metrics (and ``/slots``)."""
    eng = engine or detect_metrics_engine(metrics)
    s: dict[str, Any] = {"engine": eng, "kv_usage": None, "kv_tokens": None, "running": None, "waiting": None,
                         "preemptions": None}
    if eng == "llama.cpp":
        s["kv_usage"] = _mean(metrics, "llamacpp:kv_cache_usage_ratio")
        s["kv_tokens"] = _sum(metrics, "llamacpp:kv_cache_tokens")
        s["running"] = _sum(metrics, "llamacpp:requests_processing")
        s["waiting"] = _sum(metrics, "llamacpp:requests_deferred")
        if slots is not None:
            u = slots_usage(slots)
            s["slots"] = u
            if s["kv_usage"] is None:
                s["kv_usage"], s["kv_tokens"] = u["kv_usage"], u["kv_tokens"]
    elif eng == "vllm":
        s["kv_usage"] = _mean(metrics, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        s["running"] = _sum(metrics, "vllm:num_requests_running")
        s["waiting"] = _sum(metrics, "vllm:num_requests_waiting")
        s["preemptions"] = _sum(metrics, "vllm:num_preemptions_total", "vllm:num_preemptions")
    elif eng == "sglang":
        s["kv_usage"] = _mean(metrics, "sglang:token_usage")
        s["kv_tokens"] = _sum(metrics, "sglang:num_used_tokens")
        s["running"] = _sum(metrics, "sglang:num_running_reqs")
        s["waiting"] = _sum(metrics, "sglang:num_queue_reqs")
    return s
