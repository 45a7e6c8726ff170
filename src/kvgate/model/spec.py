"""``ModelSpec``: the KV-relevant shape of a model, from a config.json or a bundled preset.

A model is a list of layers, each a :class:`LayerSpec` record of one **layer kind**
(DESIGN.md §2): ``full``, ``sliding``, ``mla``, ``linear`` (recurrent state), ``shared``
(no cache), ``cross`` (cross-attention to image positions, Llama-3.2-Vision, or to the
encoder's positions of an encoder-decoder model: Whisper, T5, BART). The
record is what readers write and decision records store; the geometry
turns each into its spec type, which owns the bytes (:mod:`kvgate.geometry.specs`).

Fields come from Hugging Face ``config.json`` names, resolved through transformers'
config class when transformers knows the ``model_type`` (``kvgate.model.hf``: class
defaults, attribute aliases, derived ``layer_types``, nested text configs). ``head_dim``
is the config's when present; only when absent is it ``hidden_size //
num_attention_heads`` (the transformers default).
A config that lacks a needed field raises :class:`ConfigError` naming the field.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvgate.errors import KvgateError

LAYER_KINDS = ("full", "sliding", "mla", "linear", "shared", "cross")

# LayerSpec fields added after decision records were first written: ``None`` (not a cross-
# attention layer) is left out of a record (``kvgate.gate.schema``), so the digests of
# records written before them do not change.
LATE_LAYER_FIELDS = ("image_positions", "images", "encoder_positions")


class ConfigError(KvgateError):
    """A model config is missing a needed field, or has a value kvgate cannot use."""


@dataclass(frozen=True)
class LayerSpec:
    """The KV shape of one decoder layer (whole model, before tensor parallelism).

    Attributes:
        kind: one of ``LAYER_KINDS``. A ``shared`` layer with a ``head_dim`` and no KV heads
            is an attention layer with ``head_count_kv`` 0 (a GGUF's no-op attention):
            0 bytes everywhere except llama.cpp's ``-fa off`` V padding.
        num_kv_heads: K/V heads (``num_key_value_heads``); 0 for mla/linear/shared.
        head_dim: K head dimension (``head_dim``).
        v_head_dim: V head dimension; equal to ``head_dim`` unless the config says otherwise.
        window: sliding window W in positions (``sliding`` only).
        latent_dim: ``kv_lora_rank + qk_rope_head_dim`` (``mla`` only).
        state_values: values of fixed per-sequence state (``linear`` only): the
            engine-neutral minimum ``conv_dim × (conv_kernel − 1) + ssm_values``, as vLLM
            (``MambaStateShapeCalculator``) and llama.cpp (``n_embd_r + n_embd_s``) keep it.
        state_heads: heads the linear state is split over under tensor parallelism.
        conv_dim: channels of the short causal convolution (``linear`` only).
        conv_kernel: its kernel width (transformers keeps all ``conv_kernel`` columns,
            vLLM and llama.cpp keep ``conv_kernel − 1``).
        ssm_values: values of the recurrent / SSM state (``linear`` only).
        mixer: which recurrent mixer (``mamba``, ``mamba2``, ``gated_delta_net``), for
            engine layouts that size each differently; ``None`` otherwise.
        index_dim: DeepSeek sparse-attention indexer key width per position
            (``index_head_dim``; ``mla`` layers of ``deepseek_v32`` / ``glm_moe_dsa``):
            transformers keeps ``indexer_keys [B, L, index_head_dim]`` in the model dtype.
            On a ``full`` layer: MiniMax-M3's lightning-index keys ``idx_keys [B, 1, L,
            index_head_dim]`` beside its K and V.
        chunked: a ``sliding`` layer that is chunked-local attention (Llama-4
            ``chunked_attention``, window = ``attention_chunk_size``): vLLM sizes it
            without the sliding window's −1/+1 (``ChunkedLocalAttentionSpec``).
        image_positions: ``cross`` only (``None`` elsewhere): vision positions one image gives its
            cross-attention K and V (mllama: ``max_num_tiles × ((image_size //
            patch_size)² + 1)``, transformers ``MllamaForConditionalGeneration.
            _prepare_static_cache``).
        images: ``cross`` only (``None`` elsewhere): images one sequence holds (0: text
            only, the layer is skipped and holds nothing).
        encoder_positions: ``cross`` of an encoder-decoder model only (``None`` elsewhere):
            encoder positions the layer's K and V hold per sequence (transformers
            ``EncoderDecoderCache``: its cross-attention ``StaticCache`` is sized at
            ``encoder_outputs[0].shape[1]``; Whisper: ``max_source_positions``; T5 / BART:
            the input's length). 0 until an input length is given.
    """

    kind: str
    num_kv_heads: int = 0
    head_dim: int = 0
    v_head_dim: int = 0
    window: int | None = None
    latent_dim: int = 0
    state_values: int = 0
    state_heads: int = 1
    conv_dim: int = 0
    conv_kernel: int = 0
    ssm_values: int = 0
    mixer: str | None = None
    chunked: bool = False
    index_dim: int = 0
    image_positions: int | None = None
    images: int | None = None
    encoder_positions: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise ConfigError(f"unknown layer kind {self.kind!r} (one of {', '.join(LAYER_KINDS)})")
        # Every size is a non-negative int: a string, float, bool or negative value from a
        # config or a hand-edited record is an error here, never a wrong byte count later.
        for name in ("num_kv_heads", "head_dim", "v_head_dim", "latent_dim", "state_values", "state_heads",
                     "conv_dim", "conv_kernel", "ssm_values", "index_dim", *LATE_LAYER_FIELDS):
            v = getattr(self, name)
            if v is None and name in LATE_LAYER_FIELDS:
                continue
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{_FIELD_NAMES.get(name, name)} must be a non-negative integer, got {v!r}")
        if self.window is not None and (not isinstance(self.window, int) or isinstance(self.window, bool)
                                        or self.window <= 0):
            raise ConfigError(f"sliding window (sliding_window / attention_chunk_size) must be a positive "
                              f"integer, got {self.window!r}")
        if self.kind in ("full", "sliding", "cross") and (self.num_kv_heads <= 0 or self.head_dim <= 0):
            raise ConfigError(f"{self.kind} attention layer needs positive num_key_value_heads and head_dim, "
                              f"got {self.num_kv_heads} and {self.head_dim}")
        if self.kind == "sliding" and self.window is None:
            raise ConfigError("a sliding layer needs 'sliding_window'")


# LayerSpec field -> the config field it usually comes from (for error messages).
_FIELD_NAMES = {
    "num_kv_heads": "num_key_value_heads",
    "head_dim": "head_dim",
    "v_head_dim": "v_head_dim",
    "latent_dim": "kv_lora_rank + qk_rope_head_dim",
}

MAX_LAYERS = 100_000  # far above any real model; stops a typo from allocating gigabytes


@dataclass
class ModelSpec:
    """A model's KV-relevant shape.

    Attributes:
        name: short name (preset name or directory name).
        source: where it came from (``preset:NAME``, a path).
        layers: one :class:`LayerSpec` per decoder layer, in order.
        max_position_embeddings: the config's context limit, or ``None``.
        dtype: the config's ``torch_dtype`` / ``dtype`` (e.g. ``bfloat16``), or ``None``.
        config: the (text) config dict, kept for weight estimates.
        notes: assumptions made while reading the config (shown to users).
        defaulted: fields the file does not state that transformers' config class filled
            (name → value); a weights estimate lists the ones it used.
    """

    name: str
    source: str
    layers: list[LayerSpec]
    max_position_embeddings: int | None = None
    dtype: str | None = None
    model_type: str | None = None
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)
    defaulted: dict[str, Any] = field(default_factory=dict, repr=False)

    @property
    def num_layers(self) -> int:
        return len(self.layers)

    def kinds(self) -> dict[str, int]:
        """Count of layers per kind, e.g. ``{"full": 12, "sliding": 12}``."""
        out: dict[str, int] = {}
        for layer in self.layers:
            out[layer.kind] = out.get(layer.kind, 0) + 1
        return out

    def summary(self) -> str:
        """One line: ``48 layers (full 48), 4 KV heads × head_dim 128``."""
        kinds = ", ".join(f"{k} {n}" for k, n in self.kinds().items())
        att = next((l for l in self.layers if l.kind in ("full", "sliding")), None)
        extra = f", {att.num_kv_heads} KV heads × head_dim {att.head_dim}" if att else ""
        mla = next((l for l in self.layers if l.kind == "mla"), None)
        if mla:
            extra += f", MLA latent {mla.latent_dim}"
        return f"{self.num_layers} layers ({kinds}){extra}"


