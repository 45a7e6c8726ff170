"""The gate for engines that preallocate: does the logged pool hold N sequences of L
tokens, and if not, which change pays?

The pool is a fixed budget (per tensor-parallel rank) taken at start, so the gate's
question becomes: demand D = N·S(L) under the engine's layout (vLLM blocks, llama.cpp
cells, SGLang tokens) against capacity C = the logged pool. ``not-a-bottleneck`` when
D ≤ C; otherwise each candidate is judged by what it changes:

==================  ===============================  ===================================
candidate           changes                          verdict ``pays`` when
==================  ===============================  ===================================
kv-quant:F          S → S_F (each format the engine  N·S_F(L) ≤ C
                    supports: vLLM/SGLang fp8,
                    llama.cpp q8_0 … q4_0)
max-model-len cut   L → L′                           L′ = the largest L with N·S(L) ≤ C
                                                     (a boundary: "pays if L′ is enough")
fewer sequences     N → N′ (``fewer slots`` in       N′ = ⌊…⌋ the most sequences that fit
(--max-num-seqs)    records)
host offload        C → C + host                     measured: the trace's paged peak
                                                     at N sequences minus C ≤ host bytes
more TP             tp → 2·tp: S halves per rank,    N·S_2tp(L) ≤ C + W/2 (W = weights
                    half the weights leave the rank  per rank as logged; an estimate)
==================  ===============================  ===================================

The worst case (every sequence at L) is the DESIGN §3 gate with T = C, P = 0, n = 0, m = 0:
:func:`gate_from_engine_log` also returns that gate's own decision record
(:func:`kvgate.gate.decision.decide`), so records, boundaries and ``recheck`` work as
for any other measurement.
"""

from __future__ import annotations

import bisect
from fractions import Fraction
from typing import Any

from kvgate.engines.pool import EngineLogError, EnginePool
from kvgate.engines.sglang.pool import is_dsa
from kvgate.engines.vllm.pool import DEFAULT_BLOCK_SIZE
from kvgate.errors import KvgateError
from kvgate.gate.decision import DecisionInputs, decide
from kvgate.gate.verdict import Scenario
from kvgate.geometry import KVGeometry, get_layout
from kvgate.model.spec import ModelSpec
from kvgate.units import GiB

QUANT_FORMATS = {"vllm": ("fp8",), "sglang": ("fp8",), "llama.cpp": ("q8_0", "q4_0")}

#: each engine's own words for the gate's quantities: the requests at once, the length per
#: request, the KV dtype flag (vLLM ``--max-num-seqs``/``--max-model-len``; SGLang
#: ``--max-running-requests``/``--context-length``; llama.cpp ``-np``/``-c`` per sequence)
ENGINE_WORDS = {
    "vllm": {"seqs": "--max-num-seqs", "len": "--max-model-len", "quant": "--kv-cache-dtype {q}"},
    "sglang": {"seqs": "--max-running-requests", "len": "--context-length", "quant": "--kv-cache-dtype {q}"},
    "llama.cpp": {"seqs": "-np", "len": "-c per sequence", "quant": "-ctk {q} -ctv {q}"},
}


def _seqs(n: int) -> str:
    return f"{n:,} sequence{'s' if n != 1 else ''}"


def engine_layout(pool: EnginePool, slots: int, model: ModelSpec | None = None) -> dict[str, Any]:
    """The kvgate layout (as ``{"name": …, options}``) that sizes one sequence the way
    this engine does: vLLM blocks of the logged block size and release; llama.cpp cells
    with ``n_seq`` = the target slots and the logged unified flag; SGLang whole pages of the
    logged page size with every layer at full length and DSA layers as its pool stores them
    (:class:`kvgate.engines.sglang.pool.SGLang`; ``model`` gives a DSA model's
    ``qk_rope_head_dim``, kept in the layout because a record's layers do not keep it)."""
    if pool.engine == "vllm":
        out: dict[str, Any] = {"name": "vllm", "block_size": int(pool.flags.get("block_size") or DEFAULT_BLOCK_SIZE)}
        if pool.version:
            out["version"] = pool.version
        if (pool.pp or 1) > 1:  # one rank of the stage that sets the pool (engines/vllm/pool.py)
            out["pipeline_parallel_size"] = pool.pp
        return out
    if pool.engine == "llama.cpp":
        return {"name": "llama.cpp", "n_seq": slots, "unified": bool(pool.flags.get("kv_unified")),
                "n_ubatch": int(pool.flags.get("n_ubatch") or 512), "n_batch": int(pool.flags.get("n_batch") or 2048)}
    page = pool.flags.get("page_size")
    rope = model.config.get("qk_rope_head_dim") if model is not None and is_dsa(model) else None
    return {"name": "sglang", "page_size": int(page) if page else None,
            **({"qk_rope_head_dim": rope} if rope else {})}  # a record's layers do not keep it


def _slot_fn(model: ModelSpec, fmt: str, tp: int, layout: dict[str, Any], cp: int = 1):
    """One sequence's bytes per rank at L tokens; under vLLM context parallelism (``cp`` =
    pcp × dcp ranks share a sequence's tokens) a rank holds cdiv(L, cp) of them
    (``FullAttentionSpec.max_memory_usage_bytes``)."""
    opts = {k: v for k, v in layout.items() if k != "name"}
    geo = KVGeometry(model, fmt, tp=tp, layout=get_layout(layout["name"], **opts))
    return geo.slot_bytes if cp <= 1 else (lambda L: geo.slot_bytes(-(-L // cp)))


def gate_from_engine_log(pool: EnginePool, model: ModelSpec, *, slots: int, max_seq: int,
                         kv_format: str | None = None, tp: int | None = None, pool_bytes: int | None = None,
                         quant_to: list[str] | None = None, trace=None, host_bytes: int | None = None,
                         decode_rate: float = 20.0, speed: float = 1.0) -> dict[str, Any]:
    """Verdicts for the engine candidates (module docstring) and the worst-case decision
    record.

    Args:
        pool: the logged pool (:func:`kvgate.engines.read_engine_log`).
        model: the served model.
        slots, max_seq: the target N sequences of L tokens.
        kv_format, tp: override what the log says.
        pool_bytes: the pool C in bytes (e.g. the cross-check's exact pool); default the
            log's figure (vLLM: its budget rounded down to whole blocks of this model).
        quant_to: KV formats to try; default the engine's (``QUANT_FORMATS``).
        trace: a :class:`kvgate.replay.trace.Trace` to measure host offload's reclaim.
        host_bytes: host memory offload may use (default vLLM's ``kv_offloading_size``
            GiB when logged, else unknown).

    Returns:
        ``{"pool_bytes", "demand_bytes", "slot_bytes" (= "sequence_bytes": one sequence of
        L tokens, per rank), "verdict", "candidates": [...], "record": <kvgate.decision/2
        dict>, "lines": [...], "skipped": [{name, label, reason}]}`` (``skipped``: a KV
        cache type the engine refuses for this model, e.g. llama.cpp's q8_0 on head dim 80,
        which is no candidate); each candidate keeps its ``name`` (``fewer slots`` …, for
        records and scripts) and has ``label``, the engine's own flag for it.

    Raises:
        KvgateError: no pool size, no KV format, or bad targets.
    """
    if not isinstance(slots, int) or slots <= 0 or not isinstance(max_seq, int) or max_seq <= 0:
        raise KvgateError(f"--slots and --max-seq must be positive integers, got {slots!r}, {max_seq!r}")
    fmt = kv_format or pool.kv_format
    if fmt is None:
        raise EngineLogError(f"the {pool.engine} log does not say the KV format", hint="pass --kv-format")
    tpv = tp or pool.tp or 1
    cp = int(pool.parsed.get("cp_world_size") or 1) if pool.engine == "vllm" else 1
    layout = engine_layout(pool, slots, model)
    S = _slot_fn(model, fmt, tpv, layout, cp)
    C = pool_bytes
    if C is None:
        if pool.pool_bytes is None:
            raise EngineLogError("the log gives no KV cache pool to gate: no pool size in bytes, and the cross-check "
                                 "could not size one from the model (its status says why)",
                                 hint="`kvgate import-log LOG --model M` shows what the log lacks (the pool line: "
                                      "vLLM 'GPU KV cache size', SGLang 'KV Cache is allocated', llama.cpp "
                                      "'llama_kv_cache: size')")
        C = pool.pool_bytes.bytes
        if pool.engine == "vllm":
            opts = {k: v for k, v in layout.items() if k != "name"}
            block = KVGeometry(model, fmt, tp=tpv, layout=get_layout("vllm", **opts)).block_bytes(layout["block_size"])
            C = C // block * block if block else C
    D = slots * S(max_seq)
    base = "not-a-bottleneck" if D <= C else None
    cands: list[dict[str, Any]] = []
    words = ENGINE_WORDS[pool.engine]
    skipped: list[dict[str, str]] = []
    tried = quant_to or [f for f in QUANT_FORMATS[pool.engine] if f != fmt]
    for q in tried:
        try:
            Sq = _slot_fn(model, q, tpv, layout, cp)
            dq = slots * Sq(max_seq)
        except KvgateError as exc:  # the engine refuses this cache type for this model: not a candidate
            skipped.append({"name": f"kv-quant:{q}", "label": words["quant"].format(q=q),
                            "reason": exc.message + (f" ({exc.hint})" if exc.hint else "")})
            continue
        cands.append({"name": f"kv-quant:{q}", "label": words["quant"].format(q=q), "demand_bytes": dq,
                      "capacity_bytes": C, "verdict": base or ("pays" if dq <= C else "insufficient"),
                      "text": f"{_seqs(slots)} at {q} need N·S_{q}(L) = {dq:,} B"})
    # a shorter length and fewer sequences: boundaries (names kept for records and scripts)
    l_fit = _largest(lambda L: slots * S(L) <= C, max_seq)
    n_fit = C // S(max_seq) if S(max_seq) else None
    cands.append({"name": "max-model-len cut", "label": words["len"],
                  "verdict": base or ("pays-if" if l_fit else "insufficient"), "max_seq_fits": l_fit,
                  "text": f"{_seqs(slots)} fit up to {words['len']} {l_fit:,}" if l_fit
                  else f"{_seqs(slots)} do not fit at any length"})
    cands.append({"name": "fewer slots", "label": words["seqs"],
                  "verdict": base or ("pays-if" if n_fit else "insufficient"),
                  "slots_fit": n_fit, "sequences_fit": n_fit,
                  "text": f"{words['seqs']} {n_fit}: {_seqs(n_fit or 0)} of {max_seq:,} tokens fit at once"})
    cands.append(_offload(pool, C, D, slots, max_seq, S, model, fmt, tpv, layout, trace, host_bytes, base,
                          decode_rate, speed))
    cands.append(_more_tp(pool, model, fmt, tpv, layout, slots, max_seq, C, base))
    sc = Scenario(total_bytes=C, peak_bytes=0, idle_bytes=0, slots_measured=0, slots_target=slots,
                  max_seq_measured=max_seq, max_seq=max_seq, margin=Fraction(0))
    usable = [q for q in tried if q not in {k["name"].split(":", 1)[1] for k in skipped}]
    # the record's kv-quant: the first cache type the engine takes; none (all refused): the
    # log's own format, so the record says no quantization helps (the refusals are its notes)
    q0 = (usable or ([fmt] if tried else ["fp8"]))[0]
    inputs = DecisionInputs(model=model, scenario=sc, kv_format=fmt, tp=tpv, layout=layout,
                            candidates=["kv-quant"], quant_to=q0)
    lines = [f"KV cache pool C = {C:,} B per rank; {_seqs(slots)} of {max_seq:,} tokens ({words['seqs']} {slots}, "
             f"{words['len']} {max_seq:,}) need N·S(L) = {slots} × {S(max_seq):,} = {D:,} B "
             f"({'fits' if D <= C else 'does not fit'})"]
    lines += [f"{c.get('label', c['name']):<24} {c['verdict']:<17} {c['text']}" for c in cands]
    lines += [f"{k['label']:<24} {'not possible':<17} {k['reason']}" for k in skipped]
    # NOTE: host offload is judged above (trace-measured need, host size), not by the
    # gate's bound-only 'tiering' candidate, which would always 'pay' here and contradict
    # it; the record keeps the engine-log verdicts as notes, exactly as printed.
    record = decide(inputs, pool.measurement(total_bytes=C),
                    notes=[f"{pool.engine} KV cache pool from its startup log {pool.source or ''}: T = the KV cache "
                           "pool per rank, P = 0 (empty at start: 0 sequences), margin 0 (the engine already kept "
                           f"its own); N = {words['seqs']} {slots}, L = {words['len']} {max_seq:,}",
                           *(f"engine-log gate: {ln}" for ln in lines)])
    return {"pool_bytes": C, "slot_bytes": S(max_seq), "sequence_bytes": S(max_seq), "demand_bytes": D, "kv_format": fmt, "tp": tpv,
            "layout": layout, "verdict": base or "does-not-fit", "candidates": cands, "record": record,
            "lines": lines, "skipped": skipped}


def _largest(pred, hi: int) -> int | None:
    """Largest L in [1, hi] with pred(L) (pred monotone decreasing), or None."""
    first_bad = bisect.bisect_left(range(1, hi + 1), True, key=lambda x: not pred(x))
    return first_bad or None


def _offload(pool, C, D, slots, max_seq, S, model, fmt, tp, layout, trace, host_bytes, base, decode_rate, speed):
    host = host_bytes
    if host is None and pool.flags.get("kv_offloading_size") is not None:
        host = int(Fraction(str(pool.flags["kv_offloading_size"])) * GiB)
    out: dict[str, Any] = {"name": "host offload", "host_bytes": host}
    if trace is None:
        need = max(0, D - C)
        out.update(verdict=base or ("pays" if host is not None and need <= host else "pays-if"),
                   reclaim_bytes=need, measured=False,
                   text=f"bound: needs {need:,} B on the host at {slots:,} full-length sequences"
                        + ("" if host is not None else " (host size unknown)"))
        return out
    from kvgate.replay.simulate import measured_paging_reclaim  # noqa: PLC0415

    bs = layout.get("block_size", DEFAULT_BLOCK_SIZE)
    block = KVGeometry(model, fmt, tp=tp).block_bytes(bs)
    r = measured_paging_reclaim(trace, slot_bytes=S(max_seq), block_bytes=block, max_seq=max_seq,
                                slots=slots, budget_bytes=slots * S(max_seq), block_size=bs, speed=speed,
                                decode_rate=decode_rate)
    peak = r["paged_footprint_peak_bytes"]
    need = max(0, peak - C)
    v = "not-a-bottleneck" if peak <= C else ("pays" if host is not None and need <= host else
                                              ("insufficient" if host is not None else "pays-if"))
    out.update(verdict=v, reclaim_bytes=need, measured=True, trace_paged_peak_bytes=peak,
               trace_requests=r["requests"], trace_rejected=r["rejected"],
               text=f"measured: the trace's paged peak at {_seqs(slots)} is {peak:,} B; "
                    f"{need:,} B must live on the host")
    return out


def _more_tp(pool, model, fmt, tp, layout, slots, max_seq, C, base):
    t2 = 2 * tp
    if pool.engine == "llama.cpp":
        return {"name": "more GPUs", "verdict": "no-verdict",
                "text": "llama.cpp logs one cache for all its devices (-sm layer splits layers, not heads): "
                        "add devices and re-read the log"}
    try:
        S2 = _slot_fn(model, fmt, t2, layout)
    except KvgateError as exc:
        return {"name": f"more TP ({tp}→{t2})", "verdict": "no-verdict", "text": f"TP {t2}: {exc.message}"}
    d2 = slots * S2(max_seq)
    freed = pool.weights.bytes // 2 if pool.weights is not None else 0
    c2 = C + freed
    return {"name": f"more TP ({tp}→{t2})", "demand_bytes": d2, "capacity_bytes": c2,
            "verdict": base or ("pays" if d2 <= c2 else "insufficient"),
            "text": f"per rank N·S = {d2:,} B vs pool {C:,} B"
                    + (f" + half the weights {freed:,} B (estimate)" if freed else " (weights not logged: pool held)")}
