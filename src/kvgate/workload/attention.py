"""Attention over the quantized cache: dequantize, then PyTorch SDPA.

The cache returns K and V dequantized to the compute dtype (``q · scale``, see
:func:`kvgate.workload.mirror.dequantize`), and attention is
``torch.nn.functional.scaled_dot_product_attention`` with an explicit boolean mask. A
fused int8 kernel would read 1 byte per element instead of 2 and skip the temporary, but
the point of this workload is *memory accounting* and numerics of the format, not speed:
the dequantized temporaries are per layer, ``2 × N × L × kv_heads × head_dim`` elements,
freed before the next layer, and they count in the measured peak like any activation.

GQA: K and V are expanded from ``kv_heads`` to the query heads (``heads // kv_heads``
copies each), which every SDPA backend accepts (``enable_gqa`` needs torch ≥ 2.5).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F


def causal_mask(starts: Sequence[int], n_new: int, length: int, device: torch.device | str) -> torch.Tensor:
    """Boolean mask ``[N, 1, T, L]``: query ``t`` of sequence ``i`` (at position
    ``starts[i] + t``) may attend key position ``j`` iff ``j <= starts[i] + t``.

    Keys past a sequence's own length are therefore always masked (``j`` would exceed
    every query position of that sequence).
    """
    s = torch.tensor(list(starts), dtype=torch.long, device=device)
    qpos = s[:, None] + torch.arange(n_new, device=device)[None, :]  # [N, T]
    kpos = torch.arange(length, device=device)  # [L]
    return (kpos[None, None, :] <= qpos[:, :, None]).unsqueeze(1)  # [N, 1, T, L]


def attend(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, mask: torch.Tensor, scale: float) -> torch.Tensor:
    """Masked attention with grouped KV heads.

    Args:
        q: ``[N, T, heads, head_dim]``.
        k, v: ``[N, L, kv_heads, head_dim]`` (same dtype as q).
        mask: ``[N, 1, T, L]`` bool, True = attend.
        scale: softmax scale (``head_dim ** -0.5`` for Qwen3 / Llama).

    Returns:
        ``[N, T, heads, head_dim]``.
    """
    n, t, heads, hd = q.shape
    kvh, length = k.shape[2], k.shape[1]
    rep = heads // kvh
    kt = k.transpose(1, 2)  # [N, kv_heads, L, head_dim]
    vt = v.transpose(1, 2)
    if rep > 1:
        kt = kt[:, :, None].expand(n, kvh, rep, length, hd).reshape(n, heads, length, hd)  # [N, heads, L, head_dim]
        vt = vt[:, :, None].expand(n, kvh, rep, length, hd).reshape(n, heads, length, hd)
    out = F.scaled_dot_product_attention(q.transpose(1, 2), kt, vt, attn_mask=mask, scale=scale)  # [N, heads, T, hd]
    return out.transpose(1, 2)
