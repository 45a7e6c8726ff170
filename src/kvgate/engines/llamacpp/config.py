"""A config.json in llama.cpp's layout, mapped the way its converter maps it.

llama.cpp never reads a config.json: ``convert_hf_to_gguf.py`` writes GGUF keys from it and
llama.cpp sizes its cache from those keys. For the architectures below, kvgate writes the
same keys (:func:`converter_metadata`) and reads them with its GGUF reader
(:func:`kvgate.engines.llamacpp.gguf.spec_from_gguf_metadata`, llama.cpp's own loading rules), so a
config is sized exactly as the GGUF converted from it. Read at llama.cpp commit
``0c1e57098bba43ac29e6e3b677cdceebdd22334f`` (``conversion/*.py``):

- ``TextModel.set_gguf_parameters`` (``conversion/base.py``), the keys every converter
  below writes unless it overrides them: ``context_length`` from the first of
  ``max_position_embeddings, n_ctx, n_positions, max_length, max_sequence_length,
  model_max_length``; ``embedding_length`` from ``hidden_size, n_embd, dim``;
  ``attention.head_count`` from ``num_attention_heads, n_head, n_heads``;
  ``attention.head_count_kv`` from ``num_key_value_heads, n_kv_heads`` (absent: llama.cpp
  takes ``head_count``); ``feed_forward_length`` from ``intermediate_size, n_inner,
  hidden_dim``; ``key_length`` and ``value_length`` = ``head_dim`` when the config has one.
  InternLM2 (``InternLM2ForCausalLM`` → ``internlm2``, ``conversion/internlm.py``), MiniCPM
  (``MiniCPMForCausalLM`` → ``minicpm``, ``conversion/minicpm.py``: ``super()`` plus scales)
  and DeepSeek-MoE v1 (``DeepseekForCausalLM`` → ``deepseek``, ``conversion/deepseek.py``:
  ``super()`` plus expert counts) write these.
- Orion (``OrionForCausalLM`` → ``orion``, ``conversion/orion.py``): context from
  ``max_sequence_length``, ``max_position_embeddings`` or ``model_max_length``;
  ``head_count_kv`` = ``num_key_value_heads`` or ``num_attention_heads``; no head dims.
- MiMo-V2 (``MiMoV2FlashForCausalLM`` / ``MiMoV2ForCausalLM`` → ``mimo2``,
  ``conversion/mimo.py``) and Llama-Nemotron (``DeciLMForCausalLM`` → ``deci``,
  ``conversion/llama.py`` ``DeciModel``): per-layer arrays (:func:`_mimo2`, :func:`_deci`).
- MiniCPM3 (``MiniCPM3ForCausalLM`` → ``minicpm3``, ``conversion/minicpm.py``
  ``MiniCPM3Model.set_gguf_parameters``): ``kv_lora_rank`` and ``key_length =
  qk_nope_head_dim + qk_rope_head_dim`` but **no** ``value_length`` and no
  ``key_length_mla``: llama.cpp does not cache the MLA latent for it but full per-head K of
  96 and V of ``n_embd / n_head`` (``src/llama-model.cpp`` ``load_hparams``: "hparams.
  n_embd_head_v = hparams.n_embd / hparams.n_head();"), 2560 / 40 = 64 for MiniCPM3-4B.

Used only for llama.cpp's layout: transformers, vLLM and SGLang still read the config as
transformers does (and refuse the remote-code types: ``internlm2``, ``deepseek``,
``minicpm``, ``orion`` have no transformers class).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvgate.engines.llamacpp.arch import PINNED_COMMIT, arch_for_config
from kvgate.model.spec import ConfigError, ModelSpec

# llama.cpp architecture -> the converter class that writes it (for the note)
CONVERTED = {
    "minicpm3": "MiniCPM3Model", "minicpm": "MiniCPMModel", "internlm2": "InternLM2Model",
    "deepseek": "DeepseekModel", "orion": "OrionModel", "mimo2": "MimoV2Model", "deci": "DeciModel",
}

# conversion/mimo.py MimoV2Model._n_nextn: "MiMo V2-Flash, V2.5 and V2.5-Pro all ship 3 trained
# MTP layers ... The HF config does not expose the count, so it's hardcoded"
MIMO2_NEXTN = 3


def _first(cfg: dict[str, Any], *keys: str) -> Any:
    for k in keys:
        if cfg.get(k) is not None:
            return cfg[k]
    return None


def converter_metadata(cfg: dict[str, Any]) -> dict[str, Any] | None:
    """The GGUF keys ``convert_hf_to_gguf.py`` writes for ``cfg`` (module doc), or ``None``
    when its architecture is not one of :data:`CONVERTED`.

    Raises:
        ConfigError: a field the converter needs is missing (the converter fails too).
    """
    arch = arch_for_config(cfg, cfg.get("model_type"))
    if arch not in CONVERTED:
        return None
    def k(s: str) -> str:
        return f"{arch}.{s}"

    meta: dict[str, Any] = {"general.architecture": arch}

    def need(*keys: str) -> Any:
        v = _first(cfg, *keys)
        if v is None:
            raise ConfigError(f"llama.cpp's converter ({CONVERTED[arch]}) needs config field {keys[0]!r}, which is "
                              "missing")
        return v

    meta[k("block_count")] = need("num_hidden_layers", "n_layer", "num_layers")
    if arch == "orion":
        ctx = _first(cfg, "max_sequence_length", "max_position_embeddings", "model_max_length")
        if ctx is None:
            raise ConfigError("llama.cpp's converter (OrionModel) needs max_sequence_length, max_position_embeddings "
                              "or model_max_length ('gguf: can not find ctx length parameter.')")
        heads = need("num_attention_heads")
        meta.update({k("context_length"): ctx, k("embedding_length"): need("hidden_size"),
                     k("attention.head_count"): heads,
                     k("attention.head_count_kv"): cfg.get("num_key_value_heads", heads)})
        return meta
    if arch == "minicpm3":
        meta.update({k("context_length"): need("max_position_embeddings"),
                     k("embedding_length"): need("hidden_size"),
                     k("attention.head_count"): need("num_attention_heads"),
                     k("attention.head_count_kv"): need("num_key_value_heads"),
                     k("attention.kv_lora_rank"): need("kv_lora_rank"),
                     k("attention.key_length"): need("qk_nope_head_dim") + need("qk_rope_head_dim"),
                     k("rope.dimension_count"): need("qk_rope_head_dim")})
        return meta
    if arch == "mimo2":
        return _mimo2(cfg, meta, k, need)
    if arch == "deci":
        return _deci(cfg, meta, k, need)
    ctx = _first(cfg, "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
                 "model_max_length")
    if ctx is not None:
        meta[k("context_length")] = ctx
    for key, names in (("embedding_length", ("hidden_size", "n_embd", "dim")),
                       ("feed_forward_length", ("intermediate_size", "n_inner", "hidden_dim")),
                       ("attention.head_count", ("num_attention_heads", "n_head", "n_heads")),
                       ("attention.head_count_kv", ("num_key_value_heads", "n_kv_heads"))):
        v = _first(cfg, *names)
        if v is not None:
            meta[k(key)] = v
    if cfg.get("head_dim") is not None:
        meta[k("attention.key_length")] = meta[k("attention.value_length")] = cfg["head_dim"]
    return meta


def _mimo2(cfg: dict[str, Any], meta: dict[str, Any], k: Any, need: Any) -> dict[str, Any]:
    """``MimoV2Model.set_gguf_parameters`` (conversion/mimo.py): the generic keys, then
    ``block_count`` = layers + 3 MTP layers, per-layer ``head_count_kv`` (``swa_num_key_value_
    heads`` where ``hybrid_layer_pattern`` is 1, MTP layers as SWA), the pattern itself as
    the bool ``sliding_window_pattern``, ``value_length`` = ``v_head_dim``,
    ``nextn_predict_layers`` 3."""
    pattern = need("hybrid_layer_pattern")
    n = need("num_hidden_layers")
    if not isinstance(pattern, list) or len(pattern) != n:
        raise ConfigError(f"llama.cpp's converter (MimoV2Model) needs 'hybrid_layer_pattern' with one entry per "
                          f"layer ({n})")
    hybrid = [int(x) for x in pattern] + [1] * MIMO2_NEXTN
    kv, kv_swa = need("num_key_value_heads"), need("swa_num_key_value_heads")
    ctx = _first(cfg, "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
                 "model_max_length")
    if ctx is not None:
        meta[k("context_length")] = ctx
    head_dim = need("head_dim")
    meta.update({k("block_count"): n + MIMO2_NEXTN, k("embedding_length"): need("hidden_size"),
                 k("attention.head_count"): need("num_attention_heads"),
                 k("attention.head_count_kv"): [kv_swa if x == 1 else kv for x in hybrid],
                 k("attention.key_length"): head_dim, k("attention.value_length"): need("v_head_dim"),
                 k("attention.sliding_window"): need("sliding_window"),
                 k("attention.sliding_window_pattern"): [x == 1 for x in hybrid],
                 k("nextn_predict_layers"): MIMO2_NEXTN})
    return meta


def _deci(cfg: dict[str, Any], meta: dict[str, Any], k: Any, need: Any) -> dict[str, Any]:
    """``DeciModel`` (conversion/llama.py, Llama-Nemotron ``nemotron-nas``): per layer of
    ``block_configs``, ``head_count_kv`` = ``num_attention_heads // n_heads_in_group`` (0
    when ``n_heads_in_group`` is None: a no-op or linear-replaced attention) and
    ``head_count`` = ``num_attention_heads`` (0 for a no-op attention); ``key_length`` =
    ``value_length`` = ``hidden_size // num_attention_heads``."""
    blocks = need("block_configs")
    h, hidden = need("num_attention_heads"), need("hidden_size")
    if not isinstance(blocks, list) or len(blocks) != meta[k("block_count")]:
        raise ConfigError("llama.cpp's converter (DeciModel) needs 'block_configs' with one entry per layer")
    heads, kv = [], []
    for b in blocks:
        a = (b or {}).get("attention") or {}
        group = a.get("n_heads_in_group")
        kv.append(h // group if group else 0)
        heads.append(h if group or a.get("replace_with_linear") is True else 0)
    ctx = _first(cfg, "max_position_embeddings", "n_ctx", "n_positions", "max_length", "max_sequence_length",
                 "model_max_length")
    if ctx is not None:
        meta[k("context_length")] = ctx
    meta.update({k("embedding_length"): hidden, k("attention.head_count"): heads,
                 k("attention.head_count_kv"): kv, k("attention.key_length"): hidden // h,
                 k("attention.value_length"): hidden // h})
    return meta


def llamacpp_spec_from_config(cfg: dict[str, Any], *, name: str, source: str) -> ModelSpec | None:
    """The model in llama.cpp's layout as converted from ``cfg``; ``None`` when the config's
    architecture is not one of :data:`CONVERTED` (the caller reads it as transformers does).

    Raises:
        ConfigError: the converter would fail, or the keys it writes are unusable.
    """
    from kvgate.engines.llamacpp.gguf import spec_from_gguf_metadata

    if not isinstance(cfg, dict):
        return None
    meta = converter_metadata(cfg)
    if meta is None:
        return None
    spec = spec_from_gguf_metadata(meta, name=name, source=source)
    arch = meta["general.architecture"]
    spec.notes.insert(0, f"llama.cpp layout: the config mapped as convert_hf_to_gguf.py's {CONVERTED[arch]} writes it "
                         f"(architecture {arch!r}, llama.cpp {PINNED_COMMIT[:8]})")
    return spec


def load_for_llamacpp(ref: str | Path) -> ModelSpec | None:
    """:func:`llamacpp_spec_from_config` of a config.json path or model directory; ``None``
    for a GGUF, a preset, or a config of another architecture."""
    from kvgate.model import read_config

    p = Path(ref)
    if p.is_dir():
        p = p / "config.json"
        name = p.parent.resolve().name
    else:
        name = p.parent.name if p.name == "config.json" else p.stem
    if p.suffix.lower() != ".json" or not p.is_file():
        return None
    return llamacpp_spec_from_config(read_config(p), name=name, source=str(p))
