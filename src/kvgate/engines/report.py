"""Text rendering of an imported engine log, its cross-check and its gate."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.engines.pool import EnginePool
from kvgate.units import fmt_gib, fmt_mib


def model_from_log(pool: EnginePool, model_ref: str | None) -> Any:
    """The model for the cross-check: ``model_ref`` (``--model``), else the log's model
    path when it is a local directory or GGUF file; ``None`` when neither is at hand."""
    from kvgate.model import load_model  # noqa: PLC0415

    if model_ref:
        return load_model(model_ref)
    if pool.model and Path(pool.model).expanduser().exists():
        return load_model(str(Path(pool.model).expanduser()))
    return None


def render_pool(pool: EnginePool) -> str:
    """The pool as lines of text, every byte figure with its rounding interval."""
    out = [f"engine      {pool.engine} {pool.version or '(version not logged)'}"
           + (f", commit {pool.flags['commit']}" if pool.flags.get("commit") else ""),
           f"model       {pool.model or 'not logged'}",
           f"KV format   {pool.kv_format or 'not logged'}",
           # llama.cpp has no tensor parallel size (-sm splits layers or rows over devices)
           *([] if pool.engine == "llama.cpp" else [f"TP / PP     {pool.tp or 'not logged'} / {pool.pp or 'not logged'}"]),
           f"max length  {pool.max_model_len:,}" if pool.max_model_len else "max length  not logged"]
    if pool.pool_bytes is not None:
        pb = pool.pool_bytes
        # llama.cpp's 'llama_kv_cache: size' is the whole cache, on whichever devices its layers are
        what = ("KV cache (all layers)" if pool.engine == "llama.cpp" else
                "KV budget (per rank)" if pool.pool_is_budget else "KV pool (per rank)")
        out.append(f"{what:<20} {pb.bytes:,} B = {fmt_gib(pb.bytes)}; logged {pb.text} → "
                   f"{pb.low:,} … {pb.high:,} B")
    if pool.pool_tokens is not None:
        unit = "cells" if pool.engine == "llama.cpp" else "tokens"
        out.append(f"pool size   {pool.pool_tokens:,} {unit}")
    if pool.weights is not None:
        out.append(f"weights     {pool.weights.text} ({pool.weights.low:,} … {pool.weights.high:,} B)")
    for c in pool.parsed.get("caches", []) if pool.engine == "llama.cpp" else []:
        size = [f"{c['cells']:,} cells" if c["cells"] is not None else "cells not logged",
                f"{c['layers']} layers" if c["layers"] is not None else "layers not logged"]
        out.append(f"  {c['kind']:<9} {', '.join(size)}, {c['k_type']}/{c['v_type']}: {fmt_mib(c['size'].bytes, 2)}"
                   + (f" ({c['swa']})" if c["swa"] else ""))
    conc, conc_len = pool.flags.get("max_concurrency"), pool.flags.get("concurrency_len")
    if conc is not None and conc_len is not None:  # vLLM's own line (kv_cache_utils.py)
        out.append(f"Maximum concurrency for {int(conc_len):,} tokens per request: {conc}x")
    flags = {k: v for k, v in pool.flags.items()
             if not isinstance(v, dict) and not (conc_len is not None and k in ("max_concurrency", "concurrency_len"))}
    if flags:
        out.append("flags       " + ", ".join(f"{k}={v}" for k, v in flags.items()))
    out += [f"note        {n}" for n in pool.notes]
    return "\n".join(out)


def render_check(check: dict[str, Any] | None) -> str:
    if check is None:
        return "cross-check: no model (pass --model config.json / model dir / .gguf)"
    return "\n".join([f"cross-check: {check['status']}"] + [f"  {line}" for line in check["lines"]])


def apply_overrides(pool: EnginePool, *, kv_format: str | None = None, tp: int | None = None) -> EnginePool:
    """Fill what the log did not say from the command line, with a note (a value the
    log did say and the command line contradicts is kept from the log and noted)."""
    for key, value, flag in (("kv_format", kv_format, "--kv-format"), ("tp", tp, "--tp")):
        if value is None:
            continue
        have = getattr(pool, key)
        if have is None:
            setattr(pool, key, value)
            pool.notes.append(f"{key} {value} from {flag} (not in the log)")
        elif have != value:
            pool.notes.append(f"{flag} {value} differs from the log's {key} {have}: the cross-check uses {value}")
    return pool


#: the pool's parallel sequences in each engine's own name (``EnginePool.slots``)
SEQS_KEY = {"vllm": "max_num_seqs", "sglang": "max_running_requests", "llama.cpp": "n_seq_max"}


def pool_payload(pool: EnginePool) -> dict[str, Any]:
    """:meth:`EnginePool.to_dict` for ``--json`` in the engine's words: ``slots`` becomes the
    engine's flag (vLLM ``max_num_seqs``, SGLang ``max_running_requests``, llama.cpp
    ``n_seq_max``), left out when the log does not print it."""
    d = pool.to_dict()
    seqs = d.pop("slots", None)
    if seqs is not None:
        d[SEQS_KEY.get(pool.engine, "max_num_seqs")] = seqs
    return d
