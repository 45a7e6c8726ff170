"""From transformers' per-layer cache types to kvgate layers.

transformers 5.24 (``cache_utils.STATIC_LAYER_TYPE_MAPPING`` and
``configuration_utils.ALLOWED_ATTN_LAYER_TYPES``) caches each layer by one of these types;
kvgate models each as follows (shapes from the model files named):

=============================  =====================  ================================================
transformers type              kvgate layer           cache tensors (``StaticCache``, model dtype
                                                      unless noted)
=============================  =====================  ================================================
``full_attention``             ``full``               K, V ``[B, kv_heads, L, head_dim]``
``full_attention`` + MLA       ``mla``                K ``[B, 1, L, kv_lora_rank]``, V ``[B, 1, L,
                                                      qk_rope_head_dim]`` (DeepSeek-V2/V3, Kimi-K2)
``sliding_attention``          ``sliding``            K, V ``[B, kv_heads, min(W, L), head_dim]``
``chunked_attention``          ``sliding`` chunked    as sliding, W = ``attention_chunk_size``
``indexed_attention``          ``mla`` + index keys   MLA, plus ``indexer_keys [B, L, index_head_dim]``
                                                      (``deepseek_v32``, ``glm_moe_dsa``)
``linear_attention``           ``linear``             conv ``[B, conv_dim, conv_kernel]``, recurrent
                                                      state (fp32 for the gated delta net)
``conv``                       ``linear`` (mixer      LFM2 ``Lfm2ShortConv``: conv ``[B, hidden,
                               ``conv``)              conv_L_cache]``, no recurrent state
``hybrid`` (Falcon-H1)         ``full`` with a        K, V as full, plus the Mamba-2 conv and
                               recurrent state        recurrent state of the same layer
``dummy`` (KV sharing          ``shared``             none
``reuse``, ``moe``, ``mlp``)
=============================  =====================  ================================================

Refused, with an error naming the type: DeepSeek-V4's ``compressed_sparse_attention`` /
``heavily_compressed_attention`` (its compressor state and compressed positions are sized
from compression ratios at run time), ``hybrid`` layers other than Falcon-H1's (Zamba,
Zamba2, Zaya: not checked against transformers yet), ``hybrid_sliding``, ``minimax_m3_sparse``,
``reference_sliding_attention``, and any type kvgate does not know.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvgate.model.fields import _attention, _pattern_error, _positive_int, linear_state, recurrent_layer
from kvgate.model.spec import ConfigError, LayerSpec

# Model types whose ``indexed_attention`` layers keep DeepSeek sparse-attention indexer
# keys ``[B, L, index_head_dim]`` (modeling_deepseek_v32.py / modeling_glm_moe_dsa.py,
# ``DeepseekV32Indexer``: ``cache.update_indexer(k)`` with k of ``index_head_dim``).
INDEXED_MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa")

_REFUSED = {
    "compressed_sparse_attention": "DeepSeek-V4 compressed sparse attention (compressor state and compressed "
                                   "positions sized from compression ratios at run time)",
    "heavily_compressed_attention": "DeepSeek-V4 heavily compressed attention (compressor state sized at run time)",
    "hybrid_sliding": "a layer holding both sliding attention KV and a recurrent state (Zaya)",
    "minimax_m3_sparse": "MiniMax-M3 lightning-index sparse attention",
    "reference_sliding_attention": "UnlimitedOCR reference sliding attention (prefill kept in full)",
}

KNOWN_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "indexed_attention",
               "linear_attention", "conv", "hybrid", "dummy")

# Model types whose ``hybrid`` layers (attention KV and a Mamba-2 state in one layer) are
# sized here and checked against transformers (tests/test_conformance_transformers.py).
HYBRID_MODEL_TYPES = ("falcon_h1",)


def _mla(cfg: dict[str, Any], index_dim: int = 0) -> LayerSpec:
    rank = _positive_int(cfg, "kv_lora_rank")
    rope = _positive_int(cfg, "qk_rope_head_dim")
    return LayerSpec(kind="mla", latent_dim=rank + rope, index_dim=index_dim)


def _conv_only(cfg: dict[str, Any]) -> LayerSpec:
    """LFM2 short convolution: conv state ``[B, hidden_size, conv_L_cache]`` (modeling_lfm2.py
    ``Lfm2ShortConv``: ``update_conv_state(..., conv_kernel_size=config.conv_L_cache)``)."""
    hidden = _positive_int(cfg, "hidden_size")
    k = _positive_int(cfg, "conv_L_cache")
    return recurrent_layer("conv", hidden, k, 0, 1)


def layers_from_types(cfg: dict[str, Any], types: list[str], notes: list[str],
                      per_layer: list[dict[str, Any]] | None = None) -> list[LayerSpec]:
    """One :class:`LayerSpec` per entry of transformers' cache type list (table above).

    Args:
        cfg: the resolved (text) config dict (class defaults and aliases filled).
        types: transformers' per-layer cache types (``kvgate.model.hf.layer_types_of``).
        notes: appended to when something is assumed.
        per_layer: each layer's own config dict for heterogeneous configs (Gemma-4's
            global layers: other head_dim and KV heads), else ``None``.

    Raises:
        ConfigError: a refused or unknown layer type (named), or a missing field.
    """
    for t in dict.fromkeys(types):
        if t in _REFUSED:
            raise ConfigError(
                f"layer type {t!r} ({cfg.get('model_type')}) is not sized by kvgate: {_REFUSED[t]}",
                hint="see docs/architectures.md (what kvgate refuses and why)")
        if t not in KNOWN_TYPES:
            raise ConfigError(f"unknown layer type {t!r} in {cfg.get('model_type')!r} config",
                              hint=f"known: {', '.join(KNOWN_TYPES)}")
    if per_layer is not None and len(per_layer) != len(types):
        raise ConfigError(f"per_layer_config lists {len(per_layer)} layers for {len(types)} layer types")
    cache: dict[str, LayerSpec] = {}

    def make(t: str, cfg: dict[str, Any]) -> LayerSpec:
        mla = cfg.get("kv_lora_rank") is not None
        if t == "full_attention":
            spec = _mla(cfg) if mla else _attention(cfg, "full")
        elif t == "sliding_attention":
            w = cfg.get("sliding_window")
            if w is None:
                raise _pattern_error(cfg, "sliding layers but no 'sliding_window'")
            spec = _attention(cfg, "sliding", w)
        elif t == "chunked_attention":
            w = cfg.get("attention_chunk_size")
            if w is None:
                raise _pattern_error(cfg, "chunked layers but no 'attention_chunk_size'")
            spec = replace(_attention(cfg, "sliding", w), chunked=True)
        elif t == "indexed_attention":
            if cfg.get("model_type") not in INDEXED_MODEL_TYPES or not mla:
                raise ConfigError(f"indexed attention of {cfg.get('model_type')!r} is not sized by kvgate "
                                  f"(known: {', '.join(INDEXED_MODEL_TYPES)})")
            spec = _mla(cfg, index_dim=_positive_int(cfg, "index_head_dim"))
        elif t == "linear_attention":
            spec = linear_state(cfg)
        elif t == "conv":
            spec = _conv_only(cfg)
        elif t == "hybrid":
            if cfg.get("model_type") not in HYBRID_MODEL_TYPES:
                raise ConfigError(f"hybrid layers of {cfg.get('model_type')!r} (attention KV and a recurrent state "
                                  f"in one layer) are not sized by kvgate (known: {', '.join(HYBRID_MODEL_TYPES)})")
            st = linear_state(cfg)
            spec = replace(_attention(cfg, "full"), conv_dim=st.conv_dim, conv_kernel=st.conv_kernel,
                           ssm_values=st.ssm_values, state_values=st.state_values, state_heads=st.state_heads,
                           mixer=st.mixer)
        else:  # dummy
            spec = LayerSpec(kind="shared")
        return spec

    if per_layer is not None:
        layers = [make(t, c) for t, c in zip(types, per_layer)]
    else:
        for t in dict.fromkeys(types):
            cache[t] = make(t, cfg)
        layers = [cache[t] for t in types]
    if "dummy" in types:
        notes.append(f"{types.count('dummy')} layers hold no cache of their own (KV sharing, or MLP/MoE-only "
                     "layers): 0 bytes each")
    return layers
