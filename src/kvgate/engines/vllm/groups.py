"""vLLM's KV cache groups and pipeline stages: which layers share a group
(``vllm/v1/core/kv_cache_utils.py`` ``get_kv_cache_groups``), what one block costs on a
stage's ranks (``get_kv_cache_config_from_groups``) and which stage sets the pool
(``get_kv_cache_configs`` keeps the least ``num_blocks`` over workers). ``lay`` below is
always a bound :class:`~kvgate.engines.vllm.pool.VLLM` layout (typed ``Any`` here: that module
imports this one). Used by the bound
:class:`kvgate.engines.vllm.pool.VLLM` layout (its stage) and by
:func:`kvgate.engines.vllm.pool_report.vllm_kv_cache_report`.
"""

from __future__ import annotations

from typing import Any

from kvgate.geometry.base import cdiv
from kvgate.geometry.specs import FullAttention, GeometryError, MLAAttention, NoCache, RecurrentState

DRAFT_MARK = "vllm_speculative_layers"  # config key: draft layers appended for speculative decoding


def spec_key(g: Any, lay: Any, spec: Any, L: int) -> tuple[Any, ...]:
    """``(kind, window, block size, page bytes)``: layers with equal keys share a group
    (vLLM groups layers by equal ``KVCacheSpec``).

    Raises:
        GeometryError: a layer kind the vLLM layout has no rule for (never a 0-byte page).
    """
    lay.refuse_unknown_kinds([spec])
    if isinstance(spec, RecurrentState):
        page = lay._mamba_page if lay._mamba_page is not None else lay._mamba_raw(g, spec)
        block = lay.block_of(spec) if lay._mode != "none" else L  # mamba_block_size
        return (spec.kind, None, block, page)
    return (spec.kind, spec.window, lay.block_of(spec), lay.block_of(spec) * spec.position_bytes(g.fmt_k, g.fmt_v, g.tp))


def plan_groups(keys: dict[int, tuple[Any, ...]]) -> tuple[str, list[tuple[tuple[Any, ...], list[int], int]], int]:
    """vLLM's grouping of the whole model (``get_kv_cache_groups``): ``(mode, parts,
    group_size)``; mode ``single`` (one spec), ``uniform`` (``UniformTypeKVCacheSpecs``:
    one type, several page sizes, one group) or ``hybrid`` (groups of ``group_size``
    layers, the last of a kind padded); each part is ``(key, layer indices, padding)``.

    Raises:
        GeometryError: hybrid groups whose page sizes differ.
    """
    buckets: dict[tuple[Any, ...], list[int]] = {}
    for i, k in keys.items():
        buckets.setdefault(k, []).append(i)
    kinds = {k[0] for k in buckets}
    if len(buckets) == 1:
        (key, members), = buckets.items()
        return "single", [(key, members, 0)], len(members)
    if len(kinds) == 1 and len({k[1] for k in buckets}) == 1 and RecurrentState.kind not in kinds:
        return "uniform", [(next(iter(buckets)), sorted(keys), 0)], 0
    pages = {k[3] for k in buckets}
    if len(pages) != 1:
        raise GeometryError(f"vllm layout: hybrid groups with different page sizes {sorted(pages)}")
    counts = [len(m) for m in buckets.values()]
    size = min(counts)
    if max(counts) < size * 1.5:
        size = max(counts)
    parts = []
    for key, members in buckets.items():
        n_groups = cdiv(len(members), size)
        for j in range(n_groups):
            part = members[j::n_groups]
            parts.append((key, part, size - len(part)))
    return "hybrid", parts, size


def stage_block_bytes(mode: str, parts: list[tuple[tuple[Any, ...], list[int], int]],
                       keys: dict[int, tuple[Any, ...]], stage: range) -> int:
    """Bytes one block costs on a rank of ``stage`` (``get_kv_cache_config_from_groups``
    on that worker's share of the global groups): ``uniform``: Σ of its layers' pages;
    otherwise page × the largest number of its layers in one group."""
    if mode == "uniform":
        return sum(int(keys[i][3]) for i in keys if i in stage)
    size = max(sum(1 for i in members if i in stage) for _, members, _ in parts)
    return int(parts[0][0][3]) * size


def pp_stages(lay: Any, n_layers: int, draft: int) -> list[range]:
    """Each pipeline stage's layer indices; speculative draft layers (appended after the
    model's) join the last stage, where vLLM builds the drafter."""
    st: list[range] = lay.stages(n_layers - draft)
    if draft:
        st[-1] = range(st[-1].start, n_layers)
    return st


def bottleneck_stage(lay: Any, g: Any, specs: list[Any]) -> range:
    """The layer indices of the pipeline stage that sets the pool: the most bytes per
    block, so the fewest blocks from equal budgets; on a tie, the stage whose layers hold
    the most (full and MLA layers' pages first, as they grow with the sequence, then all
    pages), then the first. ``lay`` is the bound layout, ``specs`` the whole model's
    engine specs."""
    draft = (g.model.config or {}).get(DRAFT_MARK) or 0
    keys = {i: spec_key(g, lay, s, 1) for i, s in enumerate(specs) if not isinstance(s, NoCache)}
    stages = pp_stages(lay, len(specs), draft)
    if not keys:
        return stages[0]
    mode, parts, _ = plan_groups(keys)

    def rank(st: range) -> tuple[int, int, int]:
        grows = sum(int(keys[i][3]) for i in keys if i in st and isinstance(specs[i], (FullAttention, MLAAttention)))
        return stage_block_bytes(mode, parts, keys, st), grows, sum(int(keys[i][3]) for i in keys if i in st)

    ranks = [rank(st) for st in stages]
    return stages[ranks.index(max(ranks))]
