"""Cross-check a logged pool against the model: does kvgate's geometry, under the
engine's own rules, give the pool the engine logged?

- **vLLM** (:func:`kvgate.geometry.vllm_kv_cache_report`, ``layout vllm``): the
  ``num_blocks`` that reproduce the logged "GPU KV cache size" and "Maximum concurrency"
  lines under the release's token rule, and, when "Available KV cache memory" is logged,
  whether those blocks fit in its rounding interval while one more block does not:
  "agrees to the block".
- **SGLang** (:mod:`kvgate.engines.sglang.pool`, ``MHATokenToKVPool``): K = (#tokens +
  page_size) × Σ_layers K row bytes, V alike (every layer at full length; MLA: one latent
  row, "KV size"; DSA models: ``NSATokenToKVPool``'s fp8 or bf16 row plus the indexer's
  key pages, page size 64); agrees when both fall in the printed GB (2^30) intervals.
- **llama.cpp** (``layout llama.cpp``): every ``llama_kv_cache`` line's K and V MiB are
  cells × Σ_layers row bytes of its type (``ggml_row_size``); agrees "to the cell" when
  the cells reproduce each printed figure. The layers are those llama.cpp runs
  (:class:`kvgate.geometry.LlamaCpp`'s per-architecture sliding-window rule): a model
  kvgate windows differs from a log with no SWA cache (llama.cpp kept it at full context),
  and a recurrent line holds every layer's state (Falcon-H1's attention layers too).

vLLM pipeline parallelism (``pp`` > 1) is checked stage by stage: each stage holds its own
layers (``vllm/distributed/utils.py`` ``get_pp_indices``), gets its own ``num_blocks`` from
its own budget, and vLLM keeps the least (``get_kv_cache_configs``); the budgets a log
gives per stage (``Worker_PP1_TP0``) are used per stage, a stage that logged none is taken
at the least logged budget. Under decode / prefill context parallelism (``cp`` = dcp ×
pcp) one rank holds cdiv(max_model_len, cp) tokens of a request and the token line counts
all cp ranks' tokens (:mod:`kvgate.engines.vllm.pool`): the logged line is checked as printed.

When a check differs, kvgate tries the usual misconfigurations (another KV format, the
tensor-parallel split not applied, another block size, the other vLLM token rule) and
names those that would agree: the likely cause. A KV format that was requested but not
logged (``requested_kv_format``: a q4_0 cache that llama.cpp or Ollama silently left at
f16) is reported as a difference of its own.
"""

from __future__ import annotations

import re
from dataclasses import replace
from fractions import Fraction
from typing import Any

from kvgate.engines.llamacpp.pool import LlamaCpp
from kvgate.engines.pool import EnginePool
from kvgate.engines.registry import get_engine
from kvgate.engines.sglang.pool import SGLang, SglangPool
from kvgate.engines.sglang.pool import pool_bytes as sglang_pool_bytes
from kvgate.engines.vllm.pool import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_MAX_NUM_BATCHED_TOKENS,
    VLLM,
    parse_version,
    pp_partition,
)
from kvgate.geometry import GeometryError, KVGeometry, get_format, vllm_kv_cache_report
from kvgate.geometry.specs import (
    AttentionKV,
    FullAttention,
    MLAAttention,
    SlidingWindow,
    spec_of,
)
from kvgate.model.spec import ModelSpec


def crosscheck(pool: EnginePool, model: ModelSpec, *, kv_format: str | None = None, tp: int | None = None,
               block_size: int | None = None, requested_kv_format: str | None = None,
               pp: int | None = None) -> dict[str, Any]:
    """Compare the logged pool with kvgate's geometry of ``model`` under the engine's
    rules (module docstring). Arguments override what the log says (or fill what it does
    not: a vLLM log without its config line needs ``kv_format`` and ``tp``; ``pp`` is
    vLLM's pipeline parallel size).

    Returns a dict: ``status`` (``agrees`` / ``differs`` / ``cannot-check``, or
    ``consistent`` for a vLLM log without "Available KV cache memory": its token and
    concurrency lines fit a whole number of blocks, which any model would), ``unit``
    (block / token / cell), ``expected`` and ``logged`` figures, ``pool_bytes`` (the
    exact pool kvgate computes, per rank, or None), ``causes`` (alternatives that would
    agree), ``lines`` (text).
    """
    fmt = kv_format or pool.kv_format or get_engine(pool.engine).auto_kv_format(model)
    tpv = tp or pool.tp or 1
    if pool.engine == "vllm":
        res = _vllm(pool, model, fmt, tpv, block_size, pp)
    elif pool.engine == "sglang":
        res = _sglang(pool, model, fmt, tpv)
    else:
        res = _llamacpp(pool, model)
    res.setdefault("inputs", {"kv_format": fmt, "tp": tpv, "model": model.name})
    if pool.engine != "llama.cpp" and tp is None and pool.tp is None:
        res["lines"].append("tensor parallel size not in the log and not given: TP 1 assumed (pass --tp N; "
                            "the weights the log shows per rank may say which)")
    if pool.engine != "llama.cpp" and kv_format is None and pool.kv_format is None:
        res["lines"].append(f"KV format not in the log and not given: {fmt}, the model's dtype, assumed "
                            "(pass --kv-format)")
    if requested_kv_format is not None and pool.kv_format is not None:
        want = get_format(requested_kv_format).name
        if want != pool.kv_format:
            res["status"] = "differs"
            res.setdefault("causes", []).insert(0, f"KV format {want} was requested but the engine logged "
                                                   f"{pool.kv_format}: the request was not applied")
            res["lines"].append(_requested_text(pool, want))
    return res


def _requested_text(pool: EnginePool, want: str) -> str:
    why = ""
    if pool.engine == "llama.cpp":
        fa = pool.flags.get("flash_attn")
        why = (f" (flash_attn = {fa}: llama.cpp needs flash attention for a quantized V cache; Ollama falls back "
               "to f16 without it)") if fa is not None else " (llama.cpp needs flash attention for a quantized V cache)"
    return f"requested KV format {want}, logged {pool.kv_format}: the request was silently not applied{why}"




# ---------------------------------------------------------------- vLLM

def _vllm_layout(pool: EnginePool, block: int, version: str | None, pp: int = 1) -> VLLM:
    f, p = pool.flags, pool.parsed
    return VLLM(block_size=block, version=version, enable_prefix_caching=f.get("enable_prefix_caching"),
                max_num_batched_tokens=int(f.get("max_num_batched_tokens") or DEFAULT_MAX_NUM_BATCHED_TOKENS),
                pipeline_parallel_size=pp, decode_context_parallel_size=int(p.get("decode_context_parallel_size") or 1),
                pp_layer_partition=p.get("pp_layer_partition") if pp > 1 and len(p.get("pp_layer_partition") or ()) == pp
                else None,
                prefill_context_parallel_size=int(p.get("prefill_context_parallel_size") or 1))


def _logged_tokens(pool: EnginePool) -> int | None:
    """The "GPU KV cache size" as printed (all context-parallel ranks' tokens)."""
    logged = pool.parsed.get("logged_gpu_kv_cache_tokens")
    return logged if logged is not None and pool.parsed.get("tokens_per_rank") is not None else pool.pool_tokens


def _stage_budgets(pool: EnginePool, pp: int) -> tuple[list[Any] | None, list[int]]:
    """Each pipeline stage's logged budget (a :class:`Logged`), from the ranks' tags
    (``Worker_PP1_TP0``: stage 1; the least over a stage's ranks); a stage that logged
    none gets the least logged budget. Returns ``(budgets, stages without a budget)``."""
    avail = pool.pool_bytes
    if avail is None:
        return None, []
    if pp == 1:
        return [avail], []
    per: dict[int, Any] = {}
    for key, v in (pool.parsed.get("available_kv_by_rank") or {}).items():
        m = re.search(r"(?:^|_)PP(\d+)", str(key))
        if m and int(m.group(1)) < pp:
            i = int(m.group(1))
            per[i] = v if i not in per or v.bytes < per[i].bytes else per[i]
    missing = [i for i in range(pp) if i not in per]
    return [per.get(i, avail) for i in range(pp)], missing


def _vllm_solve(model: ModelSpec, pool: EnginePool, fmt: str, tp: int, block: int,
                version: str | None, pp: int = 1) -> list[dict[str, Any]]:
    """Every ``num_blocks`` (with its pool) that reproduces the logged token and
    concurrency lines under these settings, with ``nb_low`` … ``nb_high``: the block
    counts the logged budgets allow (None without a budget line)."""
    L, tokens = pool.max_model_len, _logged_tokens(pool)
    if L is None or tokens is None:
        return []
    try:
        geo = KVGeometry(model, fmt, tp=tp, layout=_vllm_layout(pool, block, version, pp))
        base = vllm_kv_cache_report(geo, 0, L)
    except GeometryError:
        return []  # a split or format this model cannot take: no solution under it
    per_block, per_req, groups = base["pool_bytes_per_block"], base["blocks_per_request"], len(base["groups"])
    min_block = min(g["block_size"] for g in base["groups"])
    lay: VLLM = geo.layout  # type: ignore[assignment]
    cp = lay.cp
    conc_txt = pool.flags.get("max_concurrency")
    by_conc = lay.prints_concurrency_tokens()
    guess = tokens * per_req // L if by_conc else tokens // (min_block * cp) * groups
    budgets, _ = _stage_budgets(pool, pp)
    stage_bytes = [r["bytes_per_block"] for r in base.get("stages", [])] or [per_block]
    nb_low = nb_high = None
    if budgets is not None:
        held = [(b, pb) for b, pb in zip(budgets, stage_bytes) if pb]
        nb_low = min(b.low // pb for b, pb in held)
        nb_high = min(b.high // pb for b, pb in held)
    out = []
    for nb in range(max(0, guess - 3 - groups), guess + 4 + groups):
        tok = int(Fraction(nb, per_req) * L) if by_conc else nb // groups * min_block * cp
        if tok != tokens or (conc_txt is not None and f"{nb / per_req:.2f}" != conc_txt):
            continue
        out.append({"num_blocks": nb, "pool_bytes": nb * per_block, "pool_bytes_per_block": per_block,
                    "blocks_per_request": per_req, "groups": groups, "block_size": min_block,
                    "budget_low": nb * per_block, "budget_high": (nb + 1) * per_block - 1,
                    "nb_low": nb_low, "nb_high": nb_high, "stages": base.get("stages")})
    return out


def _fits(sol: dict[str, Any], avail) -> bool:
    """The logged budgets (per stage) give exactly ``num_blocks`` for some value each
    printed figure stands for."""
    if avail is None or sol.get("nb_low") is None:
        return True
    return sol["nb_low"] <= sol["num_blocks"] <= sol["nb_high"]


def _vllm(pool: EnginePool, model: ModelSpec, fmt: str, tp: int, block_size: int | None,
          pp: int | None = None) -> dict[str, Any]:
    block = block_size or pool.flags.get("block_size") or DEFAULT_BLOCK_SIZE
    version = pool.version
    notes = []
    ppv = pp or pool.pp or 1
    if ppv > model.num_layers:
        return {"status": "cannot-check", "unit": "block", "causes": [], "pool_bytes": None, "lines": [
            f"pipeline parallel size {ppv} is more than the model's {model.num_layers} layers"]}
    refused = _partition_refused(pool, model, ppv)
    if refused is not None:
        return {"status": "cannot-check", "unit": "block", "causes": [], "pool_bytes": None,
                "engine_error": refused, "lines": [refused]}
    if ppv > 1:
        src = "given" if pp else (pool.parallel.get("pp") or {}).get("source", "the log")
        try:
            parts = [len(r) for r in _vllm_layout(pool, block, None, ppv).stages(model.num_layers)]
        except GeometryError as exc:  # a logged VLLM_PP_LAYER_PARTITION that is not this model's
            return {"status": "cannot-check", "unit": "block", "causes": [], "pool_bytes": None,
                    "lines": [f"pipeline parallel size {ppv}: the log's layer partition "
                              f"{pool.parsed.get('pp_layer_partition')} is not the model's: {exc.message}"]}
        notes.append(f"pipeline parallel size {ppv} (from {src}): stages hold {parts} layers "
                     "(vllm/distributed/utils.py get_pp_indices); vLLM keeps the least num_blocks over stages")
        _, missing = _stage_budgets(pool, ppv)
        if pool.pool_bytes is not None and missing:
            notes.append(f"stage(s) {', '.join(map(str, missing))} logged no 'Available KV cache memory': taken at "
                         f"the least logged budget ({pool.pool_bytes.text})")
    if pool.max_model_len is None and model.max_position_embeddings and pool.pool_tokens is not None:
        # vLLM's default max_model_len is the config's (ModelConfig.get_and_verify_max_len)
        pool = replace(pool, max_model_len=model.max_position_embeddings)
        notes.append(f"max_model_len not logged: vLLM's default, the config's max_position_embeddings "
                     f"{model.max_position_embeddings:,}, is assumed")
    cp = int(pool.parsed.get("cp_world_size") or 1)
    if cp > 1 and pool.max_model_len is not None and pool.pool_tokens is not None:
        # FullAttentionSpec.max_memory_usage_bytes: one rank holds cdiv(max_model_len, cp) tokens
        notes.append(f"context parallel {cp}: one rank holds cdiv({pool.max_model_len:,}, {cp}) tokens of each "
                     f"request; the logged {_logged_tokens(pool):,} tokens count all {cp} ranks' "
                     f"(one rank's: {pool.pool_tokens:,})")
    if pool.max_model_len is None or pool.pool_tokens is None:
        return {"status": "cannot-check", "unit": "block", "lines": notes + [
            "the log has no 'GPU KV cache size' / 'Maximum concurrency for L tokens' line to check"], "causes": []}
    try:
        parse_version(version)
    except Exception:  # noqa: BLE001 - dev builds like 0.7.4.dev713: newest rules
        version = None
    res = _vllm_check(pool, model, fmt, tp, block, version, ppv)
    if notes:
        res["lines"].insert(0, "; ".join(notes))
    return res


def _partition_refused(pool: EnginePool, model: ModelSpec, pp: int) -> str | None:
    """Why vLLM would not start with the log's layer partition at pipeline size ``pp`` and
    ``model``'s layers, else None. vLLM checks ``VLLM_PP_LAYER_PARTITION`` whenever it is
    set, at any pipeline size (``vllm/distributed/utils.py`` ``get_pp_indices``, 0.12.0 …
    0.33.0: ``len(partitions) != pp_size`` and ``sum(partitions) != num_hidden_layers``
    raise ValueError), so a log that shows such a partition is not of a run that started
    with these settings: the check and any what-if on it cannot stand."""
    part = pool.parsed.get("pp_layer_partition")
    if not part:
        return None
    try:
        pp_partition(model.num_layers, pp, part)
    except GeometryError as exc:
        return (f"cannot check: the log's layer partition {list(part)} (VLLM_PP_LAYER_PARTITION) does not fit "
                f"pipeline parallel size {pp} and the model's {model.num_layers} layers: vLLM raises "
                f"ValueError('{exc.message}') at start-up (vllm/distributed/utils.py get_pp_indices); "
                "pass the log's own --pp, or the log's model")
    return None


def _tp_floor(pool: EnginePool) -> tuple[int, int | None]:
    """The TP values a likely cause may name, from what the log shows: ``(least, exact)``.
    A TP in the config line, arguments or command is exact; process tags (``Worker_TP3``)
    show a lower bound (the largest rank seen + 1); none shown: ``(1, None)``."""
    src = (pool.parallel.get("tp") or {}).get("source", "")
    if pool.tp is None:
        return 1, None
    if "process tags" in src:
        return pool.tp, None
    return pool.tp, pool.tp


def _vllm_check(pool: EnginePool, model: ModelSpec, fmt: str, tp: int, block: int, version: str | None,
                pp: int = 1) -> dict[str, Any]:
    sols = _vllm_solve(model, pool, fmt, tp, block, version, pp)
    avail = pool.pool_bytes
    tokens = _logged_tokens(pool)
    logged = {"gpu_kv_cache_tokens": tokens, "max_concurrency": pool.flags.get("max_concurrency"),
              "available_kv": avail.to_dict() if avail else None}
    good = [x for x in sols if _fits(x, avail)]
    sol = good[0] if good else (sols[0] if sols else None)
    if good:
        count = (f"{sol['num_blocks']:,}" if len(good) == 1 else
                 f"{good[0]['num_blocks']:,} … {good[-1]['num_blocks']:,} (the printed rounding allows each; "
                 f"the smallest is kept)")
        lines = [f"agrees to the block: {count} blocks of {sol['pool_bytes_per_block']:,} B "
                 f"(block size {sol['block_size']}, {sol['groups']} group(s)"
                 + (", the stage that sets the pool" if pp > 1 else "") + f") give the logged "
                 f"{tokens:,} tokens" + _conc_said(pool, " and ")]
        if avail is None:
            # the token and concurrency lines agree with each other for any model: only the
            # block count is checked, not the model, KV format or TP split behind it
            lines[0] = "consistent" + lines[0][len("agrees"):]
            lines.append("the log has no 'Available KV cache memory' line: the block count is checked, "
                         "the bytes per block (model, KV format, TP split) are not; the pool bytes below "
                         "assume them")
        elif pp > 1:
            per_stage = ", ".join(f"{r['bytes_per_block']:,}" for r in sol["stages"])
            lines.append(f"the stages' logged budgets give {sol['nb_low']:,} … {sol['nb_high']:,} blocks at the least "
                         f"(per stage: {per_stage} B per block)")
        else:
            lines.append(f"those blocks need {sol['budget_low']:,} … {sol['budget_high']:,} B of budget; "
                         f"the log's {avail.text} is {avail.low:,} … {avail.high:,} B")
        return {"status": "agrees" if avail is not None else "consistent", "unit": "block", "expected": sol,
                "logged": logged,
                "block_counts": [x["num_blocks"] for x in good],
                "pool_bytes": sol["pool_bytes"], "causes": [], "lines": lines}
    least, exact = _tp_floor(pool)  # what the log shows, whatever was given
    shown = exact or (least if pool.tp is not None else None)
    causes, others = [], []
    for alt_fmt in ("bf16", "fp8"):
        for alt_tp in sorted({1, tp, 2 * tp} | {least} | ({exact} if exact else set())):
            if alt_tp < least or (exact is not None and alt_tp != exact):
                continue  # the log says which TP ran: never a coincidence against it
            for alt_block in sorted({block, DEFAULT_BLOCK_SIZE, 2 * DEFAULT_BLOCK_SIZE}):
                for alt_version in (version, "0.20.0" if version is None else None):
                    if (alt_fmt, alt_tp, alt_block, alt_version) == (fmt, tp, block, version):
                        continue
                    if any(_fits(x, avail) for x in _vllm_solve(model, pool, alt_fmt, alt_tp, alt_block, alt_version, pp)):
                        text = (f"agrees with kv format {alt_fmt}, tp {alt_tp}, block {alt_block}"
                                + (f", token rule of vLLM {alt_version or 'newest'}" if alt_version != version else ""))
                        (causes if alt_tp == (shown or tp) else others).append(text)
    causes += others  # the TP the log shows (else the one assumed) first
    if pp == 1 and avail is not None and model.num_layers > 1:
        for alt_pp in (2, 4, 8):
            if alt_pp <= model.num_layers and any(_fits(x, avail) for x in
                                                  _vllm_solve(model, pool, fmt, tp, block, version, alt_pp)):
                causes.append(f"agrees with pipeline parallel {alt_pp} (-pp {alt_pp}: each stage holds only its layers)")
                break
    ranks = pool.parsed.get("available_kv_by_rank") or {}
    if sol is not None and avail is not None and sol["budget_high"] < avail.low and tp > 1 and len(ranks) <= 1:
        causes.insert(0, f"another rank had less: vLLM sizes every rank's pool by the smallest rank's budget "
                         f"(get_kv_cache_configs), and this log shows one rank's ({avail.text}); the pool implies "
                         f"{sol['budget_low']:,} … {sol['budget_high']:,} B on the smallest rank")
    lines = [f"differs: no block count under kv format {fmt}, tp {tp}" + (f", pp {pp}" if pp > 1 else "")
             + f", block {block} gives the logged {tokens:,} tokens" + _conc_said(pool, " and ")
             + (f" within {avail.text}" if avail else "")]
    if sol is not None and avail is not None:
        lines.append(f"{sol['num_blocks']:,} blocks reproduce the lines but need {sol['budget_low']:,} … "
                     f"{sol['budget_high']:,} B, outside the log's {avail.text} ({avail.low:,} … {avail.high:,} B)")
    lines += [f"likely cause: {c}" for c in causes[:4]] or ["likely cause: not one of kvgate's usual suspects "
                                                            "(KV format, TP split, block size, token rule)"]
    return {"status": "differs", "unit": "block", "expected": sol, "logged": logged, "pool_bytes": None,
            "causes": causes, "lines": lines}


def _concurrency_words(pool: EnginePool) -> str:
    """The logged "Maximum concurrency" figure as ``24.25x``, or in words when the log
    gives none (or a line cut off before its ``x``)."""
    x = pool.flags.get("max_concurrency")
    if x is not None:
        return f"{x}x"
    line = pool.parsed.get("max_concurrency_unread")
    return ("maximum concurrency not available" + (f" (line {line} is cut off before its 'x')" if line else ""))


# ---------------------------------------------------------------- SGLang

def _sglang_pool(model: ModelSpec, fmt: str, tp: int, page: int | None, tokens: int) -> SglangPool:
    """What SGLang allocates for ``tokens`` tokens (:func:`kvgate.engines.sglang.pool.pool_bytes`:
    MHA K and V, or the MLA / DSA rows and the DSA indexer pages)."""
    return sglang_pool_bytes(KVGeometry(model, fmt, tp=tp, layout=SGLang(page_size=page)), tokens)


def _sglang(pool: EnginePool, model: ModelSpec, fmt: str, tp: int) -> dict[str, Any]:
    p = pool.parsed
    if p.get("swa_pool") is not None and p.get("k_size") is not None:
        return _sglang_swa(pool, model, fmt, tp)
    if pool.pool_tokens is None or pool.pool_bytes is None:
        return {"status": "cannot-check", "unit": "token", "causes": [], "pool_bytes": None,
                "lines": ["the log has no 'KV Cache is allocated. …' line with the pool's size "
                          "(#tokens, or max_total_num_tokens and the K/V sizes)"]}
    tokens = pool.pool_tokens
    logged_text = pool.pool_bytes.text

    def check(f: str, t: int) -> tuple[bool, SglangPool]:
        sp = _sglang_pool(model, f, t, p.get("page_size"), tokens)
        if sp.mla or p.get("k_size") is None:
            return bool(pool.pool_bytes and pool.pool_bytes.contains(sp.total)), sp
        return p["k_size"].contains(sp.k_bytes) and p["v_size"].contains(sp.v_bytes), sp

    ok, sp = check(fmt, tp)
    n = tokens + sp.page_size
    what = "#tokens" if p.get("tokens") is not None else "max_total_num_tokens"  # old logs: no #tokens
    line = (f"({what} {tokens:,} + page {sp.page_size}) × per-token " + (
        f"K {sp.k_bytes // n:,} B, V {sp.v_bytes // n:,} B" if not sp.mla else f"KV {sp.k_bytes // n:,} B")
        + (f" + DSA indexer pages {sp.index_bytes:,} B" if sp.index_bytes else "")
        + f" = {sp.total:,} B; logged {logged_text}")
    expected = {"k_bytes": sp.k_bytes + sp.index_bytes, "v_bytes": sp.v_bytes, "index_bytes": sp.index_bytes}
    if ok:
        return {"status": "agrees", "unit": "token", "pool_bytes": sp.total, "causes": [],
                "expected": expected, "lines": ["agrees to the token: " + line]}
    tps = [tp] if sp.mla else sorted({1, tp, 2 * tp, 4 * tp})  # an MLA latent is not split by TP
    causes = [f"agrees with kv format {f}" + ("" if sp.mla else f", tp {t}") for f in ("bf16", "fp8") for t in tps
              if (f, t) != (fmt, tp) and _checks(check, f, t)]
    return {"status": "differs", "unit": "token", "pool_bytes": None, "causes": causes,
            "expected": expected, "lines": ["differs: " + line] + [f"likely cause: {c}" for c in causes]}


def _sglang_swa(pool: EnginePool, model: ModelSpec, fmt: str, tp: int) -> dict[str, Any]:
    """A hybrid sliding-window pool (``SWAKVPool``, ``mem_cache/swa_memory_pool.py``): its
    ``swa_kv_pool`` holds the sliding layers, its ``full_kv_pool`` the others, each an
    ``MHATokenToKVPool`` of (its own #tokens + page_size) rows per layer of its own layers'
    K and V widths; both must fall in their printed GB (2^30) intervals."""
    p = pool.parsed
    specs = [spec_of(layer) for layer in model.layers]
    parts = {"SWA": [lay for lay, sp in zip(model.layers, specs) if isinstance(sp, SlidingWindow)],
             "full": [lay for lay, sp in zip(model.layers, specs) if not isinstance(sp, SlidingWindow)]}
    if not parts["SWA"]:
        return {"status": "differs", "unit": "token", "pool_bytes": None, "causes": [
            "the log shows a sliding-window pool (SWAKVPool) but the model given has no sliding-window layers"],
            "lines": ["differs: the log's two pools (SWAKVPool) need a model with sliding-window layers; "
                      f"{model.name} has none"]}
    lines, ok, total = [], True, 0
    for name, logged_pool in (("SWA", p["swa_pool"]), ("full", p)):
        sub = replace(model, layers=parts[name])
        try:
            sp = _sglang_pool(sub, fmt, tp, p.get("page_size"), int(logged_pool["tokens"]))
        except GeometryError as exc:
            return {"status": "cannot-check", "unit": "token", "pool_bytes": None, "causes": [],
                    "lines": [f"the {name} pool cannot be laid out: {exc.message}"]}
        good = logged_pool["k_size"].contains(sp.k_bytes) and logged_pool["v_size"].contains(sp.v_bytes)
        ok &= good
        total += sp.total
        lines.append(f"{'agrees to the token' if good else 'differs'}: {name} pool, ({logged_pool['tokens']:,} + "
                     f"page {sp.page_size}) × {len(parts[name])} layers: K {sp.k_bytes:,} B, V {sp.v_bytes:,} B; "
                     f"logged K {logged_pool['k_size'].text}, V {logged_pool['v_size'].text}")
    return {"status": "agrees" if ok else "differs", "unit": "token", "pool_bytes": total if ok else None,
            "causes": [] if ok else ["KV format, TP split or layer kinds differ from the model given"],
            "lines": lines}


def _checks(check: Any, f: str, t: int) -> bool:
    """An alternative that cannot be laid out (a TP that divides nothing, a KV dtype
    SGLang refuses) does not agree."""
    try:
        return bool(check(f, t)[0])
    except GeometryError:
        return False


def _conc_said(pool: EnginePool, joint: str) -> str:
    """`` and 24.27x`` (``joint`` first) when the log prints its maximum concurrency; in words
    when its line is cut off before the ``x`` (:func:`_concurrency_words`); else ``""``."""
    if pool.flags.get("max_concurrency") is None and not pool.parsed.get("max_concurrency_unread"):
        return ""
    return joint + _concurrency_words(pool)


# ---------------------------------------------------------------- llama.cpp

def _llamacpp(pool: EnginePool, model: ModelSpec) -> dict[str, Any]:
    ctx = pool.flags
    kv = [c for c in pool.parsed.get("caches", []) if c["kind"] == "kv"]
    rs = [c for c in pool.parsed.get("caches", []) if c["kind"] == "recurrent"]
    if not kv and not rs:
        return {"status": "cannot-check", "unit": "cell", "causes": [], "pool_bytes": None,
                "lines": ["the log has no 'llama_kv_cache: size = …' line"]}
    if any(c["cells"] is None for c in kv + rs):
        return {"status": "cannot-check", "unit": "cell", "causes": [], "pool_bytes": None,
                "lines": ["a cache line gives no cell count ('KV self size' without 'kv_size = N' before it)"]}
    total = 0
    lines, ok = [], True
    for c in rs:
        # llama-memory-recurrent.cpp: R = n_embd_r × cells, S = n_embd_s × cells, both f32
        # every layer's recurrent state, Falcon-H1's attention layers' own included
        lin = [s.recurrent for s in map(spec_of, model.layers) if s.recurrent is not None]
        f32 = get_format("fp32")
        rb = c["cells"] * sum(s.conv_bytes(f32, 1) for s in lin)  # one cell per sequence
        sb = c["cells"] * sum(s.ssm_bytes(f32, 1) for s in lin)
        good = c["k_size"].contains(rb) and c["v_size"].contains(sb) and c["k_type"] == c["v_type"] == "f32"
        ok &= good
        total += rb + sb
        lines.append(f"{'agrees to the cell' if good else 'differs'}: recurrent state, {c['cells']} cell(s) × "
                     f"{len(lin)} linear layers: R (f32) {rb:,} B, S (f32) {sb:,} B; logged R {c['k_size'].text}, "
                     f"S {c['v_size'].text}")
    # the layers as llama.cpp runs them (its per-architecture sliding-window rule applied)
    engine = KVGeometry(model, "fp16", layout=LlamaCpp()).engine_specs
    windowed = sum(isinstance(s, SlidingWindow) for s in engine)
    if kv and windowed and not any(c["swa"] for c in kv):
        ok = False
        lines.append(f"differs: kvgate windows {windowed} layer(s) of this model, but the log shows one KV cache and "
                     "no SWA cache: llama.cpp kept every layer at full context")
    for c in kv:
        sub = _layers_for(model, c, engine)
        geo = KVGeometry(replace(model, layers=sub), c["k_type"], kv_format_v=c["v_type"],
                         layout=LlamaCpp(n_seq=int(ctx.get("n_seq_max") or 1), unified=bool(ctx.get("kv_unified"))))
        cells = c["cells"] * c["n_stream"]  # kv_size per stream × streams
        # ggml_row_size(type_k, n_embd_k_gqa) and of V; MLA: the latent (kv_lora_rank + n_rot) alone
        kb = sum(cells * (s.latent_bytes(geo.fmt_k) if isinstance(s, MLAAttention) else s.k_bytes(geo.fmt_k, 1))
                 for s in geo.specs)
        vb = sum(cells * s.v_bytes(geo.fmt_v, 1) for s in geo.specs)
        good = c["k_size"].contains(kb) and c["v_size"].contains(vb) and c["layers"] in (None, len(sub))
        ok &= good
        total += kb + vb
        lines.append(f"{'agrees to the cell' if good else 'differs'}: {c['cells']:,} cells × {c['n_stream']} "
                     f"stream(s) × {len(sub)} layers: "
                     f"K ({c['k_type']}) {kb:,} B, V ({c['v_type']}) {vb:,} B; logged K {c['k_size'].text}, "
                     f"V {c['v_size'].text}" + (f", {c['layers']} layers" if c["layers"] is not None else
                                               " (the log does not print its layer count)"))
    return {"status": "agrees" if ok else "differs", "unit": "cell", "pool_bytes": total if ok else None,
            "causes": [] if ok else ["layer count, head width or cache type differ from the model given"],
            "lines": lines}


def _layers_for(model: ModelSpec, cache: dict[str, Any], engine: list[Any]):
    """The layers of one ``llama_kv_cache`` line: its SWA cache holds the layers llama.cpp
    slides (``engine``: the llama.cpp layout's view of each layer, its per-architecture
    sliding-window rule applied), the non-SWA cache full and MLA ones, a cache without the
    mark all attention layers."""
    kinds = {"swa": SlidingWindow, "non-swa": (FullAttention, MLAAttention)}.get(cache["swa"],
                                                                               (AttentionKV, MLAAttention))
    return [l for l, s in zip(model.layers, engine) if isinstance(s, kinds)]
