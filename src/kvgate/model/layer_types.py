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
                                                      (``deepseek_v32``, ``glm_moe_dsa``) on layers
                                                      whose ``indexer_types`` entry is "full"; a
                                                      "shared" layer reuses another layer's
                                                      selection and allocates none
``minimax_m3_sparse``          ``full`` + index keys  K, V, plus ``idx_keys [B, 1, L,
                                                      index_head_dim]`` (MiniMax-M3)
``full_attention`` listed in   ``cross``              mllama: K, V of ``images × max_num_tiles ×
``cross_attention_layers``                            ((image_size // patch_size)² + 1)`` vision
                                                      positions; none without an image
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
Zamba2, Zaya: not checked against transformers yet), ``hybrid_sliding``, ``minimax_m3_sparse`` of model types other than MiniMax-M3's,
``reference_sliding_attention``, and any type kvgate does not know.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from kvgate.model.fields import _attention, _pattern_error, _positive_int, linear_state, recurrent_layer
from kvgate.model.spec import ConfigError, LayerSpec, ModelSpec

# Model types whose ``indexed_attention`` layers keep DeepSeek sparse-attention indexer
# keys ``[B, L, index_head_dim]`` (modeling_deepseek_v32.py / modeling_glm_moe_dsa.py,
# ``DeepseekV32Indexer``: ``cache.update_indexer(k)`` with k of ``index_head_dim``).
INDEXED_MODEL_TYPES = ("deepseek_v32", "glm_moe_dsa")

_REFUSED = {
    "compressed_sparse_attention": "DeepSeek-V4 compressed sparse attention (compressor state and compressed "
                                   "positions sized from compression ratios at run time)",
    "heavily_compressed_attention": "DeepSeek-V4 heavily compressed attention (compressor state sized at run time)",
    "hybrid_sliding": "a layer holding both sliding attention KV and a recurrent state (Zaya)",
    "reference_sliding_attention": "UnlimitedOCR reference sliding attention (prefill kept in full)",
}

KNOWN_TYPES = ("full_attention", "sliding_attention", "chunked_attention", "indexed_attention",
               "minimax_m3_sparse", "linear_attention", "conv", "hybrid", "dummy")

# Model types whose ``minimax_m3_sparse`` layers keep K, V and lightning-index keys
# ``idx_keys [B, 1, L, index_head_dim]`` (transformers 5.24 modeling_minimax_m3_vl.py,
# ``MiniMaxM3VLSparseStaticCacheLayer.update_index``; the indexer's ``k_proj`` is
# ``hidden_size → index_head_dim``, one head).
SPARSE_M3_MODEL_TYPES = ("minimax_m3_vl_text",)

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


def _indexer_types(cfg: dict[str, Any], n: int) -> list[str] | None:
    """``indexer_types`` (GLM-5.2, transformers ``GlmMoeDsaConfig``: "full" runs the layer's
    own indexer, "shared" reuses the previous full layer's top-k), or ``None``.

    Raises:
        ConfigError: not one "full" / "shared" entry per layer; a "shared" first layer.
    """
    it = cfg.get("indexer_types")
    if it is None:
        return None
    if not isinstance(it, (list, tuple)) or len(it) != n or any(t not in ("full", "shared") for t in it):
        raise ConfigError(f"model config field 'indexer_types' must list 'full' or 'shared' for each of the {n} "
                          f"layers, got {str(it)[:80]}")
    if it and it[0] == "shared":  # GlmMoeDsaAttention.forward: ValueError, no earlier top-k to reuse
        raise ConfigError("model config field 'indexer_types' starts with 'shared': the first layer has no earlier "
                          "'full' indexer layer to reuse (transformers' GlmMoeDsaAttention refuses it)")
    return list(it)


def _cross_layer(cfg: dict[str, Any], image_positions: int, images: int) -> LayerSpec:
    """mllama cross-attention (``MllamaTextCrossAttention``): ``num_key_value_heads`` heads of
    ``hidden_size // num_attention_heads``."""
    heads = _positive_int(cfg, "num_attention_heads")
    hidden = _positive_int(cfg, "hidden_size")
    hd = hidden // heads
    kv = _positive_int(cfg, "num_key_value_heads")
    return LayerSpec(kind="cross", num_kv_heads=kv, head_dim=hd, v_head_dim=hd, image_positions=image_positions,
                     images=images)


def with_images(model: ModelSpec, images: int) -> ModelSpec:
    """``model`` with every cross-attention layer holding ``images`` images per sequence
    (the reader's default is 0: text only).

    Raises:
        ConfigError: ``images`` not a non-negative integer; the model has no cross-attention
            layers; or their per-image positions are unknown (no vision config); more than
            2^50 image positions.
    """
    if not isinstance(images, int) or isinstance(images, bool) or images < 0:
        raise ConfigError(f"images must be a non-negative integer, got {images!r}")
    cross = [l for l in model.layers if l.kind == "cross" and l.encoder_positions is None]
    if not cross:
        raise ConfigError(f"{model.name} has no cross-attention layers: the number of images changes nothing")
    if images and any(l.image_positions == 0 for l in cross):
        raise ConfigError(f"{model.name}: the config has no vision_config (max_num_tiles, image_size, patch_size) "
                          "to size the image positions")
    per = max(l.image_positions or 0 for l in cross)
    if images * per > 2**50:  # the bound kvgate's length flags keep (fit/humanint.py)
        raise ConfigError(f"images {images:,}: {images * per:,} image positions per cross-attention layer is not "
                          "plausible (above 2^50)", hint="images per sequence, e.g. 1 or 2")
    notes = [n for n in model.notes if not n.startswith(_CROSS_NOTE)] + [_cross_note(len(cross), cross[0], images)]
    return replace(model, layers=[replace(l, images=images) if l in cross else l for l in model.layers],
                   notes=notes)


_CROSS_NOTE = "cross-attention layers"


def _cross_note(count: int, layer: LayerSpec, images: int) -> str:
    per = layer.image_positions or 0
    if images == 0:
        return (f"{_CROSS_NOTE} ({count}) hold image positions only: sized text only (0 images), 0 bytes each; "
                f"each image adds {per:,} positions to each (max_num_tiles × (patches + 1))")
    return f"{_CROSS_NOTE} ({count}) sized for {images} image(s): {images} × {per:,} = {images * per:,} positions each"


def layers_from_types(cfg: dict[str, Any], types: list[str], notes: list[str],
                      per_layer: list[dict[str, Any]] | None = None, *,
                      image_positions: int | None = None, images: int = 0) -> list[LayerSpec]:
    """One :class:`LayerSpec` per entry of transformers' cache type list (table above).

    Args:
        cfg: the resolved (text) config dict (class defaults and aliases filled).
        types: transformers' per-layer cache types (``kvgate.model.hf.layer_types_of``).
        notes: appended to when something is assumed.
        per_layer: each layer's own config dict for heterogeneous configs (Gemma-4's
            global layers: other head_dim and KV heads), else ``None``.
        image_positions: vision positions per image of the ``cross_attention_layers``
            (mllama; ``kvgate.model.hf.Resolved.image_positions``), else ``None``.
        images: images per sequence the cross-attention layers hold (0: text only).

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
        elif t == "minimax_m3_sparse":
            if cfg.get("model_type") not in SPARSE_M3_MODEL_TYPES:
                raise ConfigError(f"layer type 'minimax_m3_sparse' of {cfg.get('model_type')!r} is not sized by "
                                  f"kvgate (known: {', '.join(SPARSE_M3_MODEL_TYPES)})",
                                  hint="see docs/architectures.md (what kvgate refuses and why)")
            spec = replace(_attention(cfg, "full"), index_dim=_positive_int(cfg, "index_head_dim"))
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
    indexer = _indexer_types(cfg, len(types)) if "indexed_attention" in types else None
    if indexer is not None and "shared" in indexer:
        layers = [replace(l, index_dim=0) if t == "indexed_attention" and it == "shared" else l
                  for l, t, it in zip(layers, types, indexer)]
        notes.append(f"indexer_types: {indexer.count('shared')} layers reuse another layer's top-k ('shared') and "
                     f"hold no indexer keys; {indexer.count('full')} keep their own")
    cross = cfg.get("cross_attention_layers")
    if cross:
        if image_positions is None or not isinstance(cross, list) or \
                any(not isinstance(i, int) or isinstance(i, bool) or not 0 <= i < len(types) for i in cross):
            raise ConfigError(f"model config field 'cross_attention_layers' must list layer numbers in "
                              f"[0, {len(types)}) of an mllama config, got {str(cross)[:80]}")
        if images and not image_positions:
            raise ConfigError("the config has no vision_config (max_num_tiles, image_size, patch_size) to size "
                              "the image positions of its cross-attention layers")
        layer = _cross_layer(cfg, image_positions, images)
        layers = [layer if i in set(cross) else l for i, l in enumerate(layers)]
        notes.append(_cross_note(len(set(cross)), layer, images))
    if "dummy" in types:
        notes.append(f"{types.count('dummy')} layers hold no cache of their own (KV sharing, or MLP/MoE-only "
                     "layers): 0 bytes each")
    return layers
