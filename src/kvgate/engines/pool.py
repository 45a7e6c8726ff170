"""An engine's logged KV pool as a kvgate measurement with its basis.

:func:`read_engine_log` detects the engine (vLLM, SGLang, llama.cpp), reads the log and
returns an :class:`EnginePool`: the pool the engine built, per tensor-parallel rank, in
int bytes with the interval its printed rounding leaves (``pool_bytes``), its size in
tokens / cells, the KV format in kvgate's names, and the engine's flags. What a pool
means per engine:

- **vLLM**: the budget is "Available KV cache memory" (the minimum over ranks); the pool
  is ``num_blocks`` whole blocks of it, and its tokens are the "GPU KV cache size" line
  (or ``# GPU blocks`` × block size on early V1).
- **SGLang**: the pool is K size + V size (or the MLA "KV size"), of ``#tokens`` + one
  padding page per layer (``MHATokenToKVPool``); a hybrid sliding-window pool
  (``SWAKVPool``) is its SWA pool's and its full pool's bytes, its size the full pool's tokens.
- **llama.cpp**: the pool is the sum of every ``llama_kv_cache`` line (iSWA has two),
  plus the recurrent ``R``/``S`` state; its cells are the non-SWA cache's. A log cut before
  its cache line has no pool: "not available", never its ``n_ctx`` (the context asked for).

A log that holds several startups (a restart, two logs concatenated) or ``docker compose``
services is read one startup of one service (:mod:`kvgate.engines.startups`), never their
sum; ``read_engine_log(startup=N, service=NAME)`` chooses. vLLM's "GPU KV cache size"
under decode context parallelism counts the whole context-parallel group: the pool's tokens
are one rank's (the logged count / (pcp × dcp)).

:meth:`EnginePool.measurement` turns the pool into a :class:`kvgate.measure.Measurement`
of the domain ``kv-pool`` (T = pool bytes, P = 0: the pool is empty at start), so the
gate's machinery (verdicts, boundaries, records) applies to it unchanged.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvgate.engines.logtext import Logged, logical_lines
from kvgate.engines.registry import ENGINES, detect_from_log, get_engine
from kvgate.engines.startups import engines_with_pools, select_startup
from kvgate.engines.vllm.pool import DEFAULT_BLOCK_SIZE
from kvgate.errors import KvgateError
from kvgate.geometry.formats import FormatError, get_format
from kvgate.guarded import MAX_LOG_BYTES, read_regular


class EngineLogError(KvgateError):
    """A log kvgate cannot read as an engine startup log."""


@dataclass
class EnginePool:
    """The KV pool one engine logged (per tensor-parallel rank).

    Attributes:
        engine: ``vllm``, ``sglang`` or ``llama.cpp``.
        version: the engine release / build as logged, or ``None``.
        model: the model path or name as logged, or ``None``.
        kv_format: kvgate's name of the KV format the engine used (``bf16``, ``fp8``,
            ``q8_0`` …), or ``None`` when the log does not say.
        pool_bytes: the pool in bytes (:class:`Logged`: value and rounding interval), or
            ``None``; ``pool_is_budget``: True when it is vLLM's budget (the pool is the
            whole blocks that fit in it).
        pool_tokens: tokens (vLLM, SGLang) or cells (llama.cpp) the pool holds.
        tp, pp: tensor / pipeline parallel sizes (``None`` = not logged); ``dcp``: vLLM's
            decode context parallel size (``None`` = not logged); ``parallel``: each one's
            ``{"value", "source"}`` (config line, non-default args, launch command, or the
            process tags ``Worker_TP3``, a lower bound).
        max_model_len: the engine's longest sequence (vLLM ``max_model_len``, SGLang
            ``context_len``, llama.cpp ``n_ctx_seq``).
        slots: parallel sequences the engine was set up for (llama.cpp ``n_seq_max``,
            vLLM ``max_num_seqs``, SGLang ``max_running_requests``), or ``None``.
        weights: model weights on one rank as logged, or ``None``.
        flags: the engine options read (block size, prefix caching, speculative config,
            flash attention, unified KV, gpu_memory_utilization, mem_fraction_static …).
        parsed: everything the engine's parser read.
        startup: which startup / service of the log was read
            (:func:`kvgate.engines.startups.select_startup`'s info).
    """

    engine: str
    version: str | None = None
    model: str | None = None
    kv_format: str | None = None
    pool_bytes: Logged | None = None
    pool_is_budget: bool = False
    pool_tokens: int | None = None
    tp: int | None = None
    pp: int | None = None
    max_model_len: int | None = None
    slots: int | None = None
    weights: Logged | None = None
    flags: dict[str, Any] = field(default_factory=dict)
    parsed: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    source: str | None = None
    dcp: int | None = None
    parallel: dict[str, Any] = field(default_factory=dict)
    startup: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict (``Logged`` values as ``{bytes, low, high, text}``)."""
        return {
            "engine": self.engine, "version": self.version, "model": self.model, "kv_format": self.kv_format,
            "pool_bytes": self.pool_bytes.to_dict() if self.pool_bytes else None,
            "pool_is_budget": self.pool_is_budget, "pool_tokens": self.pool_tokens, "tp": self.tp, "pp": self.pp,
            "max_model_len": self.max_model_len, "slots": self.slots,
            "weights": self.weights.to_dict() if self.weights else None,
            "flags": self.flags, "notes": self.notes, "source": self.source,
            "dcp": self.dcp, "parallel": self.parallel,
            "startup": {k: v for k, v in self.startup.items() if k != "notes"},
        }

    def measurement(self, *, total_bytes: int | None = None) -> Any:
        """The pool as a ``kvgate.measurement/1`` :class:`Measurement` of domain
        ``kv-pool``: T = the pool (``total_bytes`` overrides it, e.g. the cross-checked
        exact pool), P = 0, basis naming the engine, version, flags and log.

        Raises:
            EngineLogError: the log gave no pool size and none was passed.
        """
        from kvgate.measure.measurement import Basis, Measurement  # noqa: PLC0415

        total = total_bytes if total_bytes is not None else (self.pool_bytes.bytes if self.pool_bytes else None)
        if not total:
            raise EngineLogError(f"the {self.engine} log gives no KV pool size in bytes",
                                 hint="pass --model so kvgate can size the pool from its tokens / blocks")
        basis = Basis(domain="kv-pool", sampler="engine-log", source=self.source,
                      device_name=self.flags.get("device"), total_bytes=total)
        return Measurement(total_bytes=total, peak_used_bytes=0, idle_used_bytes=0, basis=basis, status="ok",
                           extra={"engine": self.engine, "engine_version": self.version, "model": self.model,
                                  "kv_format": self.kv_format, "pool_tokens": self.pool_tokens, "tp": self.tp,
                                  "pool_bytes_interval": self.pool_bytes.to_dict() if self.pool_bytes else None,
                                  "pool_is_budget": self.pool_is_budget, "flags": self.flags})


def detect_engine(text: str) -> str:
    """``vllm``, ``sglang`` or ``llama.cpp``: the engine with most marker lines.

    Raises:
        EngineLogError: none of the three engines' lines are in the text.
    """
    best = detect_from_log(text)
    if best is None:
        raise EngineLogError("no vLLM, SGLang or llama.cpp startup lines found in the log",
                             hint="pass the engine's own startup output (vLLM: 'GPU KV cache size', SGLang: "
                                  "'KV Cache is allocated', llama.cpp: 'llama_kv_cache: size =')")
    return best


def kv_format_name(engine: str, kv_dtype: str | None, model_dtype: str | None) -> str | None:
    """kvgate's KV format for the cache dtype an engine's log states (``auto`` or none: the
    engine's default, :meth:`kvgate.engines.base.Engine.kv_format`, which follows the model
    dtype the log states for vLLM and SGLang; vLLM and SGLang store fp8 variants as one
    byte). ``None`` when neither is known.

    Raises:
        EngineLogError: a cache dtype kvgate has no format for (never a silent default).
    """
    name = kv_dtype
    try:
        if name in (None, "auto", "None"):
            return get_engine(engine).kv_format(None, model_dtype)
        name = str(name).replace("torch.", "")
        if name.startswith("fp8") or name.startswith("float8"):
            return "fp8"
        return get_format(name).name
    except FormatError as exc:
        shown = name if name not in (None, "auto", "None") else str(model_dtype).replace("torch.", "")
        raise EngineLogError(f"{engine} KV cache dtype {shown!r} has no kvgate format", hint=exc.hint) from exc


def read_engine_log(path: str | Path, *, engine: str | None = None, text: str | None = None,
                    startup: int | None = None, service: str | None = None) -> EnginePool:
    """Read a startup log file (or ``text``) into an :class:`EnginePool`.

    A log holding several startups or ``docker compose`` services is read one startup of
    one service at a time (:func:`kvgate.engines.startups.select_startup`): by default the
    last complete startup of the only service with a pool; ``startup`` (1-based) and
    ``service`` choose another. What was read is in ``pool.startup`` and ``pool.notes``.

    Raises:
        EngineLogError: unreadable file, unknown engine, two engines' pools in one log
            without ``engine``, or no pool figure at all (the lines that mention a KV
            cache but were not read are named).
        StartupError: several services with pools and no ``service``; a ``service`` or
            ``startup`` not in the log.
        LogNumberError: a number longer than any engine prints.
    """
    if text is None:
        try:
            text = read_regular(path, what="engine log", max_bytes=MAX_LOG_BYTES).decode("utf-8", errors="replace")
        except KvgateError as exc:
            raise EngineLogError(exc.message, hint=exc.hint) from None
        except OSError as exc:
            raise EngineLogError(f"cannot read engine log {path}: {exc.strerror or exc}") from exc
    if engine is not None and engine not in ENGINES:
        raise EngineLogError(f"unknown engine {engine!r}", hint=f"one of: {', '.join(ENGINES)}")
    if engine is None:
        both = engines_with_pools(text)
        if len(both) > 1:
            raise EngineLogError(f"the log holds the KV pool lines of {len(both)} engines ({', '.join(both)}): "
                                 "two logs in one file", hint="split the file, or pass --engine to read one")
    eng = engine or detect_engine(text)
    lines, chosen = select_startup(logical_lines(text), eng, startup=startup, service=service)
    src = str(path) if path else None
    pool: EnginePool = get_engine(eng).read_pool(lines)
    pool.source = src
    pool.startup = chosen
    pool.notes[:0] = chosen["notes"]
    if pool.pool_bytes is None and pool.pool_tokens is None and not _llamacpp_context(pool):
        unread = _unread_pool_lines(lines)
        where = (f" (startup {chosen['startup']} of {len(chosen['startups'])})" if len(chosen["startups"]) > 1 else "")
        raise EngineLogError(
            f"the {eng} log{where} has no KV pool line"
            + ("; these mention a KV cache but are not in a form kvgate reads: "
               + "; ".join(f"line {ln.number}: {ln.text[:100]!r}" for ln in unread[:3]) if unread else
               ": none of its lines gives a KV cache size"),
            hint=get_engine(eng).pool_line_hint)
    return pool


def _llamacpp_context(pool: EnginePool) -> bool:
    """A llama.cpp log cut before its cache line that still shows its context (``n_ctx``):
    read, its pool "not available" (the what-ifs need only the context and the model)."""
    return pool.engine == "llama.cpp" and pool.flags.get("n_ctx") is not None


_KV_MENTION = re.compile(r"(?i)(?:kv[ _]?cache|kv self|kv size|gpu blocks|cache_size).*\d")


def _unread_pool_lines(lines: list[Any]) -> list[Any]:
    """Lines that speak of a KV cache with a number (for an honest "no pool line")."""
    return [ln for ln in lines if _KV_MENTION.search(ln.text)]


def _from_vllm(p: dict[str, Any]) -> EnginePool:
    block = p["attention_block_size"] or p["block_size"]
    tokens = p["gpu_kv_cache_tokens"]
    notes = []
    if p.get("tokens_per_rank") is not None:
        # kv_cache_utils._report_kv_cache_config: num_tokens *= pcp_size * dcp_size
        tokens = p["tokens_per_rank"]
        notes.append(f"'GPU KV cache size: {p['logged_gpu_kv_cache_tokens']:,} tokens' counts the {p['cp_world_size']} "
                     f"ranks of a context-parallel group (vLLM multiplies by pcp × dcp): one rank holds {tokens:,}")
    for k, v in p.get("parallel", {}).items():
        if "process tags" in v["source"]:
            notes.append(f"{k} {v['value']} from {v['source']}")
    if tokens is None and p["gpu_blocks"] is not None:
        tokens = p["gpu_blocks"] * (block or DEFAULT_BLOCK_SIZE)
        notes.append(f"tokens = # GPU blocks {p['gpu_blocks']:,} × block size {block or DEFAULT_BLOCK_SIZE}")
    flags = {k: p[k] for k in ("block_size", "attention_block_size", "enable_prefix_caching", "speculative_config",
                               "quantization", "gpu_memory_utilization", "max_num_seqs", "max_num_batched_tokens",
                               "kv_offloading_size", "num_gpu_blocks_override", "padding_layers", "device",
                               "kv_cache_dtype", "dtype", "max_concurrency", "concurrency_len")
             if p.get(k) is not None}
    if p["cuda_graph"] is not None:
        flags["cuda_graph"] = p["cuda_graph"].to_dict()
    reports = [x for x in p.get("kv_cache_reports") or [] if x["tokens"] is not None]
    if len(reports) > 1:  # one pair per worker (vLLM 0.9-0.10): the least is the pool
        # a dict: in the JSON document, not on the text's flags line
        flags["kv_cache_reports"] = {f"line {x['line']}": {"tokens": x["tokens"], "max_concurrency": x["max_concurrency"]}
                                     for x in reports}
        sizes = sorted(x["tokens"] for x in reports)
        notes.append(f"{len(reports)} 'GPU KV cache size' lines, one per worker: {sizes[0]:,} … {sizes[-1]:,} tokens")
        notes.append(f"the pool is the smallest, {p['gpu_kv_cache_tokens']:,} tokens: vLLM cuts every worker to "
                     "the least blocks")
    if len(p["available_kv_by_rank"]) > 1:
        flags["available_kv_by_rank"] = {str(k): v.to_dict() for k, v in p["available_kv_by_rank"].items()}
        notes.append("several ranks logged 'Available KV cache memory': the minimum sizes the pool, as vLLM does")
    return EnginePool(engine="vllm", version=p["version"], model=p["model"],
                      kv_format=kv_format_name("vllm", p["kv_cache_dtype"], p["dtype"]),
                      pool_bytes=p["available_kv"], pool_is_budget=True, pool_tokens=tokens,
                      tp=p["tensor_parallel_size"], pp=p["pipeline_parallel_size"],
                      max_model_len=p["max_model_len"], slots=p["max_num_seqs"], weights=p["model_loading"],
                      flags=flags, parsed=p, notes=notes, dcp=p.get("decode_context_parallel_size"),
                      parallel=p.get("parallel", {}))


def _from_sglang(p: dict[str, Any]) -> EnginePool:
    if p["k_size"] is not None:
        k, v = p["k_size"], p["v_size"]
        pool = Logged(k.bytes + v.bytes, k.low + v.low, k.high + v.high, f"K {k.text} + V {v.text}")
    else:
        pool = p["kv_size"]
    kv = p["kv_store_dtype"] or p["kv_cache_dtype"]
    flags = {k: p[k] for k in ("mem_fraction_static", "page_size", "max_running_requests", "kv_cache_dtype",
                               "dtype", "model_type") if p.get(k) is not None}
    notes = []
    swa = p.get("swa_pool")
    if swa is not None and swa.get("k_size") is not None and pool is not None:
        # SWAKVPool: the SWA layers' pool and the full layers' pool, both allocated
        k, v = swa["k_size"], swa["v_size"]
        notes.append(f"hybrid SWA pool (SWAKVPool): SWA pool {swa['tokens']:,} + full pool {p['tokens']:,} tokens")
        notes.append("the pool bytes are both pools'; its size is the full pool's tokens")
        gb = [x.text.split(" ")[0] for x in (k, v, p["k_size"], p["v_size"])]
        pool = Logged(pool.bytes + k.bytes + v.bytes, pool.low + k.low + v.low, pool.high + k.high + v.high,
                      f"SWA K {gb[0]} + V {gb[1]}, full K {gb[2]} + V {gb[3]} GB (SGLang's GB = 2^30 B)")
        flags["swa_pool_tokens"] = swa["tokens"]
    if p.get("swa_full_line_missing"):
        notes.append("hybrid SWA pool: the excerpt holds each rank's SWA pool line only; the full pool's size is "
                     "full_layer_tokens, its bytes are not in the log")
    if p.get("swa_ranks_cut"):
        notes.append(f"rank(s) {', '.join(map(str, p['swa_ranks_cut']))}: one line of the SWAKVPool pair "
                     "(a cut excerpt), not read")
    if p.get("extra_pools"):
        n = len({e["rank"] for e in p["extra_pools"]})
        notes.append(f"{n} rank(s) logged a second 'KV Cache is allocated' line (a draft model's or a hybrid model's "
                     f"second pool, line {p['extra_pools'][0]['line']}): the first pool of each rank is read, the "
                     "others are not added to it")
    return EnginePool(engine="sglang", version=p["version"], model=p["model"],
                      kv_format=kv_format_name("sglang", kv, p["dtype"]), pool_bytes=pool,
                      pool_tokens=p["tokens"] or p["max_total_num_tokens"], tp=p["tp_size"],
                      max_model_len=p["context_length"], slots=p["max_running_requests"], weights=p["weights"],
                      flags=flags, parsed=p, notes=notes)


def _from_llamacpp(p: dict[str, Any]) -> EnginePool:
    ctx, caches = p["context"], p["caches"]
    kv = [c for c in caches if c["kind"] == "kv"]
    pool = None
    if caches:
        pool = Logged(sum(c["size"].bytes for c in caches), sum(c["size"].low for c in caches),
                      sum(c["size"].high for c in caches), " + ".join(c["size"].text for c in caches))
    full = [c for c in kv if c["swa"] != "swa"]
    # the cells are the cache line's, never n_ctx: a log cut before that line built no pool kvgate saw
    cells = full[0]["cells"] * full[0]["n_stream"] if full and full[0]["cells"] is not None else None
    types = {(c["k_type"], c["v_type"]) for c in kv}
    fmt = None
    notes = []
    if not caches:
        notes.append("pool not available: the log ends before its 'llama_kv_cache: size' line")
        if isinstance(ctx.get("n_ctx"), int):
            notes.append(f"n_ctx {ctx['n_ctx']:,} is the context asked for, not a pool built")
    if len(types) == 1:
        kt, vt = next(iter(types))
        fmt = kv_format_name("llama.cpp", kt, None)
        if vt != kt:
            notes.append(f"K is {kt}, V is {vt}: kvgate's K format is used, V's given separately")
    flags = {k: ctx[k] for k in ("n_seq_max", "n_ctx", "n_ctx_seq", "n_batch", "n_ubatch", "flash_attn",
                                 "kv_unified", "causal_attn") if k in ctx}
    if len(types) == 1:
        flags["cache_type_k"], flags["cache_type_v"] = next(iter(types))
    if p["commit"]:
        flags["commit"] = p["commit"]
    meta = p["meta"]
    return EnginePool(engine="llama.cpp", version=p["version"], model=p["model"] or meta.get("general.name"),
                      kv_format=fmt, pool_bytes=pool, pool_tokens=cells, tp=1,
                      max_model_len=ctx.get("n_ctx_seq") or ctx.get("n_ctx"), slots=ctx.get("n_seq_max"),
                      flags=flags, parsed=p, notes=notes)
