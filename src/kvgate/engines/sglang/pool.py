"""SGLang's token-to-KV pool: what one token costs in each layer, the cell SGLang's memory
profile divides by, and the bytes its "KV Cache is allocated" line prints.

Read from sgl-project/sglang (``python/sglang/srt/``) at v0.5.9 (the first release whose
``configs/model_config.py`` ``is_deepseek_nsa`` lists GLM-5's ``GlmMoeDsaForCausalLM``
beside DeepSeek-V3.2's ``DeepseekV32ForCausalLM``); the same code at v0.5.5:

- ``mem_cache/memory_pool.py`` ``MHATokenToKVPool``: per layer a K and a V buffer of
  ``[size + page_size, head_num, head_dim]`` in the cache dtype (fp8 stored as uint8).
- ``MLATokenToKVPool``: per layer one ``kv_buffer [size + page_size, 1, kv_cache_dim]``,
  ``kv_cache_dim = kv_lora_rank + qk_rope_head_dim`` in the cache dtype.
- ``NSATokenToKVPool`` (DeepSeek sparse attention, "DSA"/"NSA": DeepSeek-V3.2, GLM-5):
  under ``fp8_e4m3`` the ``kv_buffer`` is uint8 of ``kv_lora_rank + kv_lora_rank // 128 × 4
  + qk_rope_head_dim × 2`` bytes: the fp8 latent, one f32 scale per 128 values
  (``quant_block_size``) and the rope part in bf16 (``rope_storage_dtype``):
  512 + 16 + 128 = 656 B; under ``bfloat16`` the plain (512 + 64) × 2 = 1,152 B. Its
  indexer key cache ``index_k_with_scale_buffer`` is per layer uint8
  ``[(size + page_size + 1) // page_size, page_size × (index_head_dim + index_head_dim //
  128 × 4)]``: 128 fp8 keys + one f32 scale = 132 B per token whatever the KV dtype;
  ``page_size`` must be 64 (asserted; ``server_args.py`` sets 64 for DSA on CUDA).
  Other KV dtypes are refused (``server_args.py``: "DeepSeek NSA only supports
  bf16/bfloat16 or fp8_e4m3 kv_cache_dtype").
- "KV size" / "K size, V size" (``_finalize_allocation_log``): ``get_kv_size_bytes`` (for
  DSA the ``kv_buffer``\\ s plus the index buffers) divided by ``GB = 1024 ** 3``.
- The cell ``max_total_num_tokens`` divides by (``model_runner.py``
  ``profile_max_num_token`` at v0.5.5; ``model_runner_kv_cache_mixin.py``
  ``get_cell_size_per_token`` at v0.5.9; ``model_executor/pool_configurator.py``
  ``_compute_cell_size`` from v0.5.12): MHA ``kv_heads/tp × (head_dim + v_head_dim)``
  × itemsize per layer; MLA ``(kv_lora_rank + qk_rope_head_dim) × itemsize`` per layer
  plus, for DSA, the indexer's 132 B. Before v0.5.17 that MLA part is 576 B per layer
  under fp8 although the DSA pool then stores 656 B (the profile counts 708 B per layer,
  the pool holds 788 B: 11% past ``--mem-fraction-static``); from v0.5.17
  ``_compute_cell_size`` takes ``calculate_mla_kv_cache_dim`` (656 B).

Not modelled: the trtllm DSA backends (raw 576-byte rows, ``--dsa-*-backend trtllm``), HIP,
HiSparse, NPU, and later releases' indexer elision on layers that skip top-k.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from kvgate.geometry.base import Geometry, GeometryError, Layout, rule_for
from kvgate.geometry.formats import KVFormat
from kvgate.geometry.specs import (
    ChunkedLocal,
    FullAttention,
    LayerKind,
    MLAAttention,
    NoCache,
    RecurrentState,
    SlidingWindow,
    spec_of,
)
from kvgate.model.spec import LayerSpec, ModelSpec

#: ``NSATokenToKVPool.quant_block_size``: one f32 scale per this many fp8 values
DSA_QUANT_BLOCK = 128
#: the page size SGLang forces for DSA models on CUDA (``server_args.py``; asserted by the pool)
DSA_PAGE_SIZE = 64
#: the first release whose cell takes the DSA pool's own fp8 row (``calculate_mla_kv_cache_dim``)
CELL_USES_DSA_ROW = (0, 5, 17)


@dataclass(frozen=True, kw_only=True)
class SglangDSA(MLAAttention):
    """An MLA layer of a DSA model as SGLang's ``NSATokenToKVPool`` stores it (module
    docstring): the latent row in the KV dtype's DSA layout plus the indexer's fp8 keys
    and f32 scales, whatever the KV dtype.

    Attributes:
        rope_dim: ``qk_rope_head_dim`` (the bf16 part of the fp8 row), ``None`` if unknown.
    """

    rope_dim: int | None = None

    def latent_bytes(self, fmt: KVFormat) -> int:
        """One token's ``kv_buffer`` row: fp8 ``kv_lora_rank + kv_lora_rank // 128 × 4 +
        qk_rope_head_dim × 2`` (GLM-5, DeepSeek-V3.2: 656 B); bf16 ``(kv_lora_rank +
        qk_rope_head_dim) × 2`` (1,152 B).

        Raises:
            GeometryError: a KV format SGLang refuses for DSA models, an fp8 row without
                ``qk_rope_head_dim``, or a ``kv_lora_rank`` that is not a multiple of 128.
        """
        if fmt.name == "bf16":
            return fmt.vector_bytes(self.latent_dim)
        if fmt.name != "fp8":
            raise GeometryError(f"SGLang runs DSA models (DeepSeek-V3.2, GLM-5) with a bf16 or fp8_e4m3 KV cache "
                                f"only, not {fmt.name}", hint="--kv-cache-dtype bfloat16 or fp8_e4m3")
        if self.rope_dim is None:
            raise GeometryError("SGLang's fp8 DSA cache row needs qk_rope_head_dim (stored in bf16), and the "
                                "config has none")
        rank = self.latent_dim - self.rope_dim
        if rank <= 0 or rank % DSA_QUANT_BLOCK:
            raise GeometryError(f"SGLang's fp8 DSA cache needs kv_lora_rank a multiple of {DSA_QUANT_BLOCK}, "
                                f"got {rank}")
        return rank + rank // DSA_QUANT_BLOCK * 4 + self.rope_dim * 2

    def index_bytes(self) -> int:
        """One token's indexer key row: ``index_head_dim`` fp8 values + one f32 scale per
        128 (132 B for ``index_head_dim`` 128)."""
        return self.index_dim + self.index_dim // DSA_QUANT_BLOCK * 4

    def k_bytes(self, fmt: KVFormat, tp: int) -> int:
        return self.latent_bytes(fmt) + self.index_bytes()

    def budget_row_bytes(self, fmt: KVFormat, version: tuple[int, ...] | None) -> int:
        """The bytes per token SGLang's memory profile counts for this layer (the cell it
        divides its budget by): from v0.5.17 the stored row (:meth:`k_bytes`); before, and
        when the release is unknown, ``(kv_lora_rank + qk_rope_head_dim) × element_size``
        of the KV dtype plus the indexer row (``calculate_mla_kv_cache_dim``)."""
        if version is not None and version >= CELL_USES_DSA_ROW:
            return self.k_bytes(fmt, 1)
        return fmt.vector_bytes(self.latent_dim) + self.index_bytes()


def dsa_index_dim(model: ModelSpec) -> int:
    """The DSA indexer's key width SGLang gives every layer of ``model`` (its
    ``index_head_dim``), 0 for a model without DeepSeek sparse attention."""
    return max((layer.index_dim for layer in model.layers if layer.kind == "mla"), default=0)


def is_dsa(model: ModelSpec) -> bool:
    """Whether SGLang serves ``model`` with its DSA pool (``NSATokenToKVPool``)."""
    return dsa_index_dim(model) > 0


@dataclass
class SGLang(Layout):
    """SGLang's token pool: every layer holds every token (sliding layers at full length,
    as ``MHATokenToKVPool``), a sequence takes whole pages, DSA layers are
    :class:`SglangDSA`. All figures per tensor-parallel rank.

    Args:
        page_size: ``--page-size``; ``None``: SGLang's default, 64 for DSA models, else 1.
        version: the SGLang release whose cell rule applies (``"0.5.5"``); ``None``: the
            rule of the newest release modelled (before v0.5.17).
        qk_rope_head_dim: the rope part of the MLA latent (the bf16 part of a DSA fp8 row);
            ``None``: the model config's (a record keeps it here: its layers do not).

    Raises:
        GeometryError: a page size that is not a positive integer, or not 64 for a DSA
            model (``NSATokenToKVPool`` asserts it).
    """

    page_size: int | None = None
    version: str | None = None
    qk_rope_head_dim: int | None = None
    name = "sglang"
    _page: int = field(default=1, init=False, repr=False, compare=False)
    _index_dim: int = field(default=0, init=False, repr=False, compare=False)
    _rope_dim: int | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for k in ("page_size", "qk_rope_head_dim"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise GeometryError(f"sglang layout: {k} must be a positive integer, got {v!r}")

    def bind(self, geometry: Geometry) -> SGLang:
        out = SGLang(page_size=self.page_size, version=self.version, qk_rope_head_dim=self.qk_rope_head_dim)
        out._index_dim = dsa_index_dim(geometry.model)
        rope = self.qk_rope_head_dim or geometry.model.config.get("qk_rope_head_dim")
        out._rope_dim = rope if isinstance(rope, int) and not isinstance(rope, bool) else None
        out._page = self.page_size or (DSA_PAGE_SIZE if out._index_dim else 1)
        if out._index_dim and out._page != DSA_PAGE_SIZE:
            raise GeometryError(f"SGLang's DSA pool needs --page-size {DSA_PAGE_SIZE}, got {out._page}")
        return out

    @property
    def page(self) -> int:
        """The page size in force (after :meth:`bind`)."""
        return self._page

    def engine_spec(self, spec: LayerKind) -> LayerKind:
        if isinstance(spec, MLAAttention) and self._index_dim:
            return SglangDSA(latent_dim=spec.latent_dim, index_dim=self._index_dim, rope_dim=self._rope_dim)
        return spec.at_full_length()

    def positions(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        spec = spec_of(layer)
        return rule_for(_POSITIONS, spec, self.name)(max_seq, self._page)

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "page_size": self.page_size, "version": self.version,
                "qk_rope_head_dim": self.qk_rope_head_dim}


def _pages(L: int, page: int) -> int:
    return -(-L // page) * page


# positions one sequence of L reserves, per spec type: whole pages of every token
_POSITIONS: dict[type[LayerKind], Callable[[int, int], int]] = {
    FullAttention: _pages,
    SlidingWindow: _pages,
    ChunkedLocal: _pages,
    MLAAttention: _pages,
    SglangDSA: _pages,
    RecurrentState: lambda L, page: 0,
    NoCache: lambda L, page: 0,
}


def _layout(geo: Any) -> SGLang:
    lay = geo.layout
    if not isinstance(lay, SGLang):
        raise GeometryError(f"an SGLang pool needs the sglang layout, got {lay.name!r}")
    return lay


def _version(text: str | None) -> tuple[int, ...] | None:
    """``"0.5.5.post3"`` → ``(0, 5, 5)``; ``None`` (or no leading number) → ``None``, the
    newest rule modelled."""
    m = re.match(r"v?(\d+(?:\.\d+)*)", (text or "").strip())
    return tuple(int(x) for x in m.group(1).split(".")) if m else None


def cell_bytes(geo: Any) -> int:
    """The cell SGLang divides its KV budget by: bytes of one token over all layers on one
    rank as its profile counts them (module docstring; release rule of the layout's
    ``version``). ``max_total_num_tokens = budget // cell_bytes``, rounded down to a page.

    GLM-5 (78 layers), bf16: 78 × (1,152 + 132) = 100,152 B; fp8 before v0.5.17:
    78 × (576 + 132) = 55,224 B, from v0.5.17 78 × (656 + 132) = 61,464 B.

    Raises:
        GeometryError: ``geo`` is not laid out by :class:`SGLang`.
    """
    lay = _layout(geo)
    v = _version(lay.version)
    total = 0
    for i, spec in enumerate(geo.engine_specs):
        if isinstance(spec, SglangDSA):
            total += spec.budget_row_bytes(geo.fmt_k, v)
        else:
            total += geo.position_bytes(i)
    return total


@dataclass(frozen=True)
class SglangPool:
    """The bytes SGLang allocates for a pool of ``tokens`` tokens (per rank).

    Attributes:
        tokens: ``#tokens`` (``max_total_num_tokens``).
        page_size: the page size in force.
        mla: an MLA pool (one "KV size"), else MHA (K and V sizes).
        k_bytes: MHA K buffers, or the MLA ``kv_buffer``\\ s: (tokens + page) × row × layers.
        v_bytes: MHA V buffers (0 for MLA).
        index_bytes: DSA indexer buffers: ((tokens + page + 1) // page) × page × 132 × layers.
    """

    tokens: int
    page_size: int
    mla: bool
    k_bytes: int
    v_bytes: int
    index_bytes: int

    @property
    def total(self) -> int:
        """All of it: what "KV size" (or K size + V size) adds up."""
        return self.k_bytes + self.v_bytes + self.index_bytes

    def log_line(self) -> str:
        """The line SGLang prints (``_finalize_allocation_log``, "GB" = 2^30 B)."""
        gb = 2**30
        if self.mla:
            return f"KV Cache is allocated. #tokens: {self.tokens}, KV size: {self.total / gb:.2f} GB"
        return (f"KV Cache is allocated. #tokens: {self.tokens}, K size: {self.k_bytes / gb:.2f} GB, "
                f"V size: {self.v_bytes / gb:.2f} GB")


def pool_bytes(geo: Any, tokens: int) -> SglangPool:
    """What SGLang allocates for ``tokens`` tokens under ``geo`` (an :class:`SGLang`
    geometry): ``MHATokenToKVPool`` K and V of ``tokens + page_size`` rows per layer, or
    ``MLATokenToKVPool`` / ``NSATokenToKVPool`` rows plus the DSA index pages (module
    docstring). DeepSeek-V3.2 (61 layers) fp8, 975,424 tokens:
    975,488 × 656 × 61 + 15,242 × 64 × 132 × 61 = 46,889,757,184 B ("43.67 GB").

    Raises:
        GeometryError: ``geo`` not laid out by :class:`SGLang`, or a negative ``tokens``.
    """
    lay = _layout(geo)
    if not isinstance(tokens, int) or tokens < 0:
        raise GeometryError(f"tokens must be a non-negative integer, got {tokens!r}")
    page = lay.page
    rows = tokens + page
    specs = geo.engine_specs
    if any(isinstance(s, MLAAttention) for s in specs):
        kv = sum(rows * s.latent_bytes(geo.fmt_k) for s in specs if isinstance(s, MLAAttention))
        idx_rows = (tokens + page + 1) // page * page
        idx = sum(idx_rows * s.index_bytes() for s in specs if isinstance(s, SglangDSA))
        return SglangPool(tokens, page, True, kv, 0, idx)
    k = sum(rows * s.k_bytes(geo.fmt_k, geo.tp) for s in specs)
    v = sum(rows * s.v_bytes(geo.fmt_v, geo.tp) for s in specs)
    return SglangPool(tokens, page, False, k, v, 0)
