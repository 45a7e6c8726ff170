"""Layer kinds as types: one frozen spec per kind of cache a decoder layer keeps, each
owning its bytes per position and its fixed state for given formats and TP degree, after
vLLM's ``vllm/v1/kv_cache_interface.py`` (``FullAttentionSpec``, ``SlidingWindowSpec``,
``ChunkedLocalAttentionSpec``, ``MLAAttentionSpec``, ``MambaSpec``; grouped by equality).

A spec is the engine-neutral shape. A layout (``contiguous``, ``vllm``, ``llama.cpp``)
adds how many positions a sequence reserves and how bytes round into blocks or cells,
and may convert a spec first (:meth:`LayerKind.with_v_padding`,
:meth:`LayerKind.at_full_length`). :func:`spec_of` turns a reader's
:class:`kvgate.model.spec.LayerSpec` record into its spec: the only place that reads a
record's ``kind`` string (docs/CONVENTIONS.md, "Layer kinds").
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace
from functools import lru_cache
from typing import ClassVar

from kvgate.errors import KvgateError
from kvgate.geometry.formats import KVFormat
from kvgate.model.spec import LayerSpec


class GeometryError(KvgateError):
    """A geometry that cannot be laid out (TP that divides nothing, bad sizes)."""


def kv_heads_per_rank(n_kv: int, tp: int) -> int:
    """KV heads held by one tensor-parallel rank: ``max(1, n_kv // tp)`` (vLLM replicates
    KV heads when tp > n_kv: ``get_num_kv_heads`` in ``vllm/config``).

    >>> kv_heads_per_rank(8, 4), kv_heads_per_rank(4, 8)
    (2, 1)

    Raises:
        GeometryError: tp ≤ 0, or neither of tp and n_kv divides the other (vLLM refuses
            such a split too).
    """
    if not isinstance(tp, int) or tp <= 0:
        raise GeometryError(f"tensor parallel size must be a positive integer, got {tp!r}")
    if n_kv >= tp:
        if n_kv % tp:
            raise GeometryError(f"tensor parallel {tp} does not divide the {n_kv} KV heads", hint=_tp_hint(n_kv))
    elif tp % n_kv:
        raise GeometryError(f"tensor parallel {tp} is not a multiple of the {n_kv} KV heads", hint=_tp_hint(n_kv))
    return max(1, n_kv // tp)


def _tp_hint(n_kv: int) -> str:
    """The tensor parallel sizes up to 8 that split ``n_kv`` KV heads (a divisor or a multiple)."""
    ok = [t for t in (1, 2, 4, 8) if n_kv % t == 0 or t % n_kv == 0]
    return f"a tensor parallel size that splits {n_kv} KV heads: {', '.join(map(str, ok))}"


@dataclass(frozen=True, kw_only=True)
class LayerKind:
    """A layer's cache, engine-neutral. The base holds nothing: 0 bytes everywhere.

    ``kind`` is the name records and vLLM's groups use.
    """

    kind: ClassVar[str] = ""
    #: positions attended to (sliding / chunked); ``None`` when unbounded
    window: ClassVar[int | None] = None

    @property
    def recurrent(self) -> RecurrentState | None:
        """The fixed per-sequence state this layer keeps, or ``None``."""
        return None

    def kv_heads(self, tp: int) -> int:
        """KV heads on one rank (0 for layers without per-head KV)."""
        return 0

    def v_width(self, tp: int) -> int:
        """Values of one V row on one rank (llama.cpp ``n_embd_v_gqa``), 0 without V."""
        return 0

    def k_bytes(self, fmt: KVFormat, tp: int) -> int:
        """Bytes of the K part of one position on one rank."""
        return 0

    def v_bytes(self, fmt: KVFormat, tp: int) -> int:
        """Bytes of the V part of one position on one rank."""
        return 0

    def position_bytes(self, fmt_k: KVFormat, fmt_v: KVFormat, tp: int) -> int:
        """Bytes one position costs on one rank: K part + V part.

        Raises:
            GeometryError: a bad TP split; FormatError: a row the format cannot pack.
        """
        return self.k_bytes(fmt_k, tp) + self.v_bytes(fmt_v, tp)

    def with_v_padding(self, width: int) -> LayerKind:
        """This layer with its V rows stored at ``width`` values (llama.cpp ``-fa off``:
        transposed V at ``n_embd_v_gqa_max``, ``llama_kv_cache`` constructor). Layers
        without V stay as they are."""
        return self

    def at_full_length(self) -> LayerKind:
        """This layer allocated as full attention (vLLM's hybrid KV cache manager off).
        Layers without a window stay as they are."""
        return self


@dataclass(frozen=True, kw_only=True)
class RecurrentState(LayerKind):
    """Recurrent / SSM state of fixed size per sequence (Mamba, Mamba-2, gated delta net,
    KDA, LFM2 short conv): a convolution window of ``conv_dim`` channels and an SSM /
    recurrent state of ``ssm_values`` values; no per-position bytes.

    Shapes: vLLM ``model_executor/layers/mamba/mamba_utils.py``
    (``MambaStateShapeCalculator``), llama.cpp ``llama_hparams::n_embd_r`` / ``n_embd_s``.
    A record built from ``state_values`` alone (``conv_dim`` = ``ssm_values`` = 0) is all
    recurrent state. Both parts split over ``state_heads`` across TP ranks (vLLM shards
    Mamba heads and conv channels by tp); with one head it is replicated.
    """

    kind: ClassVar[str] = "linear"
    conv_dim: int = 0
    conv_kernel: int = 0
    ssm_values: int = 0
    state_values: int = 0
    state_heads: int = 1
    mixer: str | None = None

    @property
    def recurrent(self) -> RecurrentState:
        return self

    def values_per_rank(self, tp: int, conv_columns: int | None = None) -> tuple[int, int]:
        """``(conv values, ssm values)`` on one rank. ``conv_columns``: convolution columns
        the engine keeps (vLLM and llama.cpp ``conv_kernel − 1``, the default;
        transformers ``conv_kernel``; vLLM adds ``num_speculative_tokens``).

        Raises:
            GeometryError: tp does not divide the state heads (or vice versa).
        """
        cols = self.conv_kernel - 1 if conv_columns is None else conv_columns
        conv = self.conv_dim * cols
        ssm = self.ssm_values if (self.conv_dim or self.ssm_values) else self.state_values
        if self.state_heads > 1 and tp > 1:
            per = kv_heads_per_rank(self.state_heads, tp)
            conv = conv * per // self.state_heads
            ssm = ssm * per // self.state_heads
        return conv, ssm

    def conv_bytes(self, fmt: KVFormat, tp: int, conv_columns: int | None = None) -> int:
        """Bytes of the convolution state on one rank (llama.cpp's R rows)."""
        conv = self.values_per_rank(tp, conv_columns)[0]
        return fmt.vector_bytes(conv) if conv else 0

    def ssm_bytes(self, fmt: KVFormat, tp: int) -> int:
        """Bytes of the SSM / recurrent state on one rank (llama.cpp's S rows)."""
        ssm = self.values_per_rank(tp)[1]
        return fmt.vector_bytes(ssm) if ssm else 0

    def state_bytes(self, fmt_conv: KVFormat, fmt_ssm: KVFormat, tp: int, conv_columns: int | None = None) -> int:
        """Bytes of the state of one sequence on one rank: conv values in ``fmt_conv`` plus
        SSM values in ``fmt_ssm`` (an empty part costs nothing)."""
        return self.conv_bytes(fmt_conv, tp, conv_columns) + self.ssm_bytes(fmt_ssm, tp)


@dataclass(frozen=True, kw_only=True)
class HeadRows(LayerKind):
    """Per-head K and V rows of ``num_kv_heads × head_dim`` (V: ``v_head_dim``) values per
    position, split over tensor-parallel ranks by :func:`kv_heads_per_rank`: the one place
    these rows are sized. :class:`AttentionKV` (every engine's attention) and the kinds only
    the ``contiguous`` layout sizes (:class:`IndexedAttention`, :class:`CrossAttention`)
    derive from it; the latter are not ``AttentionKV``, so a layout's attention rules (vLLM's
    page unification, llama.cpp's V padding) never take them for one, and
    :func:`kvgate.geometry.base.rule_for` refuses them by name."""

    num_kv_heads: int
    head_dim: int
    v_head_dim: int

    def kv_heads(self, tp: int) -> int:
        return kv_heads_per_rank(self.num_kv_heads, tp)

    def v_width(self, tp: int) -> int:
        return self.kv_heads(tp) * self.v_head_dim

    def k_bytes(self, fmt: KVFormat, tp: int) -> int:
        return fmt.row_bytes(self.kv_heads(tp), self.head_dim)

    def v_bytes(self, fmt: KVFormat, tp: int) -> int:
        return fmt.row_bytes(self.kv_heads(tp), self.v_head_dim)


@dataclass(frozen=True, kw_only=True)
class AttentionKV(HeadRows):
    """Per-head K and V rows of ``num_kv_heads × head_dim`` (V: ``v_head_dim``) values per
    position (vLLM ``AttentionSpec.real_page_size_bytes`` / ``block_size``; transformers
    K, V ``[B, kv_heads, L, head_dim]``; llama.cpp ``ggml_row_size(type, n_embd_k_gqa)``).

    Attributes:
        v_padded_width: V stored at this many values per position instead (llama.cpp
            ``-fa off``), or ``None``.
        state: a recurrent state the same layer also keeps (Falcon-H1's ``hybrid``
            layers: attention and a Mamba-2 mixer in one layer), or ``None``.
    """

    v_padded_width: int | None = None
    state: RecurrentState | None = None

    @property
    def recurrent(self) -> RecurrentState | None:
        return self.state

    def v_bytes(self, fmt: KVFormat, tp: int) -> int:
        if self.v_padded_width is not None:
            return fmt.vector_bytes(self.v_padded_width)
        return super().v_bytes(fmt, tp)

    def with_v_padding(self, width: int) -> AttentionKV:
        return replace(self, v_padded_width=width)


@dataclass(frozen=True, kw_only=True)
class FullAttention(AttentionKV):
    """Full (global) attention: every position of the sequence is kept
    (vLLM ``FullAttentionSpec``). The write-up's mirror, Qwen3-30B-A3B in
    ``int8-f32scale``: 4 KV heads × 128: 2·512 + 8·4 = 1,056 B per position and layer."""

    kind: ClassVar[str] = "full"


@dataclass(frozen=True, kw_only=True)
class SlidingWindow(AttentionKV):
    """Sliding-window attention over the last ``window`` positions (``sliding_window``;
    vLLM ``SlidingWindowSpec``). Bytes per position as full attention."""

    kind: ClassVar[str] = "sliding"
    window: int  # type: ignore[misc]  # a field here, None on every other kind

    def at_full_length(self) -> FullAttention:
        return FullAttention(**{f.name: getattr(self, f.name) for f in fields(FullAttention)})


@dataclass(frozen=True, kw_only=True)
class ChunkedLocal(SlidingWindow):
    """Chunked-local attention (Llama-4 ``chunked_attention``, window =
    ``attention_chunk_size``; vLLM ``ChunkedLocalAttentionSpec``, sized without the
    sliding window's −1/+1). A sliding window to every engine that does not tell them
    apart."""

    kind: ClassVar[str] = "chunked"


@dataclass(frozen=True, kw_only=True)
class IndexedAttention(HeadRows):
    """Full attention whose layer also keeps lightning-index keys: MiniMax-M3's
    ``minimax_m3_sparse`` layers (transformers 5.24 ``modeling_minimax_m3_vl.py``,
    ``MiniMaxM3VLSparseStaticCacheLayer``: K, V ``[B, kv_heads, L, head_dim]`` plus
    ``idx_keys [B, 1, L, index_head_dim]``, all in the model dtype; the indexer's
    ``k_proj`` has one head of ``index_head_dim``). The index keys are counted in the K
    format, one head, not split by tensor parallelism. Only the ``contiguous`` layout has a
    rule for it; the others refuse it by name.
    """

    kind: ClassVar[str] = "indexed"
    index_dim: int

    def k_bytes(self, fmt: KVFormat, tp: int) -> int:
        return super().k_bytes(fmt, tp) + fmt.vector_bytes(self.index_dim)


@dataclass(frozen=True, kw_only=True)
class CrossAttention(HeadRows):
    """Cross-attention to image or encoder positions.

    Encoder-decoder models (Whisper, T5, BART): transformers 5.25
    ``generation/utils.py`` ``_prepare_static_cache`` builds
    ``EncoderDecoderCache(StaticCache(decoder config, max_cache_len), StaticCache(decoder
    config, max_cache_len=encoder_outputs[0].shape[1]))``: one cross-attention layer per
    decoder layer, K and V of the decoder's heads for every encoder position
    (``encoder_positions``), fixed per sequence.

    Llama-3.2-Vision ``mllama``: K and V rows of
    ``num_kv_heads × head_dim`` for each of ``images × image_positions`` vision positions,
    a fixed amount per sequence that does not grow with the text. Without an image the
    layer is skipped and holds nothing (transformers 5.24 ``modeling_mllama.py``:
    ``MllamaTextModel.forward`` skips a cross-attention layer with no
    ``cross_attention_states`` and an empty cache;
    ``MllamaForConditionalGeneration._prepare_static_cache`` sizes the layer at
    ``num_images × max_num_tiles × ((image_size // patch_size)² + 1)`` positions).

    ``position_bytes`` is 0 (a text token adds nothing here); :meth:`fixed_bytes` is the
    per-sequence amount a layout adds as fixed state.
    """

    kind: ClassVar[str] = "cross"
    image_positions: int
    images: int = 0
    encoder_positions: int | None = None

    @property
    def positions(self) -> int:
        """Positions one sequence holds: the encoder's (encoder-decoder models), else
        ``images × image_positions``."""
        if self.encoder_positions is not None:
            return self.encoder_positions
        return self.images * self.image_positions

    def position_bytes(self, fmt_k: KVFormat, fmt_v: KVFormat, tp: int) -> int:
        self.k_bytes(fmt_k, tp)  # the TP split is still checked
        return 0

    def fixed_bytes(self, fmt_k: KVFormat, fmt_v: KVFormat, tp: int) -> int:
        """K + V bytes of every vision or encoder position one sequence holds, on one rank:
        ``positions × (K row + V row)``."""
        return self.positions * (self.k_bytes(fmt_k, tp) + self.v_bytes(fmt_v, tp))


@dataclass(frozen=True, kw_only=True)
class MLAAttention(LayerKind):
    """Multi-head latent attention (DeepSeek-V2/V3, Kimi-K2; vLLM ``MLAAttentionSpec``):
    one latent of ``latent_dim`` = ``kv_lora_rank + qk_rope_head_dim`` values per
    position in the K format, no V, replicated on every TP rank. DeepSeek sparse attention
    (``deepseek_v32``, ``glm_moe_dsa``) adds ``index_dim`` = ``index_head_dim`` indexer
    key values per position (transformers ``StaticIndexedLayer``: model dtype, as K here).
    """

    kind: ClassVar[str] = "mla"
    latent_dim: int
    index_dim: int = 0

    def latent_bytes(self, fmt: KVFormat) -> int:
        """The latent alone (llama.cpp's MLA K row, ``kv_lora_rank + n_rot``)."""
        return fmt.vector_bytes(self.latent_dim)

    def k_bytes(self, fmt: KVFormat, tp: int) -> int:
        return self.latent_bytes(fmt) + (fmt.vector_bytes(self.index_dim) if self.index_dim else 0)


@dataclass(frozen=True, kw_only=True)
class NoCache(LayerKind):
    """A layer without a cache of its own: KV sharing, MLP / MoE-only layers, MTP heads
    outside the main cache. With a ``head_dim`` it is an attention layer with
    ``head_count_kv`` 0 (a GGUF's no-op attention, Llama-Nemotron): llama.cpp keeps it in
    its cache at width 0, except that ``-fa off`` gives it a V of the widest layer's width
    (``n_embd_v_gqa_max``)."""

    kind: ClassVar[str] = "shared"
    head_dim: int = 0
    v_head_dim: int = 0
    v_padded_width: int | None = None

    @property
    def zero_width(self) -> bool:
        """An attention layer of width 0 that llama.cpp still keeps in its cache."""
        return self.head_dim > 0

    def v_bytes(self, fmt: KVFormat, tp: int) -> int:
        return fmt.vector_bytes(self.v_padded_width) if self.v_padded_width is not None else 0

    def with_v_padding(self, width: int) -> NoCache:
        return replace(self, v_padded_width=width) if self.zero_width else self


@lru_cache(maxsize=4096)
def spec_of(layer: LayerSpec | LayerKind) -> LayerKind:
    """The spec of a reader's layer record (a spec passes through).

    ``full``/``sliding`` records with ``conv_dim``/``ssm_values``/``state_values`` keep
    that state (Falcon-H1); a ``full`` record with ``index_dim`` is
    :class:`IndexedAttention` (MiniMax-M3); ``cross`` is :class:`CrossAttention`.
    ``v_head_dim`` 0 means ``head_dim``.
    """
    if isinstance(layer, LayerKind):
        return layer
    state = RecurrentState(conv_dim=layer.conv_dim, conv_kernel=layer.conv_kernel, ssm_values=layer.ssm_values,
                           state_values=layer.state_values, state_heads=layer.state_heads, mixer=layer.mixer)
    if layer.kind == "linear":
        return state
    if layer.kind == "mla":
        return MLAAttention(latent_dim=layer.latent_dim, index_dim=layer.index_dim)
    if layer.kind == "cross":
        return CrossAttention(num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
                              v_head_dim=layer.v_head_dim or layer.head_dim,
                              image_positions=layer.image_positions or 0, images=layer.images or 0,
                              encoder_positions=layer.encoder_positions)
    if layer.kind == "full" and layer.index_dim:
        return IndexedAttention(num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
                                v_head_dim=layer.v_head_dim or layer.head_dim, index_dim=layer.index_dim)
    if layer.kind in ("full", "sliding"):
        has_state = layer.conv_dim or layer.ssm_values or layer.state_values
        full = FullAttention(num_kv_heads=layer.num_kv_heads, head_dim=layer.head_dim,
                             v_head_dim=layer.v_head_dim or layer.head_dim, state=state if has_state else None)
        if layer.kind == "full":
            return full
        cls = ChunkedLocal if layer.chunked else SlidingWindow
        return cls(window=layer.window or 0, **{f.name: getattr(full, f.name) for f in fields(full)})
    return NoCache(head_dim=layer.head_dim, v_head_dim=layer.v_head_dim)
