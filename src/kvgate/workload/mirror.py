"""The source engine's KV mirror in torch: int8 K/V + one f32 scale per (position, KV head).

Format (``int8-f32scale``, DESIGN.md §2), per layer and per position:

- K row: ``kv_heads × head_dim`` int8 + ``kv_heads`` f32 scales; V row the same;
- so ``2·kv_dim + 8·kv_heads`` bytes per position per layer (the source: 1056 B).

Quantization is symmetric absmax per (position, head): ``scale = max|x| / 127``,
``q = round(x / scale)`` clamped to ±127 (a zero row keeps scale 0 and dequantizes to 0).
Dequantization is ``q · scale`` in f32, then cast to the compute dtype.

Layout, per layer: K and V ``[slots, max_seq, kv_heads, head_dim]`` int8, scales
``[slots, max_seq, kv_heads]`` f32. Slots are allocated **lazily**: a slot's rows are one
allocation per layer and tensor, made on the sequence's first append and dropped when the
sequence ends, so allocated bytes are ``slots in use × S(L)``, as with the source's lazily allocated
slots. Slot storage is zero-filled so that unwritten positions dequantize to
finite zeros (they are masked out of attention, but NaN·0 is still NaN).

Both caches here and in :mod:`kvgate.workload.paged` offer the same four calls to the
decode loop: ``begin(seqs, starts, n_new)`` before a forward pass, ``write(layer, k, v)``
and ``read(layer)`` per layer, and ``release(seq)`` when a sequence ends.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from kvgate.errors import KvgateError
from kvgate.workload.allocator import DEFAULT_SLOT_CAP, MirrorGeometry, SlotAllocator

QMAX = 127


def quantize(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric absmax int8 quantization over the last dimension.

    Args:
        x: ``[..., head_dim]`` float (bf16/fp16/fp32).

    Returns:
        ``(q, scale)``: ``q`` ``[..., head_dim]`` int8 in [-127, 127] and ``scale``
        ``[...]`` f32 with ``x ≈ q · scale[..., None]``.
    """
    xf = x.float()
    scale = xf.abs().amax(dim=-1) / QMAX  # [...] f32
    inv = torch.where(scale > 0, 1.0 / scale, torch.zeros_like(scale))
    q = torch.round(xf * inv.unsqueeze(-1)).clamp_(-QMAX, QMAX).to(torch.int8)
    return q, scale


def dequantize(q: torch.Tensor, scale: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """``q · scale`` in f32, cast to ``dtype``. q: ``[..., head_dim]`` int8, scale ``[...]`` f32."""
    return (q.float() * scale.unsqueeze(-1)).to(dtype)


class _Step:
    """What one forward pass writes: sequences, their start positions, new positions."""

    def __init__(self, seqs: Sequence[Hashable], starts: Sequence[int], n_new: int) -> None:
        self.seqs = list(seqs)
        self.starts = [int(s) for s in starts]
        self.n_new = int(n_new)
        self.length = max(self.starts) + self.n_new  # longest sequence after the write


class ContiguousMirror:
    """The contiguous int8 mirror with lazy slots and a slot cap.

    Args:
        geom: layers, KV heads, head dim and max_seq.
        slot_cap: most slots held at once (the source's ``VC_KV_SLOTS`` = 8).
        device: where the slots live.
        dtype: dtype :meth:`read` returns (the model's compute dtype).

    Raises:
        KvgateError: (from :meth:`begin`) the slot cap is exceeded or a write runs past
            ``max_seq``.
    """

    layout = "contiguous"

    def __init__(
        self,
        geom: MirrorGeometry,
        *,
        slot_cap: int = DEFAULT_SLOT_CAP,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        self.geom = geom
        self.slots = SlotAllocator(slot_cap)
        self.device = torch.device(device)
        self.dtype = dtype
        # Per layer l, per slot s (the per-layer mirror is [slots, max_seq, kv_heads, head_dim]):
        #   self.k[l][s], self.v[l][s]:   [max_seq, kv_heads, head_dim] int8
        #   self.ks[l][s], self.vs[l][s]: [max_seq, kv_heads]           f32
        n = geom.n_layers
        self.k: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        self.v: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        self.ks: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        self.vs: list[dict[int, torch.Tensor]] = [{} for _ in range(n)]
        self._step: _Step | None = None
        self._slot_ids: list[int] = []

    # -- allocation
    def _allocate_slot(self, slot: int) -> None:
        g = self.geom
        for layer in range(g.n_layers):
            for rows in (self.k, self.v):
                rows[layer][slot] = torch.zeros(
                    (g.max_seq, g.kv_heads, g.head_dim), dtype=torch.int8, device=self.device
                )  # [max_seq, kv_heads, head_dim] int8
            for scales in (self.ks, self.vs):
                scales[layer][slot] = torch.zeros(
                    (g.max_seq, g.kv_heads), dtype=torch.float32, device=self.device
                )  # [max_seq, kv_heads] f32

    def release(self, seq: Hashable) -> None:
        """End ``seq``: its slot and the slot's storage are freed."""
        slot = self.slots.release(seq)
        if slot is None:
            return
        for store in (self.k, self.v, self.ks, self.vs):
            for layer in store:
                layer.pop(slot, None)

    def allocated_bytes(self) -> int:
        """Σ ``nbytes`` of every tensor the mirror holds now (int)."""
        return sum(t.nbytes for store in (self.k, self.v, self.ks, self.vs) for layer in store for t in layer.values())

    # -- one forward pass
    def begin(self, seqs: Sequence[Hashable], starts: Sequence[int], n_new: int) -> None:
        """Prepare a pass writing positions ``starts[i] .. starts[i]+n_new-1`` of ``seqs[i]``.

        A sequence without a slot gets one now (lazy allocation).

        Raises:
            KvgateError: a write past ``max_seq``; the slot cap is exceeded.
        """
        step = _Step(seqs, starts, n_new)
        if step.length > self.geom.max_seq:
            raise KvgateError(f"write up to position {step.length} exceeds max_seq {self.geom.max_seq}")
        ids = []
        for seq in step.seqs:
            slot, new = self.slots.acquire(seq)
            if new:
                self._allocate_slot(slot)
            ids.append(slot)
        self._step, self._slot_ids = step, ids

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantize and store this pass's K and V of ``layer``.

        k, v: ``[N, T, kv_heads, head_dim]`` (N sequences of :meth:`begin`, T = n_new).
        """
        step = self._step
        qk, sk = quantize(k)  # [N, T, kv_heads, head_dim] int8, [N, T, kv_heads] f32
        qv, sv = quantize(v)
        t = step.n_new
        for i, (slot, s0) in enumerate(zip(self._slot_ids, step.starts)):
            self.k[layer][slot][s0 : s0 + t] = qk[i]
            self.v[layer][slot][s0 : s0 + t] = qv[i]
            self.ks[layer][slot][s0 : s0 + t] = sk[i]
            self.vs[layer][slot][s0 : s0 + t] = sv[i]

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized K, V of ``layer`` for this pass's sequences.

        Returns:
            k, v: ``[N, L, kv_heads, head_dim]`` in ``dtype``, L = longest length after
            the write; positions past a sequence's length are zeros (mask them).
        """
        n = self._step.length
        ids = self._slot_ids
        qk = torch.stack([self.k[layer][s][:n] for s in ids])  # [N, L, kv_heads, head_dim] int8
        qv = torch.stack([self.v[layer][s][:n] for s in ids])
        sk = torch.stack([self.ks[layer][s][:n] for s in ids])  # [N, L, kv_heads] f32
        sv = torch.stack([self.vs[layer][s][:n] for s in ids])
        return dequantize(qk, sk, self.dtype), dequantize(qv, sv, self.dtype)

    @property
    def step(self) -> _Step:
        return self._step


class ReferenceCache(ContiguousMirror):
    """An unquantized contiguous cache in the compute dtype: the numerics reference.

    Per layer and slot: K, V ``[max_seq, kv_heads, head_dim]`` in ``dtype`` (bf16); no
    scales. Only for :func:`kvgate.workload.stream.numerics_check`; not a mirror.
    """

    layout = "reference"

    def _allocate_slot(self, slot: int) -> None:
        g = self.geom
        for layer in range(g.n_layers):
            for rows in (self.k, self.v):
                rows[layer][slot] = torch.zeros((g.max_seq, g.kv_heads, g.head_dim), dtype=self.dtype, device=self.device)

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        t = self._step.n_new
        for i, (slot, s0) in enumerate(zip(self._slot_ids, self._step.starts)):
            self.k[layer][slot][s0 : s0 + t] = k[i].to(self.dtype)
            self.v[layer][slot][s0 : s0 + t] = v[i].to(self.dtype)

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        n = self._step.length
        ids = self._slot_ids
        return (
            torch.stack([self.k[layer][s][:n] for s in ids]),
            torch.stack([self.v[layer][s][:n] for s in ids]),
        )
