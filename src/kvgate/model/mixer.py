"""Parameters of one recurrent mixer layer (Mamba, Mamba-2, gated DeltaNet) from a config:
one place for :mod:`kvgate.model.weights` (the estimate) and :mod:`kvgate.model.quant`
(each tensor priced as its loader stores it)."""

from __future__ import annotations

from typing import Any


def mixer_params(cfg: dict[str, Any], layer: Any, hidden: int) -> int:
    """Parameters of one recurrent mixer (projections, conv, per-head vectors, norm), as
    the transformers modules define them (``MambaMixer``, ``Mamba2Mixer``,
    ``Qwen3NextGatedDeltaNet``)."""
    conv = layer.conv_dim * layer.conv_kernel + layer.conv_dim  # depthwise conv + bias
    if layer.mixer == "mamba":
        d_inner = layer.state_heads
        d_state = layer.ssm_values // d_inner
        dt_rank = cfg.get("mamba_dt_rank") or cfg.get("time_step_rank") or -(-hidden // 16)
        return (hidden * 2 * d_inner + conv + d_inner * (dt_rank + 2 * d_state) + dt_rank * d_inner + d_inner
                + d_inner * d_state + d_inner + d_inner * hidden)
    if layer.mixer == "mamba2":
        heads = layer.state_heads
        d_inner = layer.ssm_values // max(1, _d_state(cfg))  # heads · head_dim
        return hidden * (d_inner + layer.conv_dim + heads) + conv + 3 * heads + d_inner + d_inner * hidden
    if layer.mixer == "gated_delta_net":
        nv = layer.state_heads
        dv = cfg.get("linear_value_head_dim") or 0
        return (hidden * (layer.conv_dim + nv * dv) + hidden * 2 * nv + layer.conv_dim * layer.conv_kernel
                + 2 * nv + dv + nv * dv * hidden)
    return 0


def _d_state(cfg: dict[str, Any]) -> int:
    for k in ("mamba_d_state", "ssm_state_size", "state_size"):
        if isinstance(cfg.get(k), int):
            return cfg[k]
    return 1
