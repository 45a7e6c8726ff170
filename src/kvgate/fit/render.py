"""``kvgate fit``'s text: the budget table, the lines the engine would log, the verdict
and flip points, in the engine's words (sequences, KV cache pool, blocks, tokens,
concurrency)."""

from __future__ import annotations

import re
from typing import Any

from kvgate.fit.answer import FitAnswer
from kvgate.output import WIDTH, pack, table, wrap_line
from kvgate.units import fmt_gib, fmt_mib_range

_VERDICT = {"yes": "FITS", "no": "DOES NOT FIT", "unknown": "CAN'T TELL"}


def _flag(name: str) -> str:
    return "--" + name.replace("_", "-")


def render_text(a: FitAnswer, *, sources: bool = False) -> str:
    """The text answer for a :class:`FitAnswer` of any engine (the engine's own page:
    :meth:`kvgate.engines.base.Engine.render_fit`), in :data:`WIDTH` columns; ``sources``
    (``-v``/``--sources``) adds where each term comes from beneath its row."""
    from kvgate.engines.registry import get_engine  # noqa: PLC0415

    text: str = get_engine(a.engine).render_fit(a, sources=sources)
    return text


#: the line under a table whose terms' sources ``-v`` shows
SOURCES_HINT = "(where each term comes from: add -v)"


def terms_table(rows: list[tuple[list[str], str, bool]], header: list[str], align: str, sources: bool) -> str:
    """A table of terms and their low and high ends, each row with a note: ``(cells, note,
    is_source)``. A source (where the figure comes from) is shown only with ``sources``,
    beneath its row; another note (what a sum row is: "of 23.38 GiB", "what SGLang
    budgets") follows its row on the line when it fits :data:`WIDTH`, else beneath."""
    lines = table([cells for cells, _, _ in rows], header=header, align=align).split("\n")
    out = lines[:2]
    hidden = False
    for ln, (_, note, is_source) in zip(lines[2:], rows):
        out.append(ln)
        if not note:
            continue
        if is_source and not sources:
            hidden = True
        elif not is_source and len(ln) + 2 + len(note) <= WIDTH:
            out[-1] = f"{ln}  {note}"
        else:
            out += wrap_line("    " + note, indent=4)
    return "\n".join(out + ([SOURCES_HINT] if hidden else []))


def render_llamacpp(a: FitAnswer, *, sources: bool = False) -> str:
    """The text answer for a llama.cpp :class:`FitAnswer`."""
    s = a.settings
    cuda = a.gpu.cuda_total
    out = [_header(a, a.engine)]
    out.append(pack("flags: ", [f"-c {s['ctx_size']}", f"-np {s['parallel']}", f"-ctk {s['cache_type_k']}",
                                f"-ctv {s['cache_type_v']}", f"-ngl {s['n_gpu_layers']}", f"-fa {s['flash_attn']}",
                                f"-ub {s['ubatch_size']}", f"-b {s['batch_size']}"] + (["-kvu"] if s["kv_unified"] else [])))
    out.append("")
    rows = [([t.name, fmt_gib(t.value.low), fmt_gib(t.value.high)], plain_source(t.source), True) for t in a.terms]
    used_lo = sum(t.value.low for t in a.terms)
    used_hi = sum(t.value.high for t in a.terms)
    rows.append((["= on the GPU", fmt_gib(used_lo), fmt_gib(used_hi)], f"of {fmt_gib(cuda.low)}", False))
    out.append(terms_table(rows, ["buffer", "low", "high"], "lrr", sources))
    out.append("")
    out.append("llama.cpp would log:")
    out += [f"  {ln}" for ln in a.log_lines.get("low", [])]
    out.append("")
    f = a.flip_points
    flips: list[str] = []
    c = f["ctx_size_all_layers_on_gpu"]
    share = f"(-np {s['parallel']} " + ("sequence has it)" if s["parallel"] == 1 else "sequences share it)")
    if c["possible"] is None:
        flips.append(f"  -c: no -c fits with every layer on the GPU {share}")
    elif c["sure"] is None:
        flips.append(f"  -c: with every layer on the GPU, none for sure, up to {_n(c['possible'])} at best {share}")
    elif c["sure"] == c["possible"]:
        capped = c["sure"] == f.get("ctx_size_cap") and s["ctx_size"] > c["sure"]
        flips.append(f"  -c: with every layer on the GPU, up to {_n(c['sure'])} {share}" + (
            f"; the search stops at n_ctx_train, the given {_n(s['ctx_size'])} is answered above" if capped else ""))
    else:
        flips.append(f"  -c: with every layer on the GPU, up to {_n(c['sure'])} for sure, {_n(c['possible'])} at best "
                     f"{share}")
    flips.append(_ngl_flip(s["ctx_size"], f))
    return "\n".join(out + _closing(a, a.engine, flips))


def _ngl_flip(ctx: int, f: dict[str, Any]) -> str:
    """The ``-ngl`` flip point: the ``-ngl`` to pass at ``-c`` (the engine's
    ``n_gpu_layers_at_ctx_size``, the figure the verdict names when ``--fit`` moves layers)
    and the layers it keeps on the CPU."""
    ngl, cpu = f.get("n_gpu_layers_at_ctx_size", {}), f["layers_on_cpu_at_ctx_size"]
    out = f.get("output_on_gpu_at_ctx_size", {})
    sure, best = (_ngl(cpu[k], f, ngl.get(k), out.get(k)) for k in ("sure", "possible"))
    line = f"  -ngl: at -c {ctx:,}, " + (sure if sure == best else f"{sure} for sure; {best} at best")
    margin = f.get("n_gpu_layers_margin_bytes") or 0
    if margin:
        line += f" (what --fit sets: it leaves {margin // 2**20} MiB free)"
    return line


def _terms_table(a: FitAnswer, budget_label: str, sources: bool = False) -> str:
    rows = [([budget_label, fmt_gib(a.budget.low), fmt_gib(a.budget.high)], "", False)]
    for t in a.terms:
        name = ("− " if t.counted else "  ") + t.name + ("" if t.counted else " (not subtracted)")
        rows.append(([name, fmt_gib(t.value.low), fmt_gib(t.value.high)], plain_source(t.source), True))
    rows.append((["= KV cache pool (per GPU)", _pool_end(a.kv_pool.low), _pool_end(a.kv_pool.high)],
                 "what SGLang budgets" if a.kv_stored is not None else "", False))
    if a.kv_stored is not None:
        rows.append((["  KV cache pool as stored (per GPU)", _pool_end(a.kv_stored.low), _pool_end(a.kv_stored.high)],
                     f"{a.kv_stored_label or ''}: the log's KV size", False))
    return terms_table(rows, ["term", "low", "high"], "lrr", sources)


_PLAIN = (
    (re.compile(r"\s*\((?:[^()]*\bb\+\d+)[^()]*\)"), ""),  # the sampler's buffer counts (b+12 …): JSON only
    (re.compile(r"\b_dummy_sampler_run\b"), "sampler warm-up"),
    (re.compile(r"×\[(\d+\.\d+), (\d+\.\d+)\]"),
     lambda m: f"× {round(float(m[1]) * 100)}–{round(float(m[2]) * 100)}%"),
    (re.compile(r"\(ESTIMATE\)"), "(an estimate)"),
    (re.compile(r"ESTIMATE"), "an estimate"),
    (re.compile(r"\(file\)"), "(the file's bytes)"),
)


def plain_source(src: str) -> str:
    """A term's source as the table says it to a user: the sampler's buffer counts dropped
    (``(b+12) … (b+36; b+49 for 2-127 rows)``: the number of vocab-wide fp32 buffers of
    ``vllm_budget.sampler_rows``, kept in the ``--json`` source), ``_dummy_sampler_run`` as
    "sampler warm-up", ``×[0.85, 1.15]`` as ``× 85–115%``, ``ESTIMATE`` as "an estimate"."""
    for pat, rep in _PLAIN:
        src = pat.sub(rep, src)
    return src


def _pool_end(v: int) -> str:
    """One end of the KV cache pool in GiB, or "none" where the non-KV terms take it all (v <= 0 bytes).

    The engine never has a negative pool: vLLM stops with "No available memory for the cache blocks"
    (vllm/v1/core/kv_cache_utils.py check_enough_kv_cache_memory), so the table says "none" as the log lines do.
    The JSON keeps the exact (possibly negative) int.
    """
    return fmt_gib(v) if v > 0 else "none"


def _header(a: FitAnswer, engine: str) -> str:
    """``vLLM 0.11.0 (given) · MODEL on GPU (CUDA total X GiB … Y GiB)``."""
    cuda = a.gpu.cuda_total
    head = (f"{engine} {a.release.text} ({a.release.how}) · {a.model} on {a.gpu.name} (CUDA total {fmt_gib(cuda.low)}"
            + ("" if fmt_gib(cuda.low) == fmt_gib(cuda.high) else f" … {fmt_gib(cuda.high)}") + ")")
    if a.gpu.reserve is None:
        return head  # measured (a point), from a log or under WSL: no reserve band to explain
    band, src = a.gpu.reserve
    return (head + f"\nCUDA total = the card's total {fmt_gib(a.gpu.nvml_total_bytes)} less the driver's reserve, "
            f"{fmt_mib_range(band.low, band.high)} ({src})")


def _closing(a: FitAnswer, engine: str, flips: list[str]) -> list[str]:
    """The verdict, the flip points (``flips``, in the engine's flags) and the notes."""
    return (_verdict_lines(a, engine) + ["", "flip points (the other flags held):"] + flips
            + [f"note: {n}" for n in a.notes])


def _verdict_lines(a: FitAnswer, engine: str) -> list[str]:
    out = [f"verdict: {_VERDICT[a.fits]}: {a.reason}"]
    if a.engine_error:
        out.append(f"  {engine} would stop with: {a.engine_error}")
    if a.how_to_measure:
        out.append(f"  {a.how_to_measure}")
    return out


def render_sglang(a: FitAnswer, *, sources: bool = False) -> str:
    """The text answer for an SGLang :class:`FitAnswer`."""
    s = a.settings
    out = [_header(a, "SGLang")]
    flags = [f"{_flag(k)} {s[k]}" + (" (default)" if k in s["defaults"] else "")
             for k in ("mem_fraction_static", "context_length", "tp_size", "kv_cache_dtype", "page_size",
                       "swa_full_tokens_ratio") if s.get(k) is not None]
    out.append(pack("flags: ", flags))
    out.append("")
    out.append(_terms_table(a, f"memory SGLang takes ({s['mem_fraction_static']} × free at start)", sources))
    out.append("")
    out.append("SGLang would log (low end … high end):")
    for lo, hi in zip(a.log_lines.get("low", []), a.log_lines.get("high", [])):
        out.append(f"  {lo}" if lo == hi else f"  {lo}\n    …  {hi}")
    if a.kv_heads is not None:
        out.append(a.kv_heads.sentence("--tp-size"))
    out.append("")
    f = a.flip_points
    flips: list[str] = []
    cl = f["context_length"]
    mf = f["mem_fraction_static"]
    if cl["possible"] is None:
        flips.append("  --context-length: no --context-length fits: the weights leave no KV cache pool; "
                     + (f"needs --mem-fraction-static ≥ {_u(mf['possible'], 3)} at best, or a larger card"
                        if mf["possible"] is not None else "needs a larger card (or more --tp-size, or smaller weights)"))
    elif cl["sure"] is None:
        flips.append(f"  --context-length: none fits for sure; one request fits up to {_n(cl['possible'])} tokens at best")
    elif cl["sure"] == cl["possible"]:  # the interval closed: one number, not "N for sure, N at best"
        flips.append(f"  --context-length: one request fits up to {_n(cl['sure'])} tokens")
    else:
        flips.append(f"  --context-length: one request fits up to {_n(cl['sure'])} tokens for sure, "
                     f"{_n(cl['possible'])} at best")
    mr = f["max_running_requests_at_context_length"]
    if not mr["possible"]:
        flips.append(f"  --max-running-requests: not one request of {s['context_length']:,} tokens fits in the pool")
    else:
        n = _n(mr["sure"]) if mr["sure"] == mr["possible"] else f"{_n(mr['sure'])} … {_n(mr['possible'])}"
        flips.append(f"  --max-running-requests: {n} requests of "
                     f"{s['context_length']:,} tokens fit at once; more wait in the queue")
    if mf["sure"] is None and mf["possible"] is None:
        flips.append(f"  --mem-fraction-static: none up to 1.0 holds one request of {s['context_length']:,} tokens "
                     "on this card")
    else:
        flips.append(f"  --mem-fraction-static: {_u(mf['sure'], 3)} for sure, {_u(mf['possible'], 3)} at best, for one "
                     f"request of {s['context_length']:,} tokens")
    return "\n".join(out + _closing(a, "SGLang", flips))


def render_vllm(a: FitAnswer, *, sources: bool = False) -> str:
    """The text answer for a vLLM :class:`FitAnswer`."""
    s = a.settings
    out = [_header(a, "vLLM")]
    shown = ["gpu_memory_utilization", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
             "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "block_size"]
    flags = []
    for k in shown:
        v = s[k]
        if isinstance(v, int) and not isinstance(v, bool):
            v = f"{v:,}"
        flags.append(f"{_flag(k)} {v}" + (" (default)" if k in s["defaults"] else ""))
    if s.get("decode_context_parallel_size", 1) != 1:
        flags.append(f"--decode-context-parallel-size {s['decode_context_parallel_size']}")
    if s["enforce_eager"]:
        flags.append("--enforce-eager")
    if s["kv_cache_memory_bytes"] is not None:
        flags.append(f"--kv-cache-memory-bytes {s['kv_cache_memory_bytes']:,}")
    out.append(pack("flags: ", flags))
    out.append(f"engine: {'V1' if s['v1'] else 'V0'}")
    out.append("")
    out.append(_terms_table(a, f"memory vLLM takes (total × {s['gpu_memory_utilization']})", sources))
    out.append("")
    out.append("vLLM would log (low end … high end):")
    for lo, hi in zip(a.log_lines.get("low", []), a.log_lines.get("high", [])):
        out.append(f"  {lo}" if lo == hi else f"  {lo}   …   {hi.split(': ', 1)[-1]}")
    ranks = s["tensor_parallel_size"] * s["pipeline_parallel_size"]
    if a.request_bytes:
        share = " per GPU" + ("" if a.kv_heads is not None else f" (each of {ranks} GPUs holds its share)")
        out.append(f"one request of {s['max_model_len']:,} tokens needs {fmt_gib(a.request_bytes)} of KV cache"
                   + (share if ranks > 1 else ""))
    if a.kv_heads is not None:
        out.append(a.kv_heads.sentence("-tp"))
    out.append("")
    return "\n".join(out + _closing(a, "vLLM", _vllm_flips(a)))


def _vllm_flips(a: FitAnswer) -> list[str]:
    """vLLM's flip points in words: no negative pools, no "none" where a sentence says why."""
    s, f = a.settings, a.flip_points
    L = s["max_model_len"]
    flips: list[str] = []
    ml = f.get("max_model_len", {})
    anyp = f.get("gpu_memory_utilization_for_any_pool", {})
    if ml.get("possible") is None:
        if anyp.get("sure") is not None:
            how = f"needs --gpu-memory-utilization ≥ {_u(anyp['sure'])} or a larger card"
        elif anyp.get("possible") is not None:
            how = f"needs --gpu-memory-utilization ≥ {_u(anyp['possible'])} at best, or a larger card"
        else:
            how = "needs a larger card (or more -tp, or smaller weights)"
        flips.append("  --max-model-len: no --max-model-len fits: the weights and the activation peak leave no KV cache "
                     "pool; " + how)
    elif ml.get("sure") is None:
        flips.append(f"  --max-model-len: none fits for sure (at the low end of the pool no request fits); "
                     f"up to {_n(ml.get('possible'))} at best")
    elif ml.get("sure") == ml.get("possible"):
        flips.append(f"  --max-model-len: fits up to {_n(ml.get('sure'))}")
    else:
        flips.append(f"  --max-model-len: fits up to {_n(ml.get('sure'))} for sure, {_n(ml.get('possible'))} at best")
    ms = f.get("max_num_seqs_at_max_model_len", {})
    lo, hi = ms.get("sure"), ms.get("possible")
    cap = s.get("max_num_seqs")
    if ms.get("refused_above"):
        flips.append(f"  --max-num-seqs: none: vLLM refuses --max-model-len {L:,} (above max_position_embeddings "
                     f"{ms['refused_above']:,}) before any sequence runs")
    elif not hi:
        flips.append(f"  --max-num-seqs: not one sequence of {L:,} tokens fits in the pool")
    elif isinstance(cap, int) and lo is not None and cap < lo:
        flips.append(f"  --max-num-seqs: the pool would hold {_n(lo)} … {_n(hi)} sequences of {L:,} tokens, but "
                     f"--max-num-seqs {cap} caps it: {cap} run at once, more wait in the queue")
    else:
        many = (f"{_n(hi)}" if lo == hi else f"up to {_n(hi)}" if not lo else f"{_n(lo)} … {_n(hi)}")
        if not lo and lo != hi:
            many = f"none for sure, up to {_n(hi)}"
        one = "sequence" if hi == 1 else "sequences"
        flips.append(f"  --max-num-seqs: {many} {one} of {L:,} tokens run at once; more wait in the "
                     f"queue (shorter requests share the pool)")
    if "gpu_memory_utilization" in f:
        u = f["gpu_memory_utilization"]
        if u.get("sure") is None and u.get("possible") is None:
            flips.append(f"  --gpu-memory-utilization: none up to 1.0 holds one request of {L:,} tokens on this card")
        elif u.get("sure") == u.get("possible"):
            flips.append(f"  --gpu-memory-utilization: {_u(u.get('sure'))}, for one request of {L:,} tokens")
        else:
            flips.append(f"  --gpu-memory-utilization: {_u(u.get('sure'))} for sure, {_u(u.get('possible'))} at best, "
                         f"for one request of {L:,} tokens")
    return flips


def _ngl(cpu: int | None, f: dict[str, Any], ngl: int | None = None, output: bool | None = None) -> str:
    """``k layer(s) on the CPU (pass -ngl N)``: ``N`` the engine's figure (``ngl``; without
    it, ``layers − k``, or all layers and the output: ``layers + 1``)."""
    n = f.get("n_layers")
    if cpu is None:
        return "not even with every layer on the CPU"
    if n is None:
        return f"{cpu} layer(s) on the CPU"
    if ngl is None:
        extra = 1 if f.get("ngl_counts_output", True) else 0  # -ngl counts the output layer (i_gpu_start)
        ngl, output = (n + 1, True) if cpu == 0 else (n - cpu + extra, bool(extra))
    if cpu == 0 and output is not False:
        return f"every layer on the GPU (-ngl {ngl} or more: the layers and the output)"
    if cpu == 0:
        return f"every layer on the GPU, the output on the CPU (pass -ngl {ngl})"
    return f"{cpu} layer(s) on the CPU (pass -ngl {ngl})"


def _n(v: int | None) -> str:
    return "none" if v is None else f"{v:,}"


def _u(v: float | None, places: int = 2) -> str:
    return "more than 1.0 (not possible)" if v is None else f"{v:.{places}f}"
