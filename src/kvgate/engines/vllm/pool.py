"""vLLM's paged KV layout (V1 engine), per release.

Rules, each from the vLLM source named (read in the release sdists 0.9.1, 0.10.1,
0.17.1, 0.19.1, 0.20.0, 0.20.1, 0.22.0 and 0.33.0):

- **Pages.** Every attention layer stores blocks of ``block_size`` B tokens (default 16,
  ``--block-size``). Page bytes of one layer = B × bytes per token of that layer
  (``FullAttentionSpec.real_page_size_bytes``; MLA ``MLAAttentionSpec`` one latent, no V;
  ``vllm/v1/kv_cache_interface.py``). kvgate's per-position bytes are exactly these.
- **Blocks per request at max_model_len L** (``max_memory_usage_bytes``): full / MLA
  ``cdiv(L, B)``; sliding window W ``cdiv(min(W − 1 + max_num_batched_tokens, L), B) + 1``;
  chunked-local ``cdiv(min(C + max_num_batched_tokens, L), B)``; Mamba
  ``1 + num_speculative_blocks`` pages (``mamba_cache_mode="none"``),
  ``2 + num_speculative_blocks`` (``"align"``), ``cdiv(L, B)`` (``"all"``).
  ``--disable-hybrid-kv-cache-manager`` turns sliding layers into full ones.
- **Mamba state** (``model_executor/layers/mamba/mamba_utils.py``): conv state
  ``(conv_kernel − 1 + num_spec) × conv_dim/tp`` in ``mamba_cache_dtype`` (``auto`` = the
  model dtype); SSM state in ``mamba_ssm_cache_dtype`` (``auto`` = the conv dtype, except
  that ``Qwen3_5ForConditionalGenerationConfig`` takes the HF config's ``mamba_ssm_dtype``
  and ``NemotronHForCausalLMConfig`` its ``mamba_ssm_cache_dtype`` or float16;
  ``model_executor/models/config.py``). ``num_spec`` = ``num_speculative_tokens``.
- **Hybrid block size** (``HybridAttentionMambaModelConfig``): with
  ``mamba_cache_mode`` none/align the attention block is
  ``align·cdiv(mamba_page, align·attn_page_per_token)``; with ``all`` it is
  ``c·cdiv(cdiv(mamba_page, attn_page_per_token), c)``, c = lcm(chunk size, align)
  (chunk size = ``mamba_chunk_size`` / ``chunk_size`` of the config, else 2,048). align is
  16 (FlashAttention), 64 for MLA. The Mamba page is padded to the attention page.
- **Prefix caching and Mamba modes** (``MambaModelConfig``, ``ModelConfig.
  is_prefix_caching_supported``): prefix caching is on by default for plain decoders and
  off for hybrid / attention-free models. Turned on for a Mamba model it selects
  ``mamba_cache_mode`` ``all`` for models with ``SupportsMambaPrefixCaching`` (Mamba,
  Mamba-2, Jamba, Bamba, Nemotron-H, Falcon-H1, Granite-4, Zamba-2) and ``align``
  otherwise (Qwen3-Next, Qwen3.5 gated delta net); off, it forces ``none``.
- **The token line** (``_report_kv_cache_config``): vLLM ≤ 0.20.0 prints
  ``num_blocks // len(groups) × min(block sizes)`` tokens; 0.20.1 and later print
  ``int(max_concurrency × max_model_len)``. ``version=None`` means the newer rule.
- **Speculative decoding** (``speculative_config``, vLLM's ``--speculative-config`` JSON):
  see :mod:`kvgate.engines.vllm.pool_report`.
- **Pipeline parallelism** (``--pipeline-parallel-size``, ``vllm/distributed/utils.py``
  ``get_pp_indices``, 0.12.0 … 0.33.0): stage p holds layers
  ``[Σ parts[:p], Σ parts[:p+1])``; ``parts`` is ``VLLM_PP_LAYER_PARTITION`` when set
  (``pp_layer_partition``), else ``n // pp`` each with the ``n % pp`` left over added one
  each to ``parts[-2], parts[-3], …`` (61 layers over 4 stages: [15, 15, 16, 15]). A rank
  holds only its stage's layers (:meth:`VLLM.rank_specs`); the per-rank figures are those
  of the stage that sets the pool (the most bytes per block: the fewest blocks,
  ``get_kv_cache_configs`` takes the minimum ``num_blocks`` over workers). Speculative
  draft layers live on the last stage (``GPUModelRunner``: the drafter is built on
  ``get_pp_group().is_last_rank``).
- **Decode context parallelism** (``--decode-context-parallel-size``; prefill context
  parallel alike, ``cp`` = dcp × pcp): one rank holds ``cdiv(L, cp)`` tokens of a
  request in full and MLA layers (``FullAttentionSpec.max_memory_usage_bytes``); the
  pool bytes per rank are as without it. The token line counts all cp ranks' tokens: ≤
  0.20.0 ``num_tokens *= pcp × dcp`` ("Multiplying the GPU KV cache size by the
  cp_world_size …", ``_report_kv_cache_config``), from 0.20.1 ``int(max_concurrency ×
  L)`` with that concurrency. vLLM asserts "DCP not support sliding window"
  (``SlidingWindowSpec``): refused here too.

Per-slot bytes (:meth:`VLLM.positions`) are whole blocks per layer, without group padding;
:func:`vllm_kv_cache_report` gives the pool view with padding, as vLLM sizes it.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from kvgate.engines.vllm.cross import VllmCrossAttention, vllm_cross
from kvgate.engines.vllm.groups import bottleneck_stage
from kvgate.geometry.base import Geometry, GeometryError, Layout, cdiv, rule_for
from kvgate.geometry.formats import MODEL_DTYPES, KVFormat, get_format
from kvgate.geometry.specs import (
    AttentionKV,
    ChunkedLocal,
    FullAttention,
    LayerKind,
    MLAAttention,
    NoCache,
    RecurrentState,
    SlidingWindow,
    spec_of,
)
from kvgate.model.spec import LayerSpec

#: vLLM's default ``--block-size`` (``CacheConfig.block_size``): tokens per block
DEFAULT_BLOCK_SIZE = 16
#: vLLM's ``max_num_batched_tokens`` when kvgate is not told (the scheduler's floor)
DEFAULT_MAX_NUM_BATCHED_TOKENS = 2048
#: first release that prints ``int(max_concurrency × max_model_len)`` tokens
TOKEN_LINE_CHANGED = (0, 20, 1)
MAMBA_CACHE_MODES = ("none", "align", "all")
# mixers whose vLLM model class has SupportsMambaPrefixCaching (models/*.py, 0.17.1)
_PREFIX_ALL_MIXERS = ("mamba", "mamba2")


def parse_version(v: str | None) -> tuple[int, ...] | None:
    """``"0.17.1"`` → ``(0, 17, 1)``; ``None`` stays ``None`` (newest rules).

    Raises:
        GeometryError: not a dotted release number.
    """
    if v is None:
        return None
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:[.+-].*)?", str(v).strip())
    if not m:
        raise GeometryError(f"vllm layout: version {v!r} is not a release number", hint="e.g. 0.17.1")
    return tuple(int(x) for x in m.groups() if x is not None)


def parse_speculative_config(value: Any) -> dict[str, Any] | None:
    """vLLM's ``--speculative-config`` (a JSON string or dict) as a dict, or None.

    Raises:
        GeometryError: not JSON / not an object, or ``num_speculative_tokens`` missing
            or not a positive integer.
    """
    if value is None or value == "":
        return None
    if isinstance(value, str):
        from kvgate.errors import KvgateError  # noqa: PLC0415
        from kvgate.guarded import loads_json  # noqa: PLC0415

        try:
            value = loads_json(value, what="speculative_config")  # depth and digits guarded
        except KvgateError as exc:
            raise GeometryError(exc.message,
                                hint='e.g. {"method": "eagle", "model": "draft/config.json", '
                                     '"num_speculative_tokens": 3}') from exc
    if not isinstance(value, dict):
        raise GeometryError(f"speculative_config must be a JSON object, got {type(value).__name__}")
    n = value.get("num_speculative_tokens")
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise GeometryError(f"speculative_config.num_speculative_tokens must be a positive integer, got {n!r}")
    return dict(value)


def pp_partition(num_layers: int, pp: int, override: str | Sequence[int] | None = None) -> list[int]:
    """Layers per pipeline stage, as vLLM's ``get_pp_indices`` splits them
    (``vllm/distributed/utils.py``, 0.12.0 … 0.33.0): ``override`` is
    ``VLLM_PP_LAYER_PARTITION`` ("16,15,15,15" or a list); else ``num_layers // pp``
    each, and the ``num_layers % pp`` left over added one each to the stages
    ``-2, -3, …`` (the last stage, which holds the final norm and the head, gets none
    unless every other stage has one).

    >>> pp_partition(61, 4)
    [15, 15, 16, 15]
    >>> pp_partition(27, 2)
    [14, 13]

    Raises:
        GeometryError: ``pp`` not positive; an override that is not integers, has not
            ``pp`` entries or does not sum to ``num_layers`` (vLLM's ValueErrors).
    """
    _positive("pipeline_parallel_size", pp)
    if override is not None:
        try:
            parts = [int(x) for x in (override.split(",") if isinstance(override, str) else override)]
        except (TypeError, ValueError):
            raise GeometryError(f"Invalid partition string: {override}",
                                hint="VLLM_PP_LAYER_PARTITION: layers per stage, e.g. 16,15,15,15") from None
        if len(parts) != pp:
            raise GeometryError(f"len(partitions)={len(parts)} does not match pp_size={pp}.")
        if sum(parts) != num_layers:
            raise GeometryError(f"sum(partitions)={sum(parts)} does not match num_hidden_layers={num_layers}.")
        if any(x < 0 for x in parts):
            raise GeometryError(f"Invalid partition string: {override} (a negative layer count)")
        return parts
    parts = [num_layers // pp] * pp
    for i in range(2, num_layers % pp + 2):
        parts[-i] += 1
    return parts


@dataclass
class VLLM(Layout):
    """vLLM V1's paged layout. All figures per tensor-parallel rank.

    Args:
        block_size: tokens per block (``--block-size``, default 16; raised for hybrid
            Mamba models as vLLM does).
        max_num_batched_tokens: the scheduler's token budget per step; it sets how many
            blocks a sliding layer holds. vLLM's default depends on version, GPU and
            entry point (2,048 … 16,384): pass the value your engine logs. Default 2,048.
        disable_hybrid_kv_cache_manager: sliding layers allocated at full length.
        kernel_block_alignment: attention kernel block alignment for the hybrid block
            size; ``None`` = vLLM's: 64 for MLA models, else 16.
        conv_format: Mamba conv state format (``--mamba-cache-dtype``); ``None`` = the
            model dtype.
        ssm_format: SSM / recurrent state format (``--mamba-ssm-cache-dtype``); ``None``
            = vLLM's ``auto`` rule (module docstring).
        state_format: kvgate 0.1.0's single state format (conv and SSM alike); still read
            from old records. ``conv_format`` / ``ssm_format`` win over it.
        mamba_cache_mode: ``none`` / ``align`` / ``all``; ``None`` = what
            ``enable_prefix_caching`` selects.
        num_speculative_blocks: extra Mamba pages per request; ``None`` = the
            speculative config's ``num_speculative_tokens`` (0 without one).
        version: vLLM release (``"0.17.1"``) whose rules apply; ``None`` = newest.
        enable_prefix_caching: ``--enable-prefix-caching``; ``None`` = vLLM's default.
        speculative_config: vLLM's ``--speculative-config`` JSON (string or dict).
        pipeline_parallel_size: ``--pipeline-parallel-size``: figures are those of one
            rank of the stage that sets the pool (module docstring).
        pp_layer_partition: ``VLLM_PP_LAYER_PARTITION`` ("16,15,15,15"); ``None`` =
            vLLM's own split.
        decode_context_parallel_size: ``--decode-context-parallel-size``.
        prefill_context_parallel_size: ``--prefill-context-parallel-size`` (0.12 on).

    Raises:
        GeometryError: a bad value (named).
    """

    block_size: int = DEFAULT_BLOCK_SIZE
    max_num_batched_tokens: int = DEFAULT_MAX_NUM_BATCHED_TOKENS
    disable_hybrid_kv_cache_manager: bool = False
    kernel_block_alignment: int | None = None
    conv_format: str | None = None
    ssm_format: str | None = None
    state_format: str | None = None
    mamba_cache_mode: str | None = None
    num_speculative_blocks: int | None = None
    version: str | None = None
    enable_prefix_caching: bool | None = None
    speculative_config: Any = None
    pipeline_parallel_size: int = 1
    pp_layer_partition: Any = None
    decode_context_parallel_size: int = 1
    prefill_context_parallel_size: int = 1
    name = "vllm"
    # fitted by bind() on a copy: block size per attention spec, the hybrid attention
    # block (Mamba layers' block), padded Mamba page, resolved mode and state formats
    _block: dict[LayerKind, int] = field(default_factory=dict, init=False, repr=False, compare=False)
    _hybrid_block: int | None = field(default=None, init=False, repr=False, compare=False)
    _mamba_page: int | None = field(default=None, init=False, repr=False, compare=False)
    _mode: str = field(default="none", init=False, repr=False, compare=False)
    _formats: tuple[KVFormat, KVFormat] | None = field(default=None, init=False, repr=False, compare=False)
    # the layer indices of the stage whose rank the per-rank figures describe (None: all)
    _stage: range | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        for k in ("block_size", "max_num_batched_tokens", "pipeline_parallel_size", "decode_context_parallel_size",
                  "prefill_context_parallel_size"):
            _positive(k, getattr(self, k))
        if self.kernel_block_alignment is not None:
            _positive("kernel_block_alignment", self.kernel_block_alignment)
        if self.num_speculative_blocks is not None and (
                not isinstance(self.num_speculative_blocks, int) or self.num_speculative_blocks < 0):
            raise GeometryError(f"vllm layout: num_speculative_blocks must be a non-negative integer, "
                                f"got {self.num_speculative_blocks!r}")
        if self.mamba_cache_mode is not None and self.mamba_cache_mode not in MAMBA_CACHE_MODES:
            raise GeometryError(f"vllm layout: mamba_cache_mode {self.mamba_cache_mode!r} is not one of vLLM's",
                                hint=", ".join(MAMBA_CACHE_MODES))
        for k in ("conv_format", "ssm_format", "state_format"):
            if getattr(self, k) is not None:
                get_format(getattr(self, k))
        self._version = parse_version(self.version)
        self._spec = parse_speculative_config(self.speculative_config)

    # -- rules that depend on the release / options
    @property
    def cp(self) -> int:
        """Context-parallel world size (dcp × pcp): ranks that share one request's tokens."""
        return self.decode_context_parallel_size * self.prefill_context_parallel_size

    def stages(self, num_layers: int) -> list[range]:
        """The layer indices of each pipeline stage (:func:`pp_partition`)."""
        parts = pp_partition(num_layers, self.pipeline_parallel_size, self.pp_layer_partition)
        starts = [sum(parts[:p]) for p in range(len(parts))]
        return [range(a, a + n) for a, n in zip(starts, parts)]

    def rank_specs(self, specs: list[LayerKind]) -> list[LayerKind]:
        """The engine specs one rank holds: layers of other pipeline stages hold nothing
        there (``NoCache``). After :meth:`bind`, the stage is the one that sets the pool."""
        if self._stage is None:
            return specs
        return [s if i in self._stage else NoCache() for i, s in enumerate(specs)]

    def stage_note(self) -> str | None:
        """After :meth:`bind`: which pipeline stage the per-rank figures describe, and
        why; ``None`` without pipeline parallelism."""
        if self._stage is None:
            return None
        return (f"pipeline parallel {self.pipeline_parallel_size}: figures are one rank of the stage holding layers "
                f"{self._stage.start}–{self._stage.stop - 1}, the stage that sets the pool (the most bytes per block; "
                "vllm/distributed/utils.py get_pp_indices)")

    @property
    def num_spec(self) -> int:
        """Speculative tokens per step (0 without speculative decoding)."""
        return self._spec["num_speculative_tokens"] if self._spec else 0

    @property
    def spec_blocks(self) -> int:
        """Extra Mamba pages per request (``MambaSpec.num_speculative_blocks``)."""
        return self.num_speculative_blocks if self.num_speculative_blocks is not None else self.num_spec

    def prints_concurrency_tokens(self) -> bool:
        """True when this release's token line is ``int(max_concurrency × L)``."""
        return self._version is None or self._version >= TOKEN_LINE_CHANGED

    def resolve_mamba_cache_mode(self, layers: list[LayerSpec] | list[LayerKind]) -> str:
        """The Mamba cache mode vLLM ends with (``MambaModelConfig.verify_and_update_config``)."""
        linear = [s for s in map(spec_of, layers) if isinstance(s, RecurrentState)]
        if not linear:
            return "none"
        if self.enable_prefix_caching is None:
            return self.mamba_cache_mode or "none"  # default: off for hybrid / attention-free
        if not self.enable_prefix_caching:
            return "none"
        if self.mamba_cache_mode in ("align", "all"):
            mode = self.mamba_cache_mode
        else:
            mode = "all"
        if mode == "all" and any(l.mixer not in _PREFIX_ALL_MIXERS for l in linear):
            mode = "align"
        return mode

    def state_formats(self, geometry: Geometry) -> tuple[KVFormat, KVFormat]:
        """``(conv, ssm)`` formats: the geometry's overrides, else this layout's
        ``conv_format`` / ``ssm_format`` / ``state_format``, else vLLM's ``auto`` rules."""
        conv = getattr(geometry, "fmt_conv", None)
        ssm = getattr(geometry, "fmt_ssm", None)
        if conv is None:
            name = self.conv_format or self.state_format
            conv = get_format(name) if name else _model_dtype(geometry)
        if ssm is None:
            name = self.ssm_format or self.state_format
            if name is None:
                cfg = geometry.model.config or {}
                mt = str(geometry.model.model_type or "")
                if cfg.get("mamba_ssm_dtype") is not None and mt.startswith("qwen3_5"):
                    name = cfg["mamba_ssm_dtype"]
                elif mt.startswith("nemotron_h"):
                    name = cfg.get("mamba_ssm_cache_dtype") or "float16"
            ssm = get_format(name) if name else conv
        return conv, ssm

    # -- binding to a model
    def engine_spec(self, spec: LayerKind) -> LayerKind:
        """``--disable-hybrid-kv-cache-manager``: sliding layers allocated as full ones; an
        encoder's cross-attention layer as vLLM's ``CrossAttentionSpec``
        (:mod:`kvgate.engines.vllm.cross`)."""
        spec = vllm_cross(spec)
        return spec.at_full_length() if self.disable_hybrid_kv_cache_manager else spec

    def bind(self, geometry: Geometry) -> VLLM:
        """A copy fitted to the model: the hybrid Mamba block rule, then page-size
        unification (``unify_kv_cache_spec_page_size``: a layer with a smaller page gets
        a block size × (max page / its page)).

        Raises:
            GeometryError: attention page sizes that do not divide the largest one (vLLM
                raises NotImplementedError there).
        """
        specs = [self.engine_spec(s) for s in geometry.specs]
        self.refuse_unknown_kinds(specs)
        b = replace(self)
        b._mode = self.resolve_mamba_cache_mode(specs)
        b._formats = self.state_formats(geometry)
        attn = [(s, s.position_bytes(geometry.fmt_k, geometry.fmt_v, geometry.tp)) for s in specs
                if isinstance(s, (AttentionKV, MLAAttention))]
        linear = [s for s in specs if isinstance(s, RecurrentState)]
        block = self.block_size
        if linear and attn:
            per_token = attn[0][1]  # model_config's head size × KV heads: the first attention layer
            mamba_raw = max(b._mamba_raw(geometry, s) for s in linear)
            align = self.kernel_block_alignment or (64 if any(isinstance(s, MLAAttention) for s, _ in attn) else 16)
            if b._mode == "all":
                cfg = geometry.model.config or {}
                chunk = cfg.get("mamba_chunk_size") or cfg.get("chunk_size") or 2048
                c = math.lcm(int(chunk), align)
                need = c * cdiv(cdiv(mamba_raw, per_token), c)
            else:
                need = align * cdiv(mamba_raw, align * per_token)
            block = max(block, need)
        top = max((block * p for _, p in attn), default=0)
        for s, p in attn:
            if top % (block * p):
                raise GeometryError(
                    "vllm layout: attention page sizes differ and do not divide each other "
                    f"({block * p} vs {top} bytes); vLLM cannot unify them either"
                )
            b._block[s] = block * (top // (block * p))
        if linear:
            b._mamba_page = top if attn else None
            b._hybrid_block = block
        if self.cp > 1 and any(isinstance(s, (SlidingWindow, ChunkedLocal)) for s in specs):
            # SlidingWindowSpec.max_memory_usage_bytes: assert decode_context_parallel_size == 1
            raise GeometryError("vllm layout: decode context parallel with sliding-window or chunked-local layers: "
                                "vLLM asserts 'DCP not support sliding window.'",
                                hint="--decode-context-parallel-size 1, or --disable-hybrid-kv-cache-manager")
        if self.pipeline_parallel_size > 1:
            b._stage = bottleneck_stage(b, geometry, specs)
        return b

    def refuse_unknown_kinds(self, specs: Sequence[LayerKind]) -> None:
        """Refuse layers vLLM has no ``KVCacheSpec`` rule for here (those missing from
        ``_BLOCKS``, e.g. mllama ``CrossAttention``), naming their kind and layer indices,
        before any page size is worked out (a page of 0 bytes would follow otherwise).

        Raises:
            GeometryError: some layer's kind has no vLLM rule.
        """
        bad: dict[str, list[int]] = {}
        for i, s in enumerate(specs):
            if type(s) not in _BLOCKS:
                bad.setdefault(type(s).__name__, []).append(i)
        if bad:
            what = "; ".join(f"{k} layers {', '.join(map(str, v))} ({len(v)})" for k, v in bad.items())
            hint = ("--layout contiguous sizes cross-attention layers (kvgate geometry, with --images or --encoder-len)"
                    if "CrossAttention" in bad else "--layout contiguous")
            raise GeometryError(f"layout {self.name!r} has no rule for {what}: vLLM's KV cache "
                                "layout is not modelled for them", hint=hint)

    def _mamba_raw(self, g: Geometry, spec: LayerKind) -> int:
        """Unpadded Mamba page: conv (kernel − 1 + num_spec columns) + SSM, each in its format."""
        st = spec.recurrent
        if st is None:
            return 0
        cols = (st.conv_kernel - 1 + self.num_spec) if st.conv_kernel else None
        return st.state_bytes(*(self._formats or self.state_formats(g)), g.tp, conv_columns=cols)

    def block_of(self, layer: LayerSpec | LayerKind) -> int:
        """Tokens per block of this layer after binding (``block_size`` before)."""
        spec = self.engine_spec(spec_of(layer))
        if isinstance(spec, RecurrentState):
            return self._hybrid_block or self.block_size
        return self._block.get(spec, self.block_size)

    def blocks(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        """Blocks one request at ``max_seq`` holds in this layer (the spec's
        ``max_memory_usage_bytes`` / page)."""
        spec = self.engine_spec(spec_of(layer))
        return rule_for(_BLOCKS, spec, self.name)(self, spec, max_seq, self.block_of(spec))

    def positions(self, layer: LayerSpec | LayerKind, max_seq: int) -> int:
        spec = self.engine_spec(spec_of(layer))
        if isinstance(spec, RecurrentState):
            return 0
        return self.blocks(spec, max_seq) * self.block_of(spec)

    def state_bytes(self, geometry: Geometry, spec: LayerKind) -> int:
        if spec.recurrent is None:
            return 0
        page = self._mamba_page if self._mamba_page is not None else self._mamba_raw(geometry, spec)
        # "all" mode: the state grows with the sequence; one page per block of the
        # longest request is counted by the pool report, the slot keeps the none/align pages
        n = 1 + self.spec_blocks if self._mode == "all" else self.blocks(spec, 1)
        return page * n

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "block_size": self.block_size,
            "max_num_batched_tokens": self.max_num_batched_tokens,
            "disable_hybrid_kv_cache_manager": self.disable_hybrid_kv_cache_manager,
            "kernel_block_alignment": self.kernel_block_alignment,
            "conv_format": self.conv_format,
            "ssm_format": self.ssm_format,
            "state_format": self.state_format,
            "mamba_cache_mode": self.mamba_cache_mode,
            "num_speculative_blocks": self.num_speculative_blocks,
            "version": self.version,
            "enable_prefix_caching": self.enable_prefix_caching,
            "speculative_config": self._spec,
            **({"pipeline_parallel_size": self.pipeline_parallel_size} if self.pipeline_parallel_size > 1 else {}),
            **({"pp_layer_partition": self.pp_layer_partition} if self.pp_layer_partition is not None else {}),
            **({"decode_context_parallel_size": self.decode_context_parallel_size}
               if self.decode_context_parallel_size > 1 else {}),
            **({"prefill_context_parallel_size": self.prefill_context_parallel_size}
               if self.prefill_context_parallel_size > 1 else {}),
        }


def _positive(k: str, v: Any) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise GeometryError(f"vllm layout: {k} must be a positive integer, got {v!r}")


def _model_dtype(geometry: Geometry) -> KVFormat:
    """vLLM's model dtype as a format (``mamba_cache_dtype auto``: ``model_config.dtype``, the
    dtype vLLM runs the model in): the model's ``dtype``, a float32 one as vLLM's ``--dtype
    auto`` runs it (:func:`kvgate.engines.vllm.dtype.run_dtype`: downcast) unless the KV cache
    is float32 (``--kv-cache-dtype auto`` under ``--dtype float32``: the model runs in
    float32); else the KV format when it is a 16-bit float, else bf16."""
    name = MODEL_DTYPES.get(str(geometry.model.dtype or "").lower())
    if name == "fp32" and geometry.fmt_k.name != "fp32":
        from kvgate.engines.vllm.dtype import run_dtype  # noqa: PLC0415
        from kvgate.fit.dtype import model_config  # noqa: PLC0415

        name = MODEL_DTYPES[run_dtype("auto", model_config(geometry.model), None)[0]]
    if name:
        return get_format(name)
    if geometry.fmt_k.name in ("bf16", "fp16"):
        return geometry.fmt_k
    return get_format("bf16")


def _mamba_blocks(lay: VLLM, spec: LayerKind, L: int, B: int) -> int:
    if lay._mode == "all":
        return cdiv(L, B)
    return (2 if lay._mode == "align" else 1) + lay.spec_blocks


# blocks one request of L tokens holds, per spec type (``max_memory_usage_bytes`` of
# vLLM's spec classes, ``vllm/v1/kv_cache_interface.py``), B = the layer's block size
_BLOCKS: dict[type[LayerKind], Callable[[VLLM, Any, int, int], int]] = {
    # context parallel: one rank holds cdiv(L, cp) tokens (FullAttentionSpec.max_memory_usage_bytes)
    FullAttention: lambda lay, spec, L, B: cdiv(cdiv(L, lay.cp), B),
    MLAAttention: lambda lay, spec, L, B: cdiv(cdiv(L, lay.cp), B),
    SlidingWindow: lambda lay, spec, L, B: cdiv(min(spec.window - 1 + lay.max_num_batched_tokens, L), B) + 1,
    ChunkedLocal: lambda lay, spec, L, B: cdiv(min(spec.window + lay.max_num_batched_tokens, L), B),
    RecurrentState: _mamba_blocks,
    NoCache: lambda lay, spec, L, B: 0,
    # CrossAttentionSpec: cdiv(max_encoder_len, B) whatever the decoder's length
    VllmCrossAttention: lambda lay, spec, L, B: cdiv(spec.encoder_positions, B),
}

__all__ = ["DEFAULT_BLOCK_SIZE", "VLLM", "cdiv", "parse_speculative_config", "parse_version", "pp_partition"]
