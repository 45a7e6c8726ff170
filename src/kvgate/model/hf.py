"""Resolve a config.json through transformers' own config classes (no torch needed).

``CONFIG_MAPPING[model_type].from_dict(config)`` is what ``AutoConfig.from_pretrained``
does with a checkpoint's config.json. The class fills what the file leaves out, exactly
as the model will run in transformers:

- class defaults (``Gemma3TextConfig``: ``head_dim`` 256, ``sliding_window_pattern`` 6);
- attribute aliases (``attribute_map``: GPT-2 / GPT-J / GPTBigCode ``n_layer``,
  ``n_head``, ``n_embd``, …) — read back under the standard names;
- derived fields (``layer_types`` from sliding patterns, Jamba's period / offset,
  Nemotron-H's ``hybrid_override_pattern``, Mamba's all-recurrent list);
- nested text configs (``get_text_config(decoder=True)``).

The per-layer cache type list follows ``transformers.cache_utils.get_layer_types_and_kwargs``
(transformers 5.24; that module needs torch, so its few lines are mirrored here): the
config's ``layer_types``; else per layer ``sliding_attention`` when ``sliding_window`` is
set, ``chunked_attention`` when ``attention_chunk_size`` is, else ``full_attention``;
``kv_sharing_modes == "reuse"`` and ``moe`` / ``mlp`` layers become ``dummy`` (no cache).

A ``model_type`` transformers does not have (remote code) is resolved through the class
of its nested text config when transformers knows that one (a wrapper around a
``kimi_linear`` text config: its ``linear_attn_config`` decides which layers are KDA), or
through the text class named in ``TEXT_CLASS_ALIASES`` (MiniMax-M3's flat ``minimax_m3``
file is ``MiniMaxM3VLTextConfig``'s text model), with a note; otherwise it is returned
unresolved, and the caller reads the raw JSON (with a note saying so).

Layer counts are bounded **before** a config reaches a transformers class: several
classes build per-layer lists in ``__post_init__`` (``GlmMoeDsaConfig.indexer_types``),
so a ``num_hidden_layers`` of 10^30 would hang there.

No torch: every use of transformers' config classes goes through
:func:`kvgate.model.torchless.with_config_classes`, so reading a config.json does not import
torch even where torch is installed (that module says how).
"""

from __future__ import annotations

import contextlib
import os
import warnings
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kvgate.model.spec import MAX_LAYERS, ConfigError
from kvgate.model.torchless import with_config_classes


@dataclass
class Resolved:
    """A config after transformers' config class.

    Attributes:
        config: the (text) config as a plain dict: every field of the class (defaults
            included) plus the standard names of aliased attributes.
        layer_types: transformers' per-layer cache type (one string per layer), or
            ``None`` when transformers was not used (raw JSON).
        per_layer: for heterogeneous configs (Gemma-4, Step-3.7: ``per_layer_config``),
            each layer's own config dict (its head_dim, KV heads, …); else ``None``.
        config_class: the transformers class name, or ``None``.
        notes: what was assumed (shown to users in ``ModelSpec.notes``).
        image_positions: vision positions per image of mllama's cross-attention layers,
            else ``None``.
        defaulted: cache- and weight-shaping fields (``CACHE_FIELDS``, ``WEIGHT_FIELDS``)
            the file does not state, with the value the class filled in.
        encoder_decoder: ``None`` for a decoder-only model; else the encoder positions
            each cross-attention layer holds (0: the input's length, not known yet).
    """

    config: dict[str, Any]
    layer_types: list[str] | None = None
    per_layer: list[dict[str, Any]] | None = None
    config_class: str | None = None
    notes: list[str] = field(default_factory=list)
    image_positions: int | None = None
    defaulted: dict[str, Any] = field(default_factory=dict)
    encoder_decoder: int | None = None


# Remote-code model types whose text model transformers has under another name: the flat
# file is read by that text class (which reads the same fields), with a note.
# MiniMax-M3 (``"model_type": "minimax_m3"``, ``MiniMaxM3ForCausalLM``): transformers 5.24
# ``MiniMaxM3VLTextConfig`` (checkpoint MiniMaxAI/MiniMax-M3) reads its
# ``sparse_attention_config`` (``sparse_attention_freq``, ``sparse_index_dim``) and
# ``moe_layer_freq``.
TEXT_CLASS_ALIASES = {"minimax_m3": "minimax_m3_vl_text"}

_NESTED = ("text_config", "llm_config", "language_config")
_LAYER_COUNT_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers")
_HEAD_COUNT_KEYS = ("num_attention_heads", "num_key_value_heads", "n_head")


# Cache-shaping fields: when the config leaves one out and the class fills it, the note
# says so (the user sees what kvgate did not read from the file).
CACHE_FIELDS = (
    "num_hidden_layers", "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_size",
    "sliding_window", "sliding_window_pattern", "attention_chunk_size", "attn_layer_period", "attn_layer_offset",
    "kv_lora_rank", "qk_rope_head_dim", "index_head_dim", "conv_L_cache", "linear_conv_kernel_dim",
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim",
    "mamba_d_state", "mamba_d_conv", "mamba_expand", "state_size", "conv_kernel", "num_kv_shared_layers",
    "global_head_dim", "num_global_key_value_heads",
)


# Weight-shaping fields a weights estimate reads (``kvgate.model.weights.estimate_params``):
# when the class fills one, the estimate says so.
WEIGHT_FIELDS = (
    "hidden_size", "vocab_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "head_dim",
    "tie_word_embeddings", "moe_intermediate_size", "n_routed_experts", "num_experts", "num_local_experts",
    "n_shared_experts", "shared_expert_intermediate_size", "first_k_dense_replace", "q_lora_rank", "kv_lora_rank",
    "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim",
)


def _quiet_import() -> None:
    # NOTE: transformers prints "PyTorch was not found. Models won't be available" on import
    # when torch is absent; kvgate only reads config classes, so that advice is noise here.
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")


def _config_mapping() -> Any:
    _quiet_import()
    try:
        from transformers import CONFIG_MAPPING
    except ImportError:  # pragma: no cover - transformers is a core dependency
        return None
    return CONFIG_MAPPING


def transformers_version() -> str | None:
    """The installed transformers version, or ``None``."""
    _quiet_import()
    try:
        import transformers
    except ImportError:  # pragma: no cover
        return None
    return str(transformers.__version__)


def _dtype_name(v: Any) -> str | None:
    if v is None:
        return None
    s = str(v)
    return s[len("torch."):] if s.startswith("torch.") else s


def _as_dict(text: Any) -> dict[str, Any]:
    d: dict[str, Any] = dict(text.to_dict())
    # Aliased attributes: to_dict keeps the class's own names (n_layer); kvgate reads
    # the standard ones (num_hidden_layers).
    for std in getattr(text, "attribute_map", {}) or {}:
        try:
            d[std] = getattr(text, std)
        except Exception:  # noqa: BLE001 - a missing alias, or one that differs per layer
            continue
    for k in ("dtype", "torch_dtype"):
        if k in d:
            d[k] = _dtype_name(d[k])
    if d.get("dtype") is None and getattr(text, "dtype", None) is not None:
        d["dtype"] = _dtype_name(text.dtype)
    return d


def layer_types_of(text: Any) -> list[str]:
    """transformers' per-layer cache type list for a (text) config object (see module doc)."""
    types = getattr(text, "layer_types", None)
    if types is None:
        n = text.num_hidden_layers
        if not isinstance(n, int) or isinstance(n, bool) or not 0 <= n <= MAX_LAYERS:
            # before [text] * n: a typo of 10^9 layers would allocate gigabytes here
            raise ConfigError(f"num_hidden_layers {n!r:.40} is not a plausible layer count (0 to {MAX_LAYERS:,})")
        layer_cfgs = text.per_layer_config if getattr(text, "is_heterogeneous", False) else [text] * n
        types = []
        for lc in layer_cfgs:
            if getattr(lc, "sliding_window", None) is not None:
                types.append("sliding_attention")
            elif getattr(lc, "attention_chunk_size", None) is not None:
                types.append("chunked_attention")
            else:
                types.append("full_attention")
    types = [str(t) for t in types]
    modes = getattr(text, "kv_sharing_modes", None)
    if modes is not None:
        types = ["dummy" if m == "reuse" else t for t, m in zip(types, modes)]
    return ["dummy" if t in ("moe", "mlp") else t for t in types]


@contextlib.contextmanager
def _quiet() -> Iterator[None]:
    """transformers' config classes log and warn about fields they rename or ignore, and log an
    error with the whole config before a class rejects it; kvgate's output stays its own (what matters is in ``ModelSpec.notes``)."""
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity(hf_logging.CRITICAL)  # its error lines too: kvgate raises its own (ConfigError)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            yield
    finally:
        hf_logging.set_verbosity(level)


def _flat(raw: dict[str, Any]) -> bool:
    """The file sets its layer count at the top level and nests no text config."""
    return raw.get("num_hidden_layers") is not None and not any(
        isinstance(raw.get(k), dict) for k in ("text_config", "llm_config", "language_config"))


def _given_text_fields(raw: dict[str, Any]) -> set[str]:
    """Keys the file itself sets, at the top level or in a nested text config."""
    keys = set(raw)
    for sub in ("text_config", "llm_config", "language_config"):
        if isinstance(raw.get(sub), dict):
            keys |= set(raw[sub])
    return keys


def _aliased(text: Any, key: str, given: set[str]) -> bool:
    alias = (getattr(text, "attribute_map", {}) or {}).get(key)
    return alias is not None and alias in given


def resolve(raw: dict[str, Any]) -> Resolved:
    """Resolve ``raw`` (a config.json dict) through transformers when it knows the model type.

    torch is not imported for it (module doc).

    Returns:
        :class:`Resolved`; ``layer_types`` is ``None`` when the config was not resolved
        (no ``model_type``, or one transformers does not have).

    Raises:
        ConfigError: transformers' config class rejects the config (its message kept).
    """
    return with_config_classes(lambda: _resolve(raw))


def check_layer_counts(raw: dict[str, Any]) -> None:
    """Refuse, before any transformers class sees the config (see the module doc), a layer
    count above ``MAX_LAYERS`` and a head count ≤ 0, at the top level or in a nested text
    config (transformers would hang building per-layer lists, or divide by zero).

    Raises:
        ConfigError: naming the field.
    """
    for where, d in [("", raw)] + [(f"{k}.", raw[k]) for k in _NESTED if isinstance(raw.get(k), dict)]:
        for key in _LAYER_COUNT_KEYS:
            v = d.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and not -1 < v <= MAX_LAYERS:
                raise ConfigError(f"model config field '{where}{key}' is {v!r:.40}: not a plausible layer count "
                                  f"(0 to {MAX_LAYERS:,})")
        for key in _HEAD_COUNT_KEYS:
            v = d.get(key)
            if isinstance(v, (int, float)) and not isinstance(v, bool) and v <= 0:
                raise ConfigError(f"model config field '{where}{key}' must be a positive integer, got {v!r}")


def _nested_known(raw: dict[str, Any], mapping: Any) -> tuple[str, dict[str, Any]] | None:
    """``(key, text config)`` of a wrapper transformers does not know whose nested text
    config has a ``model_type`` it does know; ``None`` otherwise."""
    if raw.get("num_hidden_layers") is not None:
        return None
    for key in _NESTED:
        sub = raw.get(key)
        if isinstance(sub, dict) and isinstance(sub.get("model_type"), str) and sub["model_type"] in mapping:
            return key, sub
    return None


def _resolve(raw: dict[str, Any]) -> Resolved:
    check_layer_counts(raw)
    model_type = raw.get("model_type")
    mapping = _config_mapping()
    if mapping is None:  # pragma: no cover - transformers is a core dependency
        return Resolved(config=raw)
    if isinstance(model_type, str) and model_type not in mapping:
        nested = _nested_known(raw, mapping)
        if nested is not None:
            key, sub = nested
            inner = dict(sub)
            for k in ("torch_dtype", "dtype"):
                if k not in inner and k in raw:
                    inner[k] = raw[k]
            res = _resolve(inner)
            res.notes.insert(0, f"model_type {model_type!r} is not in transformers {transformers_version()}: its "
                                f"{key} (model_type {sub['model_type']!r}) was read through transformers' "
                                f"{res.config_class}")
            return res
        alias = TEXT_CLASS_ALIASES.get(model_type)
        if alias is not None and alias in mapping:
            res = _resolve({**raw, "model_type": alias})
            res.notes.insert(0, f"model_type {model_type!r} is not in transformers {transformers_version()} (remote "
                                f"code): read through transformers' {res.config_class}, the class of its text model")
            return res
    if not isinstance(model_type, str) or model_type not in mapping:
        return Resolved(config=raw)
    cls = mapping[model_type]
    notes: list[str] = []
    try:
        with _quiet():
            obj = cls.from_dict(dict(raw))
            text = obj.get_text_config(decoder=True)
            encdec = encoder_decoder(obj, model_type, notes)
            if text is not obj and _flat(raw) and encdec is None:
                # A composite class (Step3p7Config nests a text config) given a flat file
                # (the remote-code layout): the file's layer fields are the text model's.
                text = type(text).from_dict({k: v for k, v in raw.items() if k != "model_type"})
                notes.append(f"the config is flat but transformers' {cls.__name__} nests its text config: "
                             f"the top-level fields were read as {type(text).__name__}")
        n = text.num_hidden_layers
    except ConfigError:
        raise
    except Exception as exc:  # transformers' own validation: keep its words
        words = " ".join(str(exc).split())[:400]  # one ERROR line: transformers' validators print several
        raise ConfigError(f"transformers' {cls.__name__} rejects this config: {type(exc).__name__}: {words}",
                          hint="the config must load with transformers.AutoConfig") from exc
    types = layer_types_of(text)
    if n is None:  # NemotronHConfig: deprecated, the layer list decides
        n = len(types)
    if not isinstance(n, int) or isinstance(n, bool) or n <= 0:
        raise ConfigError(f"model config field 'num_hidden_layers' must be a positive integer, got {n!r}")
    cfg = _as_dict(text)
    cfg["num_hidden_layers"] = n
    per_layer = None
    if getattr(text, "is_heterogeneous", False):
        per_layer = [_as_dict(lc) for lc in text.per_layer_config]
        for d in per_layer:
            d["num_hidden_layers"], d["model_type"] = n, cfg.get("model_type") or model_type
    if cfg.get("dtype") is None and cfg.get("torch_dtype") is None:
        top = _dtype_name(raw.get("torch_dtype") or raw.get("dtype"))
        if top is not None:
            cfg["dtype"] = top
    cfg["model_type"] = getattr(text, "model_type", None) or model_type
    if encdec is not None and cfg.get("max_position_embeddings") is None and \
            isinstance(getattr(text, "max_target_positions", None), int):
        cfg["max_position_embeddings"] = text.max_target_positions  # Whisper's decoder: 448
    if per_layer is not None:
        for d in per_layer:
            d["model_type"] = cfg["model_type"]
    given = _given_text_fields(raw)
    unused = {"head_dim"} if cfg.get("kv_lora_rank") is not None else set()  # MLA sizes by its latent
    defaulted = {k: cfg[k] for k in dict.fromkeys(CACHE_FIELDS + WEIGHT_FIELDS)
                 if k not in given and not _aliased(text, k, given) and cfg.get(k) is not None}
    if "num_hidden_layers" in defaulted and "hidden_size" in defaulted:
        # nothing in the file sizes the model: the class's defaults would answer for another model
        raise ConfigError(f"the config states neither a layer count nor a width (num_hidden_layers, hidden_size or "
                          f"an alias): transformers' {type(text).__name__} defaults ({defaulted['num_hidden_layers']} "
                          f"layers, hidden_size {defaulted['hidden_size']}) would size another model",
                          hint="give the model's own config.json (it states its layers and widths)")
    filled = [f"{k} {cfg[k]}" for k in CACHE_FIELDS if k in defaulted and k not in unused]
    if "layer_types" not in given and "layers_block_type" not in given and len(set(types)) > 1:
        counts = ", ".join(f"{types.count(t)} {t}" for t in dict.fromkeys(types))
        filled.append(f"layer_types ({counts})")
    if filled:
        notes.append(f"{', '.join(filled)} from transformers' {type(text).__name__} defaults or derived "
                     "fields (the file does not state them under these names)")
    if model_type in NO_CACHE:
        types = ["dummy"] * len(types)
        notes.append(f"transformers keeps no KV cache for {model_type!r}: {NO_CACHE[model_type]}; 0 bytes")
    return Resolved(notes=notes, config=cfg, layer_types=types, per_layer=per_layer, config_class=type(text).__name__,
                    image_positions=_image_positions(obj, text), defaulted=defaulted, encoder_decoder=encdec)


# Model types whose transformers model keeps no cache at all: every generation step
# recomputes the whole prefix (transformers 5.25 ``models/openai/modeling_openai.py``:
# ``OpenAIGPTModel.forward`` takes no ``past_key_values`` and returns none, and the file
# names no ``Cache``). The layers are listed as holding nothing (``dummy``).
NO_CACHE = {"openai-gpt": "OpenAIGPTLMHeadModel takes no past_key_values (every step recomputes the prefix)"}

# Encoder-decoder models whose encoder length the model fixes (transformers 5.25
# ``models/whisper/modeling_whisper.py``: ``WhisperEncoder.forward`` refuses mel features
# other than ``max_source_positions × conv1.stride × conv2.stride`` frames, so its output,
# the positions every cross-attention layer caches, is ``max_source_positions`` long).
FIXED_ENCODER_FIELD = {"whisper": "max_source_positions"}


def encoder_decoder(obj: Any, model_type: str, notes: list[str]) -> int | None:
    """For an encoder-decoder config (``is_encoder_decoder``), the encoder positions its
    cross-attention layers hold: the model's fixed length (Whisper), or 0 when they follow
    the input's length (T5, BART: given later with ``--encoder-len``); ``None`` for a
    decoder-only model.

    transformers 5.25 ``generation/utils.py`` ``_prepare_static_cache``: an
    encoder-decoder model's static cache is ``EncoderDecoderCache(StaticCache(decoder
    config, max_cache_len), StaticCache(decoder config, max_cache_len =
    encoder_outputs[0].shape[1]))``; the decoder config is ``get_text_config(decoder=True)``
    (``decoder_layers`` / ``decoder_attention_heads`` read as ``num_hidden_layers`` /
    ``num_attention_heads``).
    """
    if getattr(obj, "is_encoder_decoder", False) is not True:
        return None
    field_name = FIXED_ENCODER_FIELD.get(model_type)
    if field_name is None:
        return 0
    n = getattr(obj, field_name, None)
    if not isinstance(n, int) or isinstance(n, bool) or not 0 < n <= 2**50:
        raise ConfigError(f"model config field {field_name!r} must be a positive integer, got {n!r}")
    return n


def _image_positions(obj: Any, text: Any) -> int | None:
    """Vision positions one image gives a cross-attention layer (mllama), or ``None``
    when the text config has no cross-attention layers.

    transformers 5.24 ``modeling_mllama.py``, ``MllamaForConditionalGeneration.
    _prepare_static_cache``: ``max_num_tiles × ((image_size // patch_size)² + 1)`` per
    image. 0 when the config has cross-attention layers but no vision config to size them.
    """
    if not getattr(text, "cross_attention_layers", None):
        return None
    vision = getattr(obj, "vision_config", None)
    try:
        tiles, size, patch = vision.max_num_tiles, vision.image_size, vision.patch_size
    except AttributeError:
        return 0
    if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in (tiles, size, patch)):
        raise ConfigError(f"vision_config max_num_tiles, image_size, patch_size must be positive integers, "
                          f"got {tiles!r}, {size!r}, {patch!r}")
    return int(tiles * ((size // patch) ** 2 + 1))


def with_transformers_gguf_names(config: dict[str, Any]) -> dict[str, Any]:
    """A GGUF's metadata ``config`` (``gguf_architecture``, ``{arch}.embedding_length`` …) with
    the transformers field names added as transformers reads a ``.gguf`` into a config
    (``transformers.integrations.ggml.GGUF_CONFIG_MAPPING``, transformers 5.25:
    ``embedding_length`` → ``hidden_size``, ``feed_forward_length`` → ``intermediate_size``,
    ``block_count`` → ``num_hidden_layers`` …; ``vocab_size`` from the tokenizer's tokens when
    the metadata has none). vLLM and SGLang load a GGUF's config this way
    (``AutoConfig.from_pretrained(…, gguf_file=…)``). Names already present are kept; a config
    without ``gguf_architecture``, or of an architecture transformers does not map, comes back
    unchanged."""
    arch = config.get("gguf_architecture")
    if not isinstance(arch, str):
        return config

    def mapping() -> dict[str, Any]:
        from transformers.integrations.ggml import GGUF_CONFIG_MAPPING  # noqa: PLC0415

        return dict(GGUF_CONFIG_MAPPING)

    from kvgate.model.torchless import with_config_classes  # noqa: PLC0415

    table = with_config_classes(mapping)
    names = table.get(arch) or table.get(arch.replace("moe", "_moe")) or table.get(arch.replace("-", "_"))
    if not names:
        return config
    out = dict(config)
    for key, hf_name in names.items():
        if hf_name and f"{arch}.{key}" in config:
            out.setdefault(hf_name, config[f"{arch}.{key}"])
    tokens = config.get("tokenizer_tokens")
    if "vocab_size" not in out and isinstance(tokens, int | list):
        out["vocab_size"] = tokens if isinstance(tokens, int) else len(tokens)
    return out
