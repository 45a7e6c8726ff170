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

import math
import re
from typing import Any

from kvgate.errors import KvgateError
from kvgate.guarded import loads_json, parse_int

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
            slots = loads_json(slots, what="/slots")
        except KvgateError as exc:
            raise MetricsError(f"/slots is not JSON kvgate reads: {exc.message}") from exc
    if not isinstance(slots, list) or not all(isinstance(s, dict) and "n_ctx" in s for s in slots):
        raise MetricsError("/slots must be a JSON list of slots with n_ctx",
                           hint="is the server started with --slots (on by default) and is this llama-server?")
    try:
        n_ctx = sum(parse_int(s["n_ctx"], what="/slots n_ctx", minimum=0) for s in slots)
        busy = [s for s in slots if s.get("is_processing") is True]
        tokens = sum(parse_int(s.get("n_prompt_tokens") or 0, what="/slots n_prompt_tokens", minimum=0)
                     for s in busy)
    except KvgateError as exc:
        raise MetricsError(exc.message) from exc
    return {"slots": len(slots), "busy": len(busy), "n_ctx_total": n_ctx, "kv_tokens": tokens,
            "kv_usage": tokens / n_ctx if n_ctx else None}


#: The range of each normalized figure (:func:`engine_sample`): a usage is a ratio 0 … 1
#: (every engine's own definition: used / total of its pool); counts and counters are ≥ 0.
#: A value outside its range is dropped (``None``) and flagged: a server reporting a
#: usage of 2.5 or ``running -5`` is not believed.
RANGES: dict[str, tuple[float, float]] = {
    "kv_usage": (0.0, 1.0), "kv_tokens": (0.0, math.inf), "running": (0.0, math.inf),
    "waiting": (0.0, math.inf), "preemptions": (0.0, math.inf),
}


def check_ranges(s: dict[str, Any], names: dict[str, str]) -> dict[str, Any]:
    """Drop (to ``None``) and flag the values of sample ``s`` outside :data:`RANGES` or not
    finite; ``names``: the metric each value came from, for the flag text."""
    flags = s.setdefault("flags", [])
    for key, (lo, hi) in RANGES.items():
        v = s.get(key)
        if v is None:
            continue
        if not (math.isfinite(v) and lo <= v <= hi):
            shown = f"{v:g}"
            rng = f"{lo:g} … {hi:g}" if math.isfinite(hi) else f"≥ {lo:g}"
            flags.append(f"{names.get(key, key)} {shown} is outside {rng}: not used")
            s[key] = None
    return s


def engine_sample(metrics: dict, *, slots: Any = None, engine: str | None = None) -> dict[str, Any]:
    """One normalized sample (module docstring) from parsed metrics (and ``/slots``);
    values outside their range are ``None`` and named in ``flags`` (:func:`check_ranges`)."""
    eng = engine or detect_metrics_engine(metrics)
    s: dict[str, Any] = {"engine": eng, "kv_usage": None, "kv_tokens": None, "running": None, "waiting": None,
                         "preemptions": None}
    names: dict[str, str] = {}

    def pick(key: str, fn, *candidates: str) -> None:
        for name in candidates:
            if name in metrics:
                s[key] = fn(metrics, name)
                names[key] = name
                return

    if eng == "llama.cpp":
        pick("kv_usage", _mean, "llamacpp:kv_cache_usage_ratio")
        pick("kv_tokens", _sum, "llamacpp:kv_cache_tokens")
        pick("running", _sum, "llamacpp:requests_processing")
        pick("waiting", _sum, "llamacpp:requests_deferred")
        if slots is not None:
            u = slots_usage(slots)
            s["slots"] = u
            if s["kv_usage"] is None:
                s["kv_usage"], s["kv_tokens"] = u["kv_usage"], u["kv_tokens"]
                names["kv_usage"] = names["kv_tokens"] = "/slots"
    elif eng == "vllm":
        pick("kv_usage", _mean, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
        pick("running", _sum, "vllm:num_requests_running")
        pick("waiting", _sum, "vllm:num_requests_waiting")
        pick("preemptions", _sum, "vllm:num_preemptions_total", "vllm:num_preemptions")
    elif eng == "sglang":
        pick("kv_usage", _mean, "sglang:token_usage")
        pick("kv_tokens", _sum, "sglang:num_used_tokens")
        pick("running", _sum, "sglang:num_running_reqs")
        pick("waiting", _sum, "sglang:num_queue_reqs")
    return check_ranges(s, names)
