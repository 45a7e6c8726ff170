"""vLLM's paged KV layout (V1 engine) and its "GPU KV cache size" / "Maximum concurrency" log lines.

Rules, each from the vLLM source named:

- **Pages.** Every attention layer stores blocks of ``block_size`` B tokens (default 16,
  ``--block-size``). Page bytes of one layer = B × bytes per token of that layer:
  ``FullAttentionSpec.real_page_size_bytes`` = B·kv_heads·(head_size + head_size_v)·dtype
  (+ 2·B·kv_heads·4 for the per-token-head scale modes, ``AttentionSpec.page_size_bytes``);
  MLA ``MLAAttentionSpec`` = B·(kv_lora_rank + qk_rope_head_dim)·dtype, one latent, no V
  (``vllm/v1/kv_cache_interface.py``). kvgate's per-position bytes are exactly these.
- **Blocks per request at max_model_len L** (``max_memory_usage_bytes``):
  full / MLA ``cdiv(L, B)``; sliding window W
  ``cdiv(min(W − 1 + max_num_batched_tokens, L), B) + 1``; chunked-local attention
  (Llama-4) ``cdiv(min(C + max_num_batched_tokens, L), B)``; Mamba 1 page
  (+1 with ``mamba_cache_mode="align"``, + speculative blocks).
  ``--disable-hybrid-kv-cache-manager`` turns sliding layers into full ones
  (``unify_hybrid_kv_cache_specs``).
- **Hybrid attention + Mamba** (``vllm/platforms/interface.py``, formerly
  ``HybridAttentionMambaModelConfig`` in ``vllm/model_executor/models/config.py``): the
  attention block size grows to ``align·cdiv(mamba_page, align·attn_page_per_token)``
  (align = the attention kernel's block alignment, 16 for FlashAttention) and the Mamba
  page is padded to exactly the attention page. Mamba state shapes are
  ``MambaStateShapeCalculator``'s (conv keeps ``conv_kernel − 1`` columns) in the model
  dtype by default (``mamba_cache_dtype="auto"``).
- **Groups and the pool** (``vllm/v1/core/kv_cache_utils.py``): layers with one identical
  spec form one group (``num_blocks = avail // page // n_layers``); one type with
  different page sizes forms one ``UniformTypeKVCacheSpecs`` group
  (``num_blocks = avail // Σ pages``); a hybrid model is split into groups of
  ``group_size`` layers (the smallest kind's count, or the largest if that is < 1.5×
  the smallest), padding the last group of a kind, with
  ``num_blocks = avail // page // group_size``.
- **The log lines** (``_report_kv_cache_config``, ``get_max_concurrency_for_kv_cache_config``):
  ``max_concurrency = num_blocks / Σ_groups cdiv(max_memory_usage_bytes, page_bytes)``;
  current vLLM prints ``GPU KV cache size: int(max_concurrency × L) tokens``; vLLM
  0.10–0.11 printed ``num_blocks // n_groups × min block_size`` tokens (both are given).

Per-slot bytes (:meth:`VLLM.positions`) are whole blocks per layer, without group padding;
:func:`vllm_kv_cache_report` gives the pool view with padding, as vLLM sizes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from kvgate.geometry.base import GeometryError, Layout, state_values_per_rank
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.formats import get_format
from kvgate.model.spec import LayerSpec


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints (vLLM ``cdiv``)."""
    return -(-a // b)


@dataclass
class VLLM(Layout):
    """vLLM V1's paged layout. All figures per tensor-parallel rank.

    Args:
        block_size: tokens per block (``--block-size``, default 16).
        max_num_batched_tokens: the scheduler's token budget per step
            (``--max-num-batched-tokens``); it sets how many blocks a sliding layer holds.
            vLLM's default depends on version, GPU and entry point (2,048 … 16,384); pass
            the value your engine logs. Default here: 2,048.
        disable_hybrid_kv_cache_manager: sliding layers allocated at full length.
        kernel_block_alignment: attention kernel block alignment used to size the
            attention block for hybrid Mamba models (16 for FlashAttention).
        state_format: Mamba / linear state dtype (``mamba_cache_dtype``; ``auto`` = the
            model dtype, bf16 for most checkpoints).
        mamba_cache_mode: ``none`` (1 state page per request) or ``align`` (2).
        num_speculative_blocks: extra Mamba pages for speculative decoding.
    """

    block_size: int = 16
    max_num_batched_tokens: int = 2048
    disable_hybrid_kv_cache_manager: bool = False
    kernel_block_alignment: int = 16
    state_format: str = "bf16"
    mamba_cache_mode: str = "none"
    num_speculative_blocks: int = 0
    name = "vllm"
    # filled by bind(): block size per layer spec, padded Mamba page
    _block: dict[LayerSpec, int] = field(default_factory=dict, repr=False)
    _mamba_page: int | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for k in ("block_size", "max_num_batched_tokens", "kernel_block_alignment"):
            v = getattr(self, k)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise GeometryError(f"vllm layout: {k} must be a positive integer, got {v!r}")
        if self.mamba_cache_mode not in ("none", "align"):
            raise GeometryError(
                f"vllm layout: mamba_cache_mode {self.mamba_cache_mode!r} not modelled", hint="none or align"
            )
        get_format(self.state_format)

    # -- binding to a model
    def bind(self, geometry: KVGeometry) -> "VLLM":
        """Fit block sizes to the model: Mamba page alignment, then page-size unification
        (``unify_kv_cache_spec_page_size``: a layer with a smaller page gets a block size
        × (max page / its page)).

        Raises:
            GeometryError: attention page sizes that do not divide the largest one (vLLM
                raises NotImplementedError there).
        """
        b = replace(self, _block={}, _mamba_page=None)
        layers = geometry.model.layers
        attn = [(l, geometry.position_bytes(i)) for i, l in enumerate(layers) if l.kind in ("full", "sliding", "mla")]
        linear = [l for l in layers if l.kind == "linear"]
        block = self.block_size
        if linear and attn:
            per_token = max(p for _, p in attn)
            mamba_raw = max(b._mamba_raw(geometry, l) for l in linear)
            align = self.kernel_block_alignment
            block = max(block, align * cdiv(mamba_raw, align * per_token))
        pages = {l: block * p for l, p in attn}
        top = max(pages.values(), default=0)
        for l, p in attn:
            if top % (block * p):
                raise GeometryError(
                    "vllm layout: attention page sizes differ and do not divide each other "
                    f"({block * p} vs {top} bytes); vLLM cannot unify them either"
                )
            b._block[l] = block * (top // (block * p))
        if linear:
            b._mamba_page = top if attn else None
        return b

    def _mamba_raw(self, g: KVGeometry, layer: LayerSpec) -> int:
        conv, ssm = state_values_per_rank(layer, g.tp)
        return get_format(self.state_format).vector_bytes(conv + ssm)

    def block_of(self, layer: LayerSpec) -> int:
        """Tokens per block of this layer after binding (``block_size`` before)."""
        return self._block.get(layer, self.block_size)

    def blocks(self, layer: LayerSpec, max_seq: int) -> int:
        """Blocks one request at ``max_seq`` holds in this layer (``max_memory_usage_bytes``
        / page); Mamba layers hold ``1 (+1 align) + speculative`` pages."""
        B = self.block_of(layer)
        kind = layer.kind
        if kind == "sliding" and self.disable_hybrid_kv_cache_manager:
            kind = "full"
        if kind in ("full", "mla"):
            return cdiv(max_seq, B)
        if kind == "sliding" and layer.chunked:  # ChunkedLocalAttentionSpec
            return cdiv(min((layer.window or max_seq) + self.max_num_batched_tokens, max_seq), B)
        if kind == "sliding":
            return cdiv(min((layer.window or max_seq) - 1 + self.max_num_batched_tokens, max_seq), B) + 1
        if kind == "linear":
            return (2 if self.mamba_cache_mode == "align" else 1) + self.num_speculative_blocks
        return 0

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        if layer.kind == "linear":
            return 0
        return self.blocks(layer, max_seq) * self.block_of(layer)

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        page = self._mamba_page if self._mamba_page is not None else self._mamba_raw(geometry, layer)
        return page * self.blocks(layer, 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "block_size": self.block_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "disable_hybrid_kv_cache_manager": self.disable_hybrid_kv_cache_manager,
            "kernel_block_alignment": self.kernel_block_alignment,
            "state_format": self.state_format,
            "mamba_cache_mode": self.mamba_cache_mode,
            "num_speculative_blocks": self.num_speculative_blocks,
        }


def _spec_key(g: KVGeometry, lay: VLLM, i: int) -> tuple:
    layer = g.model.layers[i]
    kind = layer.kind
    if kind == "sliding" and lay.disable_hybrid_kv_cache_manager:
        kind = "full"
    page = lay.block_of(layer) * g.position_bytes(i) if kind != "linear" else g.layer_bytes(i, 1) // max(1, lay.blocks(layer, 1))
    window = layer.window if kind == "sliding" else None
    if kind == "sliding" and layer.chunked:
        kind = "chunked"
    return (kind, window, lay.block_of(layer), page)


def vllm_kv_cache_report(geometry: KVGeometry, available_bytes: int, max_model_len: int) -> dict[str, Any]:
    """The KV pool vLLM builds from ``available_bytes`` ("Available KV cache memory" in its
    log, per rank) and the two figures it logs, computed as vLLM computes them.

    Returns a dict: ``groups`` (kind, layers, padding layers, block size, page bytes,
    blocks per request), ``num_blocks``, ``max_concurrency`` (float, vLLM prints %.2f),
    ``gpu_kv_cache_tokens`` (current vLLM: int(max_concurrency × L)),
    ``gpu_kv_cache_tokens_v0_10`` (vLLM 0.10–0.11: num_blocks // groups × block),
    ``request_bytes`` (pool bytes one request at L takes, group padding included).

    Raises:
        GeometryError: the geometry's layout is not ``vllm``, or bad inputs.
    """
    lay = geometry.layout
    if not isinstance(lay, VLLM):
        raise GeometryError("vllm_kv_cache_report needs a geometry built with layout 'vllm'")
    if not isinstance(available_bytes, int) or available_bytes < 0:
        raise GeometryError(f"available KV bytes must be a non-negative integer, got {available_bytes!r}")
    if not isinstance(max_model_len, int) or max_model_len <= 0:
        raise GeometryError(f"max_model_len must be a positive integer, got {max_model_len!r}")
    idx = [i for i, l in enumerate(geometry.model.layers) if l.kind != "shared"]
    if not idx:
        return {"groups": [], "num_blocks": 1, "max_concurrency": None, "gpu_kv_cache_tokens": None,
                "gpu_kv_cache_tokens_v0_10": None, "request_bytes": 0}
    keys = {i: _spec_key(geometry, lay, i) for i in idx}
    buckets: dict[tuple, list[int]] = {}
    for i in idx:
        buckets.setdefault(keys[i], []).append(i)
    pages = {k[3] for k in buckets}
    kinds = {k[0] for k in buckets}
    groups: list[dict[str, Any]] = []
    if len(buckets) == 1:
        (key, members), = buckets.items()
        size, page = len(members), key[3]
        num_blocks = available_bytes // page // size
        groups.append(_group(lay, geometry, key, members, 0, max_model_len))
        pool_block = page * size
    elif len(kinds) == 1 and len({k[1] for k in buckets}) == 1:
        # UniformTypeKVCacheSpecs: one type, different page sizes -> one group
        total_page = sum(keys[i][3] for i in idx)
        num_blocks = available_bytes // total_page
        g = _group(lay, geometry, next(iter(buckets)), idx, 0, max_model_len)
        g["page_bytes"] = total_page
        groups.append(g)
        pool_block = total_page
    else:
        if len(pages) != 1:
            raise GeometryError(f"vllm layout: hybrid groups with different page sizes {sorted(pages)}")
        counts = [len(m) for m in buckets.values()]
        size = min(counts)
        if max(counts) < size * 1.5:
            size = max(counts)
        for key, members in buckets.items():
            n_groups = cdiv(len(members), size)
            for j in range(n_groups):
                part = members[j::n_groups]
                groups.append(_group(lay, geometry, key, part, size - len(part), max_model_len))
        page = pages.pop()
        num_blocks = available_bytes // page // size
        pool_block = page * size
    per_request = sum(g["blocks_per_request"] for g in groups)
    conc = num_blocks / per_request if per_request else None
    min_block = min(g["block_size"] for g in groups)
    return {
        "groups": groups,
        "num_blocks": num_blocks,
        "pool_bytes_per_block": pool_block,
        "blocks_per_request": per_request,
        "max_concurrency": conc,
        "gpu_kv_cache_tokens": int(conc * max_model_len) if conc is not None else None,
        "gpu_kv_cache_tokens_v0_10": num_blocks // len(groups) * min_block,
        "request_bytes": per_request * pool_block,
        "log_lines": [
            f"GPU KV cache size: {int(conc * max_model_len):,} tokens" if conc is not None else "",
            f"Maximum concurrency for {max_model_len:,} tokens per request: {conc:.2f}x" if conc is not None else "",
        ],
    }


def _group(lay: VLLM, g: KVGeometry, key: tuple, members: list[int], padding: int, L: int) -> dict[str, Any]:
    layer = g.model.layers[members[0]]
    return {
        "kind": key[0],
        "window": key[1],
        "layers": len(members),
        "layer_indices": members,
        "padding_layers": padding,
        "block_size": key[2],
        "page_bytes": key[3],
        "blocks_per_request": lay.blocks(layer, L),
    }
