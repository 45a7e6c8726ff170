"""vLLM's KV pool: groups, ``num_blocks``, the "GPU KV cache size" / "Maximum
concurrency" log lines, and speculative decoding's draft layers.

Rules (``vllm/v1/core/kv_cache_utils.py``, releases 0.9.1 … 0.33.0):

- **Groups.** Layers with one identical spec form one group
  (``num_blocks = avail // page // n_layers``); one type with different page sizes forms
  one ``UniformTypeKVCacheSpecs`` group (``num_blocks = avail // Σ pages``); a hybrid
  model is split into groups of ``group_size`` layers (the smallest kind's count, or the
  largest if that is < 1.5× the smallest), padding the last group of a kind, with
  ``num_blocks = avail // page // group_size``.
- **Concurrency** (``get_max_concurrency_for_kv_cache_config``):
  ``num_blocks / cdiv(Σ_groups max_memory_usage_bytes, page)``.
- **Token line** (``_report_kv_cache_config``): ≤ 0.20.0
  ``num_blocks // len(groups) × min(group block sizes)`` (a Mamba group's block size is
  ``mamba_block_size``: max_model_len with ``mamba_cache_mode="none"``, the attention
  block otherwise); 0.20.1 and later ``int(max_concurrency × max_model_len)``.
- **Speculative decoding** (``vllm/config/speculative.py``, ``vllm/v1/spec_decode/``):
  the draft's attention layers are registered in the same pool as the target's, so they
  join its groups: EAGLE / EAGLE-3 / draft-model methods add the layers of the draft's
  config (``speculative_config.model``); MTP methods (``mtp``, ``deepseek_mtp``,
  ``qwen3_next_mtp`` …) add the target's ``num_nextn_predict_layers`` /
  ``mtp_num_hidden_layers`` layers, shaped like its attention layers; ``ngram``,
  ``suffix`` and ``medusa`` add none. Every method gives Mamba layers
  ``num_speculative_tokens`` more conv columns and pages (``MambaSpec``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from kvgate.engines.vllm.groups import DRAFT_MARK, plan_groups, pp_stages, spec_key, stage_block_bytes
from kvgate.engines.vllm.pool import VLLM
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.specs import FullAttention, GeometryError, MLAAttention, NoCache, spec_of
from kvgate.model.spec import ModelSpec

_NO_KV_METHODS = ("ngram", "suffix", "medusa", "mlp_speculator", "ngram_gpu")
_DRAFT_METHODS = ("eagle", "eagle3", "draft_model", "dflash")


def speculative_model(model: ModelSpec, spec: dict[str, Any] | None,
                      loader: Callable[[str], ModelSpec] | None = None) -> ModelSpec:
    """``model`` with the draft layers that vLLM's speculative decoding adds to the KV
    pool appended (see module docstring); the model itself when there are none.

    Raises:
        GeometryError: an unknown ``method``, a draft method without ``model``, or an
            MTP method on a config without MTP layers.
    """
    if not spec or (model.config or {}).get(DRAFT_MARK) is not None:
        return model
    method = str(spec.get("method") or ("draft_model" if spec.get("model") else "")).lower()
    if method in _NO_KV_METHODS:
        return model
    if method in _DRAFT_METHODS:
        path = spec.get("model")
        if not path:
            raise GeometryError(f"speculative_config method {method!r} needs 'model': the draft's config path")
        if loader is None:
            from kvgate.model import load_model  # noqa: PLC0415
            loader = load_model
        draft = loader(str(path))
        extra = [l for l in draft.layers if not isinstance(spec_of(l), NoCache)]
        src = f"{method} draft {Path(str(path)).name}"
    elif method == "mtp" or method.endswith("_mtp"):
        cfg = model.config or {}
        n = cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or cfg.get("n_mtp_layers")
        if not isinstance(n, int) or n <= 0:
            raise GeometryError(f"speculative_config method {method!r}: the model config has no MTP layers",
                                hint="num_nextn_predict_layers / mtp_num_hidden_layers is missing or 0")
        base = next((l for l in model.layers if isinstance(spec_of(l), (MLAAttention, FullAttention))), None)
        if base is None:
            raise GeometryError("speculative_config method 'mtp': the model has no attention layer to copy")
        extra = [base] * n
        src = f"{n} MTP layer(s)"
    else:
        raise GeometryError(f"speculative_config method {method!r} is not modelled",
                            hint="eagle, eagle3, draft_model, mtp (or *_mtp), ngram, suffix, medusa")
    return replace(model, layers=list(model.layers) + extra,
                   config={**(model.config or {}), DRAFT_MARK: len(extra)},
                   notes=list(model.notes) + [f"vLLM speculative decoding: {src} join the KV pool "
                                              f"({len(extra)} layer(s))"])


def _pool_geometry(g: KVGeometry) -> KVGeometry:
    """The geometry with the speculative draft layers, built like ``g``."""
    lay: VLLM = g.layout  # type: ignore[assignment]
    if not lay._spec or (g.model.config or {}).get(DRAFT_MARK) is not None:
        return g
    m = speculative_model(g.model, lay._spec)
    if m is g.model:
        return g
    return KVGeometry(m, g.fmt_k, kv_format_v=g.fmt_v, tp=g.tp, layout=lay, state_format=g.fmt_state,
                      conv_format=g.fmt_conv, ssm_format=g.fmt_ssm)


def vllm_kv_cache_report(geometry: KVGeometry, available_bytes: int, max_model_len: int, *,
                         stage_available: list[int] | None = None) -> dict[str, Any]:
    """The KV pool vLLM builds from ``available_bytes`` ("Available KV cache memory" in its
    log, per rank) and the two figures it logs, computed as the layout's release does.

    Pipeline parallel (the layout's ``pipeline_parallel_size``): every stage gets the
    whole model's groups with its own layers in them and its own ``num_blocks``; vLLM
    keeps the least (``get_kv_cache_configs``). ``available_bytes`` is each stage's
    budget unless ``stage_available`` gives one per stage. Context parallel: see
    :mod:`kvgate.engines.vllm.pool`.

    Returns a dict: ``groups`` (kind, layers, padding layers, block size, page bytes,
    blocks per request), ``num_blocks``, ``max_concurrency`` (float, vLLM prints %.2f),
    ``gpu_kv_cache_tokens`` (what the layout's release prints),
    ``gpu_kv_cache_tokens_concurrency`` (int(max_concurrency × L), ≥ 0.20.1),
    ``gpu_kv_cache_tokens_blocks`` (num_blocks // groups × min block × cp, ≤ 0.20.0; also
    under its 0.1.0 name ``gpu_kv_cache_tokens_v0_10``), ``pool_bytes_per_block`` (of the
    stage that sets the pool), ``stages`` (per stage: layers, bytes per block, its own
    blocks), ``request_bytes``, ``draft_layers`` (speculative layers added), ``log_lines``.

    Raises:
        GeometryError: the geometry's layout is not ``vllm``, or bad inputs.
    """
    if not isinstance(geometry.layout, VLLM):
        raise GeometryError("vllm_kv_cache_report needs a geometry built with layout 'vllm'")
    if not isinstance(available_bytes, int) or isinstance(available_bytes, bool) or available_bytes < 0:
        raise GeometryError(f"available KV bytes must be a non-negative integer, got {available_bytes!r}")
    if not isinstance(max_model_len, int) or isinstance(max_model_len, bool) or max_model_len <= 0:
        raise GeometryError(f"max_model_len must be a positive integer, got {max_model_len!r}")
    g = _pool_geometry(geometry)
    lay: VLLM = g.layout  # type: ignore[assignment]
    draft = (g.model.config or {}).get(DRAFT_MARK) or 0
    specs = [lay.engine_spec(s) for s in g.specs]  # the whole model's, every stage's
    idx = [i for i, s in enumerate(specs) if not isinstance(s, NoCache)]
    if not idx:
        return {"groups": [], "num_blocks": 1, "max_concurrency": None, "gpu_kv_cache_tokens": None,
                "gpu_kv_cache_tokens_concurrency": None, "gpu_kv_cache_tokens_blocks": None,
                "gpu_kv_cache_tokens_v0_10": None, "request_bytes": 0, "draft_layers": draft, "log_lines": []}
    keys = {i: spec_key(g, lay, specs[i], max_model_len) for i in idx}
    mode, parts, _ = plan_groups(keys)
    stages = pp_stages(lay, len(specs), draft)
    if stage_available is not None and len(stage_available) != len(stages):
        raise GeometryError(f"stage_available has {len(stage_available)} budgets for {len(stages)} pipeline stages")
    budgets = stage_available if stage_available is not None else [available_bytes] * len(stages)
    rows: list[dict[str, Any]] = []
    held: list[tuple[int, int]] = []  # (num_blocks, bytes per block) of the stages holding KV layers
    for p, (st, avail) in enumerate(zip(stages, budgets)):
        per = stage_block_bytes(mode, parts, keys, st)
        rows.append({"stage": p, "first_layer": st.start, "layers": len(st), "bytes_per_block": per,
                     "available_bytes": avail, "num_blocks": avail // per if per else None})
        if per:
            held.append((avail // per, per))
    num_blocks = min(nb for nb, _ in held)
    pool_block = max(per for _, per in held)
    groups = [_group(lay, specs, key, members, pad, max_model_len) for key, members, pad in parts]
    if mode == "uniform":
        groups[0]["page_bytes"] = sum(keys[i][3] for i in idx)
    per_request = sum(grp["blocks_per_request"] for grp in groups)
    conc = num_blocks / per_request if per_request else None
    min_block = min(grp["block_size"] for grp in groups)
    by_conc = int(conc * max_model_len) if conc is not None else None
    by_blocks = num_blocks // len(groups) * min_block * lay.cp  # _report_kv_cache_config: num_tokens *= pcp × dcp
    tokens = by_conc if lay.prints_concurrency_tokens() else by_blocks
    out = {
        "groups": groups,
        "num_blocks": num_blocks,
        "pool_bytes_per_block": pool_block,
        "blocks_per_request": per_request,
        "max_concurrency": conc,
        "gpu_kv_cache_tokens": tokens,
        "gpu_kv_cache_tokens_concurrency": by_conc,
        "gpu_kv_cache_tokens_blocks": by_blocks,
        "gpu_kv_cache_tokens_v0_10": by_blocks,
        "request_bytes": per_request * pool_block,
        "draft_layers": draft,
        "mamba_cache_mode": lay._mode,
        "log_lines": [
            f"GPU KV cache size: {tokens:,} tokens" if tokens is not None else "",
            f"Maximum concurrency for {max_model_len:,} tokens per request: {conc:.2f}x" if conc is not None else "",
        ],
    }
    if len(stages) > 1:
        out["stages"] = rows
    if lay.cp > 1:
        out["cp_world_size"] = lay.cp
        if not lay.prints_concurrency_tokens():
            # _report_kv_cache_config: 0.11 names dcp alone, 0.12 … 0.20.0 pcp × dcp
            v = lay._version
            out["log_lines"].insert(0, f"Multiplying the GPU KV cache size by the dcp_world_size {lay.cp}."
                                    if v is not None and v < (0, 12) else
                                    f"Multiplying the GPU KV cache size by the cp_world_size {lay.cp} "
                                    f"(pcp_world_size {lay.prefill_context_parallel_size} * dcp_world_size "
                                    f"{lay.decode_context_parallel_size}).")
    return out


def _group(lay: VLLM, specs: list[Any], key: tuple[Any, ...], members: list[int], padding: int, L: int) -> dict[str, Any]:
    return {
        "kind": key[0],
        "window": key[1],
        "layers": len(members),
        "layer_indices": members,
        "padding_layers": padding,
        "block_size": key[2],
        "page_bytes": key[3],
        "blocks_per_request": lay.blocks(specs[members[0]], L),
    }
