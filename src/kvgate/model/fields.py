"""Reading fields of a config.json dict: typed getters, head_dim, KV heads, the
multimodal unwrap, and the per-sequence state of recurrent (linear) layers.

Every getter raises :class:`ConfigError` naming the field it could not use.
"""

from __future__ import annotations

from typing import Any

from kvgate.model.spec import ConfigError, LayerSpec


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
    vd = _optional_dim(cfg, "v_head_dim", hd)
    return hd, vd


def _optional_dim(cfg: dict[str, Any], key: str, default: int) -> int:
    """``cfg[key]`` when set (a positive integer), else ``default``. A 0 is refused, never
    read as "same as head_dim": no engine makes a V row of 0 values the K width."""
    if cfg.get(key) is None:
        return default
    return _positive_int(cfg, key)


def num_kv_heads(cfg: dict[str, Any]) -> int:
    """``num_key_value_heads``; when absent, ``num_attention_heads`` (MHA), as transformers does.

    Grouped-query attention shares each KV head among ``num_attention_heads /
    num_key_value_heads`` query heads, so the KV heads must divide the attention heads
    (transformers ``repeat_kv`` uses ``num_attention_heads // num_key_value_heads``; vLLM's
    ``Attention`` asserts ``num_heads % num_kv_heads == 0``).

    Raises:
        ConfigError: a head count that is not a positive integer, or KV heads that exceed
            or do not divide the attention heads (the message names both fields).
    """
    heads = _positive_int(cfg, "num_attention_heads") if cfg.get("num_attention_heads") is not None else None
    if cfg.get("num_key_value_heads") is None:
        return _positive_int(cfg, "num_attention_heads")
    kv = _positive_int(cfg, "num_key_value_heads")
    if heads is not None and (kv > heads or heads % kv):
        raise ConfigError(f"model config field 'num_key_value_heads' ({kv}) must divide 'num_attention_heads' "
                          f"({heads}): each KV head serves a whole group of query heads",
                          hint="grouped-query attention needs num_attention_heads % num_key_value_heads == 0 "
                               "(transformers repeat_kv, vLLM Attention)")
    return kv


def _attention(cfg: dict[str, Any], kind: str, window: int | None = None) -> LayerSpec:
    """One attention layer. Global (``full``) layers take ``global_head_dim`` /
    ``num_global_key_value_heads`` when the config sets them (Gemma-4 gives its global
    layers other K/V shapes than its sliding ones); sliding layers take
    ``swa_num_key_value_heads`` / ``swa_head_dim`` / ``swa_v_head_dim`` when set
    (MiMo-V2-Flash: 8 KV heads on sliding layers, 4 on full ones; transformers'
    ``MiMoV2FlashAttention`` doubles the KV heads of sliding layers, the same here)."""
    hd, vd = head_dims(cfg)
    kv = num_kv_heads(cfg)
    if kind == "sliding":
        if cfg.get("swa_num_key_value_heads") is not None:
            kv = _positive_int(cfg, "swa_num_key_value_heads")
        if cfg.get("swa_head_dim") is not None:
            hd = _positive_int(cfg, "swa_head_dim")
            vd = _optional_dim(cfg, "swa_v_head_dim", hd)
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

def recurrent_layer(mixer: str, conv_dim: int, conv_kernel: int, ssm_values: int, heads: int) -> LayerSpec:
    """A ``linear`` layer record: ``state_values = conv_dim·(conv_kernel − 1) + ssm_values``
    (the table above), split over ``heads`` under tensor parallelism."""
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
    return recurrent_layer("gated_delta_net", 2 * nk * dk + nv * dv, k, nv * dk * dv, nv)


def _mamba1_state(cfg: dict[str, Any]) -> LayerSpec:
    """Mamba-1 (Jamba's ``mamba_*``; Mamba / Falcon-Mamba's ``state_size`` etc.)."""
    d_state = _int_field(cfg, "mamba_d_state", "state_size")
    k = _int_field(cfg, "mamba_d_conv", "conv_kernel")
    if cfg.get("mamba_expand") is not None or cfg.get("intermediate_size") is None:
        d_inner = _int_field(cfg, "mamba_expand", "expand") * _positive_int(cfg, "hidden_size")
    else:
        d_inner = _positive_int(cfg, "intermediate_size")
    return recurrent_layer("mamba", d_inner, k, d_inner * d_state, d_inner)


def _mamba2_state(cfg: dict[str, Any]) -> LayerSpec:
    """Mamba-2 (``mamba2``; Bamba / Granite-4 ``mamba_n_heads``; Nemotron-H ``mamba_num_heads``)."""
    heads = _int_field(cfg, "mamba_n_heads", "mamba_num_heads", "num_heads")
    head_dim = _int_field(cfg, "mamba_d_head", "mamba_head_dim", "head_dim")
    d_state = _int_field(cfg, "mamba_d_state", "ssm_state_size", "state_size")
    groups = _int_field(cfg, "mamba_n_groups", "n_groups", default=1)
    k = _int_field(cfg, "mamba_d_conv", "conv_kernel")
    d_inner = heads * head_dim
    return recurrent_layer("mamba2", d_inner + 2 * groups * d_state, k, heads * head_dim * d_state, heads)


def _kda_state(cfg: dict[str, Any]) -> LayerSpec:
    """Kimi-Linear delta attention (transformers ``KimiDeltaAttention``): one conv over
    q, k and v, ``conv_dim = 3 · linear_num_heads · linear_head_dim``, kernel
    ``linear_conv_kernel_dim``; recurrent state ``[heads, head_dim, head_dim]`` (fp32)."""
    heads = _int_field(cfg, "linear_num_heads")
    hd = _int_field(cfg, "linear_head_dim")
    k = _int_field(cfg, "linear_conv_kernel_dim")
    return recurrent_layer("kda", 3 * heads * hd, k, heads * hd * hd, heads)


def linear_state(cfg: dict[str, Any]) -> LayerSpec:
    """The linear-layer :class:`LayerSpec` for a hybrid / SSM config, by which fields it has.

    Raises:
        ConfigError: no known recurrent-state field set; the message lists what was found.
    """
    if cfg.get("linear_num_value_heads") is not None:
        return _gated_delta_net_state(cfg)
    if cfg.get("linear_num_heads") is not None and cfg.get("linear_head_dim") is not None:
        return _kda_state(cfg)
    if any(cfg.get(k) is not None for k in ("mamba_n_heads", "mamba_num_heads")) or (
        cfg.get("model_type") == "mamba2"
    ):
        return _mamba2_state(cfg)
    if cfg.get("mamba_d_state") is not None or cfg.get("model_type") in ("mamba", "falcon_mamba"):
        return _mamba1_state(cfg)
    raise _pattern_error(cfg, "linear / recurrent layers without a known state-size field set")


