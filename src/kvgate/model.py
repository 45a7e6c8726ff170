"""``ModelSpec``: the KV-relevant shape of a model, from a config.json or a bundled preset.

A model is a list of layers, each of one **layer kind** (DESIGN.md §2):

- ``full``    full attention: K and V rows of ``num_key_value_heads × head_dim`` per position.
- ``sliding`` sliding-window attention with window ``W`` (``sliding_window``).
- ``mla``     multi-head latent attention (DeepSeek-V2/V3, Kimi-K2): one latent of
  ``kv_lora_rank + qk_rope_head_dim`` values per position, no separate V.
- ``linear``  recurrent / SSM state of fixed size per sequence (no per-token term).
- ``shared``  reuses another layer's KV: 0 bytes.

Fields come from Hugging Face ``config.json`` names. ``head_dim`` is read from the config
when present; only when absent is it ``hidden_size // num_attention_heads`` (the
transformers default). Multimodal configs are unwrapped to their ``text_config``.
A config that lacks a needed field raises :class:`ConfigError` naming the field.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from kvgate.atomicio import read_json
from kvgate.errors import KvgateError

LAYER_KINDS = ("full", "sliding", "mla", "linear", "shared")


class ConfigError(KvgateError):
    """A model config is missing a needed field, or has a value kvgate cannot use."""


@dataclass(frozen=True)
class LayerSpec:
    """The KV shape of one decoder layer (whole model, before tensor parallelism).

    Attributes:
        kind: one of ``LAYER_KINDS``.
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
        chunked: a ``sliding`` layer that is chunked-local attention (Llama-4
            ``chunked_attention``, window = ``attention_chunk_size``): vLLM sizes it
            without the sliding window's −1/+1 (``ChunkedLocalAttentionSpec``).
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

    def __post_init__(self) -> None:
        if self.kind not in LAYER_KINDS:
            raise ConfigError(f"unknown layer kind {self.kind!r} (one of {', '.join(LAYER_KINDS)})")
        # Every size is a non-negative int: a string, float, bool or negative value from a
        # config or a hand-edited record is an error here, never a wrong byte count later.
        for name in ("num_kv_heads", "head_dim", "v_head_dim", "latent_dim", "state_values", "state_heads",
                     "conv_dim", "conv_kernel", "ssm_values"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ConfigError(f"{_FIELD_NAMES.get(name, name)} must be a non-negative integer, got {v!r}")
        if self.window is not None and (not isinstance(self.window, int) or isinstance(self.window, bool)
                                        or self.window <= 0):
            raise ConfigError(f"sliding window (sliding_window / attention_chunk_size) must be a positive "
                              f"integer, got {self.window!r}")
        if self.kind in ("full", "sliding") and (self.num_kv_heads <= 0 or self.head_dim <= 0):
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
    """

    name: str
    source: str
    layers: list[LayerSpec]
    max_position_embeddings: int | None = None
    dtype: str | None = None
    model_type: str | None = None
    config: dict[str, Any] = field(default_factory=dict, repr=False)
    notes: list[str] = field(default_factory=list)

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


# --------------------------------------------------------------------------- config

def _get(cfg: dict[str, Any], key: str, what: str = "model config") -> Any:
    if cfg.get(key) is None:
        raise ConfigError(f"{what} is missing required field {key!r}")
    return cfg[key]


def _positive_int(cfg: dict[str, Any], key: str) -> int:
    v = _get(cfg, key)
    if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
        raise ConfigError(f"model config field {key!r} must be a positive integer, got {v!r}")
    return v


def text_config(cfg: dict[str, Any]) -> dict[str, Any]:
    """Unwrap a multimodal config to its language-model part (``text_config``,
    ``llm_config`` or ``language_config``) when the top level has no layer count."""
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config must be a JSON object, got {type(cfg).__name__}")
    if "num_hidden_layers" in cfg or "n_layer" in cfg:
        return cfg
    for key in ("text_config", "llm_config", "language_config"):
        sub = cfg.get(key)
        if isinstance(sub, dict):
            merged = dict(sub)
            for k in ("torch_dtype", "dtype"):
                if k not in merged and k in cfg:
                    merged[k] = cfg[k]
            return merged
    return cfg


def head_dims(cfg: dict[str, Any]) -> tuple[int, int]:
    """``(head_dim_k, head_dim_v)`` for standard attention layers.

    ``head_dim`` from the config when present (Qwen3, Gemma, gpt-oss, Mistral-Small set
    it and it differs from hidden/heads); else ``hidden_size // num_attention_heads``.

    Raises:
        ConfigError: neither ``head_dim`` nor ``hidden_size``/``num_attention_heads``
            usable, or hidden_size not divisible by the head count.
    """
    hd = cfg.get("head_dim")
    if hd is None:
        hidden = _positive_int(cfg, "hidden_size")
        heads = _positive_int(cfg, "num_attention_heads")
        if hidden % heads:
            raise ConfigError(
                f"config has no 'head_dim' and hidden_size {hidden} is not divisible by "
                f"num_attention_heads {heads}"
            )
        hd = hidden // heads
    elif not isinstance(hd, int) or isinstance(hd, bool) or hd <= 0:
        raise ConfigError(f"model config field 'head_dim' must be a positive integer, got {hd!r}")
    vd = cfg.get("v_head_dim") or hd
    return hd, vd


def num_kv_heads(cfg: dict[str, Any]) -> int:
    """``num_key_value_heads``; when absent, ``num_attention_heads`` (MHA), as transformers does."""
    if cfg.get("num_key_value_heads") is not None:
        return _positive_int(cfg, "num_key_value_heads")
    return _positive_int(cfg, "num_attention_heads")


# A layer-kind detector looks at a config and either returns the model's layer list or
# None ("not mine"). They are tried in order; the first match wins. Extending kvgate to a
# new architecture means adding a detector, not another branch elsewhere.
Detector = Callable[[dict[str, Any], int, list[str]], "list[LayerSpec] | None"]
DETECTORS: list[Detector] = []


def detector(fn: Detector) -> Detector:
    """Register a layer-kind detector (see ``DETECTORS``)."""
    DETECTORS.append(fn)
    return fn


def _attention(cfg: dict[str, Any], kind: str, window: int | None = None) -> LayerSpec:
    """One attention layer. Global (``full``) layers take ``global_head_dim`` /
    ``num_global_key_value_heads`` when the config sets them (Gemma-4 gives its global
    layers other K/V shapes than its sliding ones)."""
    hd, vd = head_dims(cfg)
    kv = num_kv_heads(cfg)
    if kind == "full":
        if cfg.get("global_head_dim") is not None:
            hd = vd = _positive_int(cfg, "global_head_dim")
        if cfg.get("num_global_key_value_heads") is not None:
            kv = _positive_int(cfg, "num_global_key_value_heads")
    return LayerSpec(kind=kind, num_kv_heads=kv, head_dim=hd, v_head_dim=vd, window=window)


# Config keys that say how layers are laid out. Errors about an unreadable pattern list
# the ones a config has, so the user sees what kvgate saw.
PATTERN_FIELDS = (
    "model_type", "layer_types", "layers_block_type", "sliding_window", "sliding_window_pattern",
    "use_sliding_window", "max_window_layers", "attention_chunk_size", "kv_lora_rank",
    "full_attention_interval", "attn_layer_period", "attn_layer_offset", "attn_layer_indices",
    "hybrid_override_pattern", "num_kv_shared_layers", "linear_num_key_heads",
    "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "linear_conv_kernel_dim", "mamba_d_state", "mamba_d_conv", "mamba_expand", "mamba_n_heads",
    "mamba_d_head", "mamba_n_groups", "state_size", "conv_kernel", "expand", "n_groups",
    "num_heads", "time_step_rank",
)


def pattern_fields_found(cfg: dict[str, Any]) -> str:
    """``key=value`` for each layout-related key present in ``cfg`` (long lists shortened)."""
    out = []
    for k in PATTERN_FIELDS:
        if cfg.get(k) is None:
            continue
        v = cfg[k]
        if isinstance(v, (list, str)) and len(v) > 8:
            v = f"[{len(v)} entries]" if isinstance(v, list) else f"{v[:12]}…"
        out.append(f"{k}={v}")
    return ", ".join(out) or "none"


def _pattern_error(cfg: dict[str, Any], what: str) -> ConfigError:
    return ConfigError(
        f"cannot read this model's layer pattern: {what}",
        hint=f"fields found: {pattern_fields_found(cfg)}",
    )


def _int_field(cfg: dict[str, Any], *keys: str, default: int | None = None) -> int:
    """The first of ``keys`` present in ``cfg`` as a positive int (or ``default``).

    Raises:
        ConfigError: none present and no default, or not a positive integer.
    """
    for k in keys:
        if cfg.get(k) is not None:
            return _positive_int(cfg, k)
    if default is not None:
        return default
    raise _pattern_error(cfg, f"missing field {' / '.join(repr(k) for k in keys)}")


# --------------------------------------------------------------------------- linear state
#
# A recurrent layer keeps, per sequence, a short-convolution window of ``conv_dim``
# channels and an SSM / delta-rule state. Shapes follow vLLM's
# ``vllm/model_executor/layers/mamba/mamba_utils.py`` (MambaStateShapeCalculator) and
# llama.cpp's ``llama_hparams::n_embd_r`` / ``n_embd_s`` (src/llama-hparams.cpp):
#
#   mixer            conv_dim                                    ssm values
#   mamba (Jamba)    d_inner = expand·hidden                     d_inner · d_state
#   mamba2           d_inner + 2·n_groups·d_state                n_heads · head_dim · d_state
#   gated_delta_net  2·n_k_heads·d_k + n_v_heads·d_v             n_v_heads · d_k · d_v
#
# state_values = conv_dim·(conv_kernel − 1) + ssm values (vLLM and llama.cpp keep
# kernel − 1 conv columns; transformers keeps conv_kernel, see layouts).

def _linear(mixer: str, conv_dim: int, conv_kernel: int, ssm_values: int, heads: int) -> LayerSpec:
    return LayerSpec(
        kind="linear",
        state_values=conv_dim * (conv_kernel - 1) + ssm_values,
        state_heads=heads,
        conv_dim=conv_dim,
        conv_kernel=conv_kernel,
        ssm_values=ssm_values,
        mixer=mixer,
    )


def _gated_delta_net_state(cfg: dict[str, Any]) -> LayerSpec:
    """Qwen3-Next linear attention (``linear_*`` fields)."""
    nk = _int_field(cfg, "linear_num_key_heads")
    nv = _int_field(cfg, "linear_num_value_heads")
    dk = _int_field(cfg, "linear_key_head_dim")
    dv = _int_field(cfg, "linear_value_head_dim")
    k = _int_field(cfg, "linear_conv_kernel_dim")
    return _linear("gated_delta_net", 2 * nk * dk + nv * dv, k, nv * dk * dv, nv)


def _mamba1_state(cfg: dict[str, Any]) -> LayerSpec:
    """Mamba-1 (Jamba's ``mamba_*``; Mamba / Falcon-Mamba's ``state_size`` etc.)."""
    d_state = _int_field(cfg, "mamba_d_state", "state_size")
    k = _int_field(cfg, "mamba_d_conv", "conv_kernel")
    if cfg.get("mamba_expand") is not None or cfg.get("intermediate_size") is None:
        d_inner = _int_field(cfg, "mamba_expand", "expand") * _positive_int(cfg, "hidden_size")
    else:
        d_inner = _positive_int(cfg, "intermediate_size")
    return _linear("mamba", d_inner, k, d_inner * d_state, d_inner)


def _mamba2_state(cfg: dict[str, Any]) -> LayerSpec:
    """Mamba-2 (``mamba2``; Bamba / Granite-4 ``mamba_n_heads``; Nemotron-H ``mamba_num_heads``)."""
    heads = _int_field(cfg, "mamba_n_heads", "mamba_num_heads", "num_heads")
    head_dim = _int_field(cfg, "mamba_d_head", "mamba_head_dim", "head_dim")
    d_state = _int_field(cfg, "mamba_d_state", "ssm_state_size", "state_size")
    groups = _int_field(cfg, "mamba_n_groups", "n_groups", default=1)
    k = _int_field(cfg, "mamba_d_conv", "conv_kernel")
    d_inner = heads * head_dim
    return _linear("mamba2", d_inner + 2 * groups * d_state, k, heads * head_dim * d_state, heads)


def linear_state(cfg: dict[str, Any]) -> LayerSpec:
    """The linear-layer :class:`LayerSpec` for a hybrid / SSM config, by which fields it has.

    Raises:
        ConfigError: no known recurrent-state field set; the message lists what was found.
    """
    if cfg.get("linear_num_value_heads") is not None:
        return _gated_delta_net_state(cfg)
    if any(cfg.get(k) is not None for k in ("mamba_n_heads", "mamba_num_heads")) or (
        cfg.get("model_type") == "mamba2"
    ):
        return _mamba2_state(cfg)
    if cfg.get("mamba_d_state") is not None or cfg.get("model_type") in ("mamba", "falcon_mamba"):
        return _mamba1_state(cfg)
    raise _pattern_error(cfg, "linear / recurrent layers without a known state-size field set")


# --------------------------------------------------------------------------- detectors
# Order matters: the first detector that recognises a config wins.
#   1. MLA            kv_lora_rank
#   2. SSM only       model_type mamba / mamba2 / falcon_mamba
#   3. Jamba          attn_layer_period / attn_layer_offset
#   4. pattern string hybrid_override_pattern (Nemotron-H) / attn_layer_indices (Bamba)
#   5. layer_types    one entry per layer (gpt-oss, Gemma-3, Qwen3-Next, Granite-4 …)
#   6. interval       full_attention_interval (Qwen3-Next without layer_types)
#   7. SWA pattern    sliding_window_pattern (Gemma-3, Cohere-2)
#   8. Gemma-2        model_type gemma2: even layers slide
#   9. Qwen2 windows  use_sliding_window with max_window_layers
#  10. guard          recurrent fields but no rule above matched: error
#  11. uniform        every layer full, or every layer sliding (Mistral-7B-v0.1)


@detector
def _mla(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """DeepSeek-V2/V3, Kimi-K2: ``kv_lora_rank`` + ``qk_rope_head_dim`` per token, no V."""
    if cfg.get("kv_lora_rank") is None:
        if cfg.get("model_type") in _MLA_MODEL_TYPES:
            raise ConfigError(f"{cfg.get('model_type')} config is missing required field 'kv_lora_rank' "
                              "(multi-head latent attention)")
        return None
    rank = _positive_int(cfg, "kv_lora_rank")
    rope = _positive_int(cfg, "qk_rope_head_dim")
    return [LayerSpec(kind="mla", latent_dim=rank + rope) for _ in range(n)]


@detector
def _ssm_only(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Pure state-space models: every layer is linear (Mamba, Falcon-Mamba, Mamba-2)."""
    if cfg.get("model_type") not in ("mamba", "mamba2", "falcon_mamba"):
        return None
    state = linear_state(cfg)
    return [state for _ in range(n)]


@detector
def _jamba(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Jamba: layer i is attention iff ``i % attn_layer_period == attn_layer_offset``,
    else Mamba (transformers ``JambaConfig.layers_block_type``)."""
    if cfg.get("attn_layer_period") is None and cfg.get("attn_layer_offset") is None:
        return None
    if cfg.get("attn_layer_period") is None or cfg.get("attn_layer_offset") is None:
        raise _pattern_error(cfg, "Jamba needs both 'attn_layer_period' and 'attn_layer_offset'")
    period = _positive_int(cfg, "attn_layer_period")
    offset = cfg["attn_layer_offset"]
    if not isinstance(offset, int) or isinstance(offset, bool) or not 0 <= offset < period:
        raise _pattern_error(cfg, f"'attn_layer_offset' must be an integer in [0, {period}), got {offset!r}")
    state = linear_state(cfg)
    return [_attention(cfg, "full") if i % period == offset else state for i in range(n)]


@detector
def _pattern_string(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Nemotron-H ``hybrid_override_pattern`` (``M`` Mamba-2, ``*`` attention, ``-``/``E``
    MLP or MoE only: no cache) and Bamba ``attn_layer_indices``."""
    pattern = cfg.get("hybrid_override_pattern")
    if pattern is not None:
        if not isinstance(pattern, str) or len(pattern) != n:
            raise _pattern_error(cfg, f"'hybrid_override_pattern' must have one character per layer ({n})")
        bad = sorted(set(pattern) - set("M*-E"))
        if bad:
            raise _pattern_error(cfg, f"unknown characters in 'hybrid_override_pattern': {''.join(bad)}")
        state = linear_state(cfg) if "M" in pattern else None
        table = {
            "M": lambda: state,
            "*": lambda: _attention(cfg, "full"),
            "-": lambda: LayerSpec(kind="shared"),  # MLP only: no cache
            "E": lambda: LayerSpec(kind="shared"),  # MoE only: no cache
        }
        if "-" in pattern or "E" in pattern:
            notes.append("hybrid_override_pattern: MLP/MoE-only layers ('-', 'E') hold no cache (listed as 0-byte 'shared')")
        return [table[c]() for c in pattern]
    idx = cfg.get("attn_layer_indices")
    if idx is not None and cfg.get("mamba_n_heads") is not None:
        if not isinstance(idx, list) or any(not isinstance(i, int) or not 0 <= i < n for i in idx):
            raise _pattern_error(cfg, f"'attn_layer_indices' must list layer numbers in [0, {n})")
        state = linear_state(cfg)
        return [_attention(cfg, "full") if i in set(idx) else state for i in range(n)]
    return None


_LAYER_TYPE_KINDS = {
    "full_attention": "full",
    "attention": "full",
    "global": "full",
    "sliding_attention": "sliding",
    "sliding_window": "sliding",
    "local": "sliding",
    "chunked_attention": "sliding",
    "linear_attention": "linear",
    "mamba": "linear",
    "mamba2": "linear",
}


@detector
def _layer_types(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """``layer_types`` (gpt-oss, Gemma-3, Qwen3-Next, Granite-4, recent transformers) or
    ``layers_block_type``: one entry per layer."""
    key = "layer_types" if cfg.get("layer_types") is not None else "layers_block_type"
    types = cfg.get(key)
    if types is None:
        return None
    if not isinstance(types, list) or len(types) != n:
        raise _pattern_error(
            cfg,
            f"{key!r} must list one type per layer ({n}), got "
            f"{len(types) if isinstance(types, list) else type(types).__name__}",
        )
    unhashable = [t for t in types if not isinstance(t, str)]
    if unhashable:
        raise ConfigError(f"entries of {key!r} must be strings, got {unhashable[0]!r}")
    unknown = sorted({str(t) for t in types if t not in _LAYER_TYPE_KINDS})
    if unknown:
        raise ConfigError(
            f"unknown entries in {key!r}: {', '.join(unknown)}",
            hint=f"known: {', '.join(_LAYER_TYPE_KINDS)}; fields found: {pattern_fields_found(cfg)}",
        )
    kinds = [_LAYER_TYPE_KINDS[t] for t in types]
    window = None
    if "sliding" in kinds:
        window = cfg.get("sliding_window") or cfg.get("attention_chunk_size")
        if window is None:
            raise _pattern_error(cfg, f"{key!r} has sliding layers but the config has no 'sliding_window'")
    state = linear_state(cfg) if "linear" in kinds else None
    make = {
        "full": lambda: _attention(cfg, "full"),
        "sliding": lambda: _attention(cfg, "sliding", window),
        "linear": lambda: state,
    }
    layers = [make[k]() for k in kinds]
    if "chunked_attention" in types:
        chunk = cfg.get("attention_chunk_size") or window
        layers = [
            replace(l, window=chunk, chunked=True) if t == "chunked_attention" else l for l, t in zip(layers, types)
        ]
    return layers


@detector
def _full_attention_interval(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Qwen3-Next without ``layer_types``: layer i is full attention iff
    ``(i + 1) % full_attention_interval == 0``, else gated-delta-net linear attention
    (transformers ``Qwen3NextConfig``; llama.cpp ``recurrent_layer_arr``)."""
    if cfg.get("full_attention_interval") is None:
        return None
    every = _positive_int(cfg, "full_attention_interval")
    state = linear_state(cfg)
    return [_attention(cfg, "full") if (i + 1) % every == 0 else state for i in range(n)]


def _window(cfg: dict[str, Any]) -> int:
    w = cfg.get("sliding_window")
    if not isinstance(w, int) or isinstance(w, bool) or w <= 0:
        raise _pattern_error(cfg, f"'sliding_window' must be a positive integer, got {w!r}")
    return w


@detector
def _sliding_window_pattern(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Gemma-3 / Cohere-2 ``sliding_window_pattern`` N: every N-th layer is global, i.e.
    layer i slides iff ``(i + 1) % N != 0`` (transformers ``Gemma3TextConfig``)."""
    pattern = cfg.get("sliding_window_pattern", cfg.get("_sliding_window_pattern"))
    if pattern is None:
        return None
    if not isinstance(pattern, int) or isinstance(pattern, bool) or pattern <= 0:
        raise _pattern_error(cfg, f"'sliding_window_pattern' must be a positive integer, got {pattern!r}")
    w = _window(cfg)
    return [_attention(cfg, "sliding", w) if (i + 1) % pattern else _attention(cfg, "full") for i in range(n)]


@detector
def _gemma2(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Gemma-2 alternates: even layers (0, 2, …) slide, odd layers are global
    (transformers ``Gemma2Config``: sliding iff ``(i + 1) % 2``)."""
    if cfg.get("model_type") != "gemma2":
        return None
    w = _window(cfg)
    return [_attention(cfg, "sliding", w) if i % 2 == 0 else _attention(cfg, "full") for i in range(n)]


@detector
def _max_window_layers(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Qwen2-style ``use_sliding_window: true`` with ``max_window_layers`` M: layers
    i ≥ M slide, the first M are full (transformers ``Qwen2Config.layer_types``)."""
    if cfg.get("use_sliding_window") is not True or cfg.get("max_window_layers") is None:
        return None
    m = cfg["max_window_layers"]
    if not isinstance(m, int) or isinstance(m, bool) or m < 0:
        raise _pattern_error(cfg, f"'max_window_layers' must be a non-negative integer, got {m!r}")
    w = _window(cfg)
    return [_attention(cfg, "sliding", w) if i >= m else _attention(cfg, "full") for i in range(n)]


_RECURRENT_HINTS = (
    "linear_num_value_heads", "mamba_d_state", "mamba_n_heads", "mamba_num_heads",
    "ssm_state_size", "hybrid_override_pattern", "attn_layer_indices",
)


@detector
def _unreadable_hybrid(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """A config with recurrent-state fields that no rule above placed: refuse rather
    than count every layer as full attention."""
    found = [k for k in _RECURRENT_HINTS if cfg.get(k) is not None]
    if found:
        raise _pattern_error(cfg, f"it has recurrent-state fields ({', '.join(found)}) but no layer pattern kvgate knows")
    return None


@detector
def _uniform(cfg: dict[str, Any], n: int, notes: list[str]) -> list[LayerSpec] | None:
    """Every layer alike: full attention, or sliding when ``sliding_window`` is set and
    not switched off (Mistral-7B-v0.1 slides on every layer; Qwen2/Qwen3 set a window
    but ``use_sliding_window: false``)."""
    window = cfg.get("sliding_window")
    if window is not None and cfg.get("use_sliding_window", True) is False:
        notes.append(f"sliding_window {window} ignored: use_sliding_window is false")
        window = None
    if window is not None:
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise ConfigError(f"model config field 'sliding_window' must be a positive integer, got {window!r}")
        return [_attention(cfg, "sliding", window) for _ in range(n)]
    return [_attention(cfg, "full") for _ in range(n)]


def apply_kv_sharing(cfg: dict[str, Any], layers: list[LayerSpec], notes: list[str]) -> list[LayerSpec]:
    """Gemma-3n ``num_kv_shared_layers`` K: the last K layers reuse the KV of earlier
    layers and cost 0 bytes (transformers ``Gemma3nTextConfig``; llama.cpp
    ``n_layer_kv_from_start``).

    Raises:
        ConfigError: K is not an integer in [0, number of layers).
    """
    k = cfg.get("num_kv_shared_layers")
    if not k:
        return layers
    if not isinstance(k, int) or isinstance(k, bool) or not 0 <= k < len(layers):
        raise _pattern_error(cfg, f"'num_kv_shared_layers' must be an integer in [0, {len(layers)}), got {k!r}")
    notes.append(f"the last {k} layers share earlier layers' KV (num_kv_shared_layers): 0 bytes each")
    return layers[: len(layers) - k] + [LayerSpec(kind="shared") for _ in range(k)]


_MLA_MODEL_TYPES = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
# Model types whose attention slides on some layers: without 'sliding_window' kvgate would
# count those layers at full length, so the field is required.
_SLIDING_MODEL_TYPES = {"gemma2", "gemma3", "gemma3_text", "cohere2", "gpt_oss"}
# transformers' JambaConfig defaults, used when a Jamba config leaves both out.
_JAMBA_DEFAULTS = {"attn_layer_period": 8, "attn_layer_offset": 4}


def spec_from_config(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json dict.

    Raises:
        ConfigError: a needed field is missing or invalid (the message names it).
    """
    cfg = text_config(cfg)
    n = _positive_int(cfg, "num_hidden_layers")
    if n > MAX_LAYERS:
        raise ConfigError(f"num_hidden_layers {n:,} is not a plausible layer count (more than {MAX_LAYERS:,})")
    notes: list[str] = []
    if cfg.get("model_type") in _SLIDING_MODEL_TYPES and cfg.get("sliding_window") is None:
        raise _pattern_error(cfg, f"{cfg['model_type']} config is missing required field 'sliding_window'")
    if cfg.get("model_type") == "jamba" and all(cfg.get(k) is None for k in _JAMBA_DEFAULTS):
        cfg = {**cfg, **_JAMBA_DEFAULTS}
        notes.append("attn_layer_period 8 / attn_layer_offset 4 taken from transformers' JambaConfig "
                     "defaults (the config leaves both out)")
    for det in DETECTORS:
        layers = det(cfg, n, notes)
        if layers is not None:
            break
    else:  # pragma: no cover - _uniform always matches
        raise ConfigError("no layer-kind rule matched this config")
    layers = apply_kv_sharing(cfg, layers, notes)
    mpe = cfg.get("max_position_embeddings")
    return ModelSpec(
        name=name,
        source=source,
        layers=layers,
        max_position_embeddings=mpe if isinstance(mpe, int) else None,
        dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
        model_type=cfg.get("model_type"),
        config=cfg,
        notes=notes,
    )


# --------------------------------------------------------------------------- loading

def preset_names() -> list[str]:
    """Names of the bundled preset configs (``src/kvgate/presets/*.json``)."""
    return sorted(p.name[:-5] for p in resources.files("kvgate.presets").iterdir() if p.name.endswith(".json"))


def load_preset(name: str) -> ModelSpec:
    """A bundled preset by name (case-insensitive).

    Raises:
        ConfigError: no such preset (the message lists them).
    """
    key = name.strip().lower()
    if key not in preset_names():
        raise ConfigError(f"no model file or preset named {name!r}", hint=f"presets: {', '.join(preset_names())}")
    text = resources.files("kvgate.presets").joinpath(f"{key}.json").read_text(encoding="utf-8")
    return spec_from_config(json.loads(text), name=key, source=f"preset:{key}")


# Loaders for other file types register here by suffix (e.g. ".gguf").
FILE_LOADERS: dict[str, Callable[[Path], ModelSpec]] = {}


def load_model(ref: str | Path) -> ModelSpec:
    """Load a model from a config.json path, a model directory, a registered file type
    (e.g. ``.gguf``), or a bundled preset name.

    Raises:
        ConfigError / KvgateError: missing file, unparsable JSON, missing fields.
    """
    import kvgate.gguf_model  # noqa: F401  (registers FILE_LOADERS[".gguf"])

    p = Path(ref)
    if p.is_dir():
        cfg_path = p / "config.json"
        if not cfg_path.exists():
            raise ConfigError(f"model directory {p} has no config.json")
        return spec_from_config(read_json(cfg_path, what="model config"), name=p.resolve().name, source=str(cfg_path))
    if p.suffix.lower() in FILE_LOADERS:
        if not p.exists():
            raise ConfigError(f"model file not found: {p}")
        return FILE_LOADERS[p.suffix.lower()](p)
    if p.exists() or p.suffix.lower() == ".json" or "/" in str(ref):
        cfg = read_json(p, what="model config")
        name = p.parent.name if p.name == "config.json" else p.stem
        return spec_from_config(cfg, name=name, source=str(p))
    return load_preset(str(ref))
