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
  see :mod:`kvgate.geometry.vllm_pool`.

Per-slot bytes (:meth:`VLLM.positions`) are whole blocks per layer, without group padding;
:func:`vllm_kv_cache_report` gives the pool view with padding, as vLLM sizes it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field, replace
from typing import Any

from kvgate.geometry.base import GeometryError, Layout, state_values_per_rank
from kvgate.geometry.core import KVGeometry
from kvgate.geometry.formats import KVFormat, get_format
from kvgate.model.spec import LayerSpec

#: first release that prints ``int(max_concurrency × max_model_len)`` tokens
TOKEN_LINE_CHANGED = (0, 20, 1)
MAMBA_CACHE_MODES = ("none", "align", "all")
_DTYPE_FORMATS = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}
# mixers whose vLLM model class has SupportsMambaPrefixCaching (models/*.py, 0.17.1)
_PREFIX_ALL_MIXERS = ("mamba", "mamba2")


def cdiv(a: int, b: int) -> int:
    """Ceiling division of non-negative ints (vLLM ``cdiv``)."""
    return -(-a // b)


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

    Raises:
        GeometryError: a bad value (named).
    """

    block_size: int = 16
    max_num_batched_tokens: int = 2048
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
    name = "vllm"
    # filled by bind(): block size per layer spec, padded Mamba page, resolved state
    _block: dict[LayerSpec, int] = field(default_factory=dict, repr=False)
    _mamba_page: int | None = field(default=None, repr=False)
    _mode: str = field(default="none", repr=False)
    _formats: tuple[KVFormat, KVFormat] | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        for k in ("block_size", "max_num_batched_tokens"):
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

    def resolve_mamba_cache_mode(self, layers: list[LayerSpec]) -> str:
        """The Mamba cache mode vLLM ends with (``MambaModelConfig.verify_and_update_config``)."""
        linear = [l for l in layers if l.kind == "linear"]
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

    def state_formats(self, geometry: KVGeometry) -> tuple[KVFormat, KVFormat]:
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
    def bind(self, geometry: KVGeometry) -> VLLM:
        """Fit block sizes to the model: the hybrid Mamba rule, then page-size
        unification (``unify_kv_cache_spec_page_size``: a layer with a smaller page gets
        a block size × (max page / its page)).

        Raises:
            GeometryError: attention page sizes that do not divide the largest one (vLLM
                raises NotImplementedError there).
        """
        b = replace(self, _block={}, _mamba_page=None)
        layers = geometry.model.layers
        b._mode = self.resolve_mamba_cache_mode(layers)
        b._formats = self.state_formats(geometry)
        attn = [(l, geometry.position_bytes(i)) for i, l in enumerate(layers) if l.kind in ("full", "sliding", "mla")]
        linear = [l for l in layers if l.kind == "linear"]
        block = self.block_size
        if linear and attn:
            per_token = attn[0][1]  # model_config's head size × KV heads: the first attention layer
            mamba_raw = max(b._mamba_raw(geometry, l) for l in linear)
            align = self.kernel_block_alignment or (64 if any(l.kind == "mla" for l, _ in attn) else 16)
            if b._mode == "all":
                cfg = geometry.model.config or {}
                chunk = cfg.get("mamba_chunk_size") or cfg.get("chunk_size") or 2048
                c = math.lcm(int(chunk), align)
                need = c * cdiv(cdiv(mamba_raw, per_token), c)
            else:
                need = align * cdiv(mamba_raw, align * per_token)
            block = max(block, need)
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
            b._attn_block = block  # type: ignore[attr-defined]  # set only for hybrid models
        return b

    def _mamba_raw(self, g: KVGeometry, layer: LayerSpec) -> int:
        """Unpadded Mamba page: conv (kernel − 1 + num_spec columns) + SSM, each in its format."""
        conv_cols = (layer.conv_kernel - 1 + self.num_spec) if layer.conv_kernel else None
        conv, ssm = state_values_per_rank(layer, g.tp, conv_columns=conv_cols)
        f_conv, f_ssm = self._formats or self.state_formats(g)
        if not layer.conv_dim and not layer.ssm_values:  # a spec built from state_values alone
            return f_ssm.vector_bytes(ssm)
        return (f_conv.vector_bytes(conv) if conv else 0) + (f_ssm.vector_bytes(ssm) if ssm else 0)

    def block_of(self, layer: LayerSpec) -> int:
        """Tokens per block of this layer after binding (``block_size`` before)."""
        if layer.kind == "linear":
            return getattr(self, "_attn_block", self.block_size)
        return self._block.get(layer, self.block_size)

    def blocks(self, layer: LayerSpec, max_seq: int) -> int:
        """Blocks one request at ``max_seq`` holds in this layer (``max_memory_usage_bytes``
        / page)."""
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
            if self._mode == "all":
                return cdiv(max_seq, B)
            return (2 if self._mode == "align" else 1) + self.spec_blocks
        return 0

    def positions(self, layer: LayerSpec, max_seq: int) -> int:
        if layer.kind == "linear":
            return 0
        return self.blocks(layer, max_seq) * self.block_of(layer)

    def state_bytes(self, geometry: KVGeometry, layer: LayerSpec) -> int | None:
        page = self._mamba_page if self._mamba_page is not None else self._mamba_raw(geometry, layer)
        # "all" mode: the state grows with the sequence; one page per block of the
        # longest request is counted by the pool report, the slot keeps the none/align pages
        n = 1 + self.spec_blocks if self._mode == "all" else self.blocks(layer, 1)
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
        }


def _positive(k: str, v: Any) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise GeometryError(f"vllm layout: {k} must be a positive integer, got {v!r}")


def _model_dtype(geometry: KVGeometry) -> KVFormat:
    """vLLM's model dtype as a format: the config's ``dtype`` / ``torch_dtype`` (float32
    checkpoints run in bf16 under vLLM's ``auto``), else the KV format when it is a
    16-bit float, else bf16."""
    name = _DTYPE_FORMATS.get(str(geometry.model.dtype or "").lower())
    if name == "fp32":
        name = "bf16"
    if name:
        return get_format(name)
    if geometry.fmt_k.name in ("bf16", "fp16"):
        return geometry.fmt_k
    return get_format("bf16")


from kvgate.geometry.vllm_pool import speculative_model, vllm_kv_cache_report  # noqa: E402

__all__ = ["VLLM", "cdiv", "parse_speculative_config", "parse_version", "speculative_model", "vllm_kv_cache_report"]
