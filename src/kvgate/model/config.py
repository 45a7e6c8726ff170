"""Layer-kind detectors: from a config.json dict to the model's list of layers.

Each detector looks at a config and returns the layer list or ``None`` ("not mine");
they are tried in order and the first match wins. :func:`spec_from_config` runs them.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from kvgate.model.fields import (
    _attention,
    _pattern_error,
    _positive_int,
    linear_state,
    pattern_fields_found,
    text_config,
)
from kvgate.model.hf import Resolved, resolve, transformers_version
from kvgate.model.layer_types import layers_from_types
from kvgate.model.spec import MAX_LAYERS, ConfigError, LayerSpec, ModelSpec

# A layer-kind detector looks at a config and either returns the model's layer list or
# None ("not mine"). They are tried in order; the first match wins. Extending kvgate to a
# new architecture means adding a detector, not another branch elsewhere.
Detector = Callable[[dict[str, Any], int, list[str]], "list[LayerSpec] | None"]
DETECTORS: list[Detector] = []


def detector(fn: Detector) -> Detector:
    """Register a layer-kind detector (see ``DETECTORS``)."""
    DETECTORS.append(fn)
    return fn


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


# Fields that state a layer pattern outright: a config transformers cannot resolve
# (remote code) is read from its raw JSON only when it has one of these.
_EXPLICIT_PATTERN = (
    "layer_types", "layers_block_type", "hybrid_override_pattern", "attn_layer_indices", "attn_layer_period",
    "kv_lora_rank", "full_attention_interval", "sliding_window_pattern",
)


def _hf_layers(res: Resolved, notes: list[str], images: int = 0) -> tuple[dict[str, Any], list[LayerSpec]]:
    cfg = res.config
    types = res.layer_types or []
    n = cfg.get("num_hidden_layers")
    if len(types) > MAX_LAYERS:
        raise ConfigError(f"{len(types):,} layers is not a plausible layer count (more than {MAX_LAYERS:,})")
    if n != len(types):
        raise _pattern_error(cfg, f"transformers' {res.config_class} lists {len(types)} layer types for "
                                  f"num_hidden_layers {n}")
    layers = layers_from_types(cfg, types, notes, res.per_layer, image_positions=res.image_positions, images=images)
    layers = apply_kv_sharing(cfg, layers, notes)
    if res.encoder_decoder is not None:
        from kvgate.model.encdec import add_cross_layers
        from kvgate.model.hf import FIXED_ENCODER_FIELD

        fixed = cfg.get("model_type") in FIXED_ENCODER_FIELD
        layers = add_cross_layers(layers, res.encoder_decoder, fixed, notes)
    return cfg, layers


def _raw_layers(cfg: dict[str, Any], notes: list[str]) -> tuple[dict[str, Any], list[LayerSpec]]:
    cfg = text_config(cfg)
    mt = cfg.get("model_type")
    if isinstance(mt, str):
        if not any(cfg.get(k) is not None for k in _EXPLICIT_PATTERN):
            raise ConfigError(
                f"unknown model_type {mt!r}: transformers {transformers_version()} has no config class for it and "
                "the config states no layer pattern, so kvgate would have to guess which layers slide or recur",
                hint="add 'layer_types' (one entry per layer: full_attention, sliding_attention, ...) to the config, "
                     f"or use a transformers version that knows {mt!r}; fields found: {pattern_fields_found(cfg)}")
        notes.append(f"model_type {mt!r} is not in transformers {transformers_version()} (remote code?): "
                     "read from the raw config.json, without class defaults")
    n = _positive_int(cfg, "num_hidden_layers")
    if n > MAX_LAYERS:
        raise ConfigError(f"num_hidden_layers {n:,} is not a plausible layer count (more than {MAX_LAYERS:,})")
    if cfg.get("model_type") in _SLIDING_MODEL_TYPES and cfg.get("sliding_window") is None:
        raise _pattern_error(cfg, f"{cfg['model_type']} config is missing required field 'sliding_window'")
    for det in DETECTORS:
        layers = det(cfg, n, notes)
        if layers is not None:
            break
    else:  # pragma: no cover - _uniform always matches
        raise ConfigError("no layer-kind rule matched this config")
    return cfg, apply_kv_sharing(cfg, layers, notes)


def _refuse_nested_model_type_only(cfg: dict[str, Any]) -> None:
    """Refuse a wrapper config with no top-level ``model_type`` whose nested text config
    has one, as transformers' ``AutoConfig.from_pretrained`` does (transformers 5.24
    ``models/auto/configuration_auto.py``: without ``model_type`` in the file it raises
    "Unrecognized model ... Should have a `model_type` key in its config.json"; it never
    reads the wrapper through its ``text_config``).

    Raises:
        ConfigError: naming the missing top-level field and the nested one found.
    """
    inner = text_config(cfg)
    if cfg.get("model_type") is not None or inner is cfg or not isinstance(inner.get("model_type"), str):
        return
    key = next(k for k in ("text_config", "llm_config", "language_config") if isinstance(cfg.get(k), dict))
    raise ConfigError(
        f"model config has no top-level field 'model_type' (only {key}.model_type {inner['model_type']!r}): "
        "transformers' AutoConfig refuses such a config.json ('Should have a `model_type` key'), and so do the "
        "engines that load through it",
        hint=f"add the wrapper's own model_type at the top level, or pass the {key} object alone as the config")


def spec_from_config(cfg: dict[str, Any], *, name: str, source: str, images: int = 0) -> ModelSpec:
    """Build a :class:`ModelSpec` from a config.json dict.

    A ``model_type`` transformers knows is resolved through its config class
    (:mod:`kvgate.model.hf`) and its per-layer cache types (:mod:`kvgate.model.layer_types`).
    Otherwise the raw JSON is read by the detectors above, with a note; an unknown
    ``model_type`` whose config states no layer pattern is refused. A config without
    ``model_type`` is read raw (hand-written test configs).

    ``images``: images per sequence held by cross-attention layers (mllama); 0, the
    default, is a text-only sequence (those layers hold nothing; a note says so).

    Raises:
        ConfigError: a needed field is missing or invalid, an unknown model type or
            layer type (the message names it).
    """
    if not isinstance(cfg, dict):
        raise ConfigError(f"model config must be a JSON object, got {type(cfg).__name__}")
    for where in (cfg, text_config(cfg)):
        mt = where.get("model_type")
        if mt is not None and not isinstance(mt, str):
            raise ConfigError(f"model config field 'model_type' must be a string, got {mt!r}")
    _refuse_nested_model_type_only(cfg)
    if not isinstance(images, int) or isinstance(images, bool) or images < 0:
        raise ConfigError(f"images must be a non-negative integer, got {images!r}")
    res = resolve(cfg)
    notes: list[str] = list(res.notes)
    if res.layer_types is not None:
        cfg, layers = _hf_layers(res, notes, images)
    else:
        cfg, layers = _raw_layers(cfg, notes)
    mpe = cfg.get("max_position_embeddings")
    if isinstance(mpe, int) and not isinstance(mpe, bool) and not 0 <= mpe <= 2**50:
        # 0 reads as "not stated"; above 2^50 no context comes near (the flags' bound, fit/humanint.py)
        raise ConfigError(f"model config field 'max_position_embeddings' is {mpe:.6g}: not a plausible "
                          "context length (1 to 2^50)")
    return ModelSpec(
        name=name,
        source=source,
        layers=layers,
        max_position_embeddings=mpe if isinstance(mpe, int) and not isinstance(mpe, bool) else None,
        dtype=cfg.get("torch_dtype") or cfg.get("dtype"),
        model_type=cfg.get("model_type"),
        config=cfg,
        notes=notes,
        defaulted=dict(res.defaulted),
    )
