"""``kvgate fit``'s text: the budget table, the lines the engine would log, the verdict
and flip points, in the engine's words (sequences, KV cache pool, blocks, tokens,
concurrency)."""

from __future__ import annotations

from kvgate.fit.answer import FitAnswer
from kvgate.output import table
from kvgate.units import fmt_gib

_VERDICT = {"yes": "FITS", "no": "DOES NOT FIT", "unknown": "CAN'T TELL"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def render_text(a: FitAnswer) -> str:
    """The text answer for a vLLM :class:`FitAnswer`."""
    s = a.settings
    cuda = a.gpu.cuda_total
    out = [f"vLLM {a.release.text} ({a.release.how}) · {a.model} on {a.gpu.name} "
           f"(CUDA total {fmt_gib(cuda.low)}" + ("" if cuda.width == 0 else f" … {fmt_gib(cuda.high)}") + ")"]
    shown = ["gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
             "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "block_size"]
    flags = []
    for k in shown:
        v = s[k]
        if isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        flags.append(f"{_flag(k)} {v}" + (" (default)" if k in s["defaults"] else ""))
    if s["enforce_eager"]:
        flags.append("--enforce-eager")
    if s["kv_cache_memory_bytes"] is not None:
        flags.append(f"--kv-cache-memory-bytes {s['kv_cache_memory_bytes']:,}")
    out.append("flags: " + " ".join(flags))
    out.append(f"engine: {'V1' if s['v1'] else 'V0'}")
    out.append("")
    rows = [[f"memory vLLM takes (total × {s['gpu_memory_utilization']})", fmt_gib(a.budget.low), fmt_gib(a.budget.high), ""]]
    for t in a.terms:
        name = ("− " if t.counted else "  ") + t.name + ("" if t.counted else " (not subtracted)")
        rows.append([name, fmt_gib(t.value.low), fmt_gib(t.value.high), t.source])
    rows.append(["= KV cache pool (per GPU)", fmt_gib(a.kv_pool.low), fmt_gib(a.kv_pool.high), ""])
    out.append(table(rows, header=["term", "low", "high", "source"], align="lrrl"))
    out.append("")
    out.append("vLLM would log (low end … high end):")
    for lo, hi in zip(a.log_lines.get("low", []), a.log_lines.get("high", [])):
        out.append(f"  {lo}" if lo == hi else f"  {lo}   …   {hi.split(': ', 1)[-1]}")
    if a.request_bytes:
        out.append(f"one request of {s['max_model_len']:,} tokens needs {fmt_gib(a.request_bytes)} of KV cache")
    out.append("")
    out.append(f"verdict: {_VERDICT[a.fits]}: {a.reason}")
    if a.engine_error:
        out.append(f"  vLLM would stop with: {a.engine_error}")
    if a.how_to_measure:
        out.append(f"  {a.how_to_measure}")
    f = a.flip_points
    out.append("")
    out.append("flip points (the other flags held):")
    ml = f.get("max_model_len", {})
    out.append(f"  --max-model-len: fits up to {_n(ml.get('sure'))} for sure, {_n(ml.get('possible'))} at best")
    ms = f.get("max_num_seqs_at_max_model_len", {})
    out.append(f"  --max-num-seqs: {_n(ms.get('sure'))} … {_n(ms.get('possible'))} sequences of {s['max_model_len']:,} "
               f"tokens run at once; more wait in the queue (shorter requests share the pool)")
    if "gpu_memory_utilization" in f:
        u = f["gpu_memory_utilization"]
        out.append(f"  --gpu-memory-utilization: {_u(u.get('sure'))} for sure, {_u(u.get('possible'))} at best, "
                   f"for one request of {s['max_model_len']:,} tokens")
    for n in a.notes:
        out.append(f"note: {n}")
    return "\n".join(out)


def _n(v: int | None) -> str:
    return "none" if v is None else f"{v:,}"


def _u(v: float | None) -> str:
    return "more than 1.0 (not possible)" if v is None else f"{v:.2f}"
