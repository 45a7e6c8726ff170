"""The paged twin of the mirror: the same int8 + f32-scale format in blocks of B positions.

The write-up decided *not* to build paging; this twin exists so that kvgate's reclaim
bound (the unwritten part of the mirror) can be set against a *measured* reclaim.

- A **block pool** per layer: K and V ``[num_blocks, B, kv_heads, head_dim]`` int8 and
  scales ``[num_blocks, B, kv_heads]`` f32 (same bytes per position as the mirror).
- A **block table** per sequence (:class:`kvgate.workload.allocator.BlockTables`, plain
  Python): position ``p`` lives in block ``table[p // B]`` at offset ``p % B``. Blocks are
  taken from the pool as positions are written and returned when the sequence ends.
- **Attention reads through the block table**: a pass gathers ``pool[table]`` for its
  sequences (``[N, blocks, B, kv_heads, head_dim]``), flattens blocks to positions and
  dequantizes.

Pool sizing: like vLLM the pool is one allocation made up front (here lazily, on the first
append), but sized by admission to the blocks the run will write
(``streams × ceil((prompt + tokens) / B)`` unless ``--pool-blocks`` says otherwise), not
to a fraction of free memory. So the measured peak of a paged run is the peak a
block-table engine *needs* for the workload, which is what the reclaim bound describes.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

import torch

from kvgate.errors import KvgateError
from kvgate.workload.allocator import (
    DEFAULT_BLOCK_SIZE,
    DEFAULT_SLOT_CAP,
    BlockAllocator,
    BlockTables,
    MirrorGeometry,
    SlotAllocator,
    blocks_for,
)
from kvgate.workload.mirror import _Step, dequantize, quantize


class PagedMirror:
    """Block-table KV cache in the mirror's int8 + f32-scale format.

    Args:
        geom: layers, KV heads, head dim and max_seq (the longest sequence allowed).
        num_blocks: blocks in the pool.
        block_size: positions per block (B, default 16).
        slot_cap: most concurrent sequences (the same cap as the mirror).
        device, dtype: where the pool lives; dtype :meth:`read` returns.

    Raises:
        KvgateError: (from :meth:`begin`) the pool or the sequence cap runs out, or a
            write runs past ``max_seq``.
    """

    layout = "paged"

    def __init__(
        self,
        geom: MirrorGeometry,
        *,
        num_blocks: int,
        block_size: int = DEFAULT_BLOCK_SIZE,
        slot_cap: int = DEFAULT_SLOT_CAP,
        device: str | torch.device = "cpu",
        dtype: torch.dtype = torch.bfloat16,
    ) -> None:
        self.geom = geom
        self.block_size = block_size
        self.blocks = BlockAllocator(num_blocks)
        self.tables = BlockTables(self.blocks, block_size)
        self.seqs = SlotAllocator(slot_cap)
        self.device = torch.device(device)
        self.dtype = dtype
        # Per layer l (allocated on the first append):
        #   self.k[l], self.v[l]:   [num_blocks, B, kv_heads, head_dim] int8
        #   self.ks[l], self.vs[l]: [num_blocks, B, kv_heads]           f32
        self.k: list[torch.Tensor] = []
        self.v: list[torch.Tensor] = []
        self.ks: list[torch.Tensor] = []
        self.vs: list[torch.Tensor] = []
        self._step: _Step | None = None
        self._write_idx: torch.Tensor | None = None  # [N*T] long: block*B + offset
        self._table: torch.Tensor | None = None  # [N, blocks] long

    def _allocate_pool(self) -> None:
        g, nb, b = self.geom, self.blocks.num_blocks, self.block_size
        for _ in range(g.n_layers):
            self.k.append(torch.zeros((nb, b, g.kv_heads, g.head_dim), dtype=torch.int8, device=self.device))
            self.v.append(torch.zeros((nb, b, g.kv_heads, g.head_dim), dtype=torch.int8, device=self.device))
            self.ks.append(torch.zeros((nb, b, g.kv_heads), dtype=torch.float32, device=self.device))
            self.vs.append(torch.zeros((nb, b, g.kv_heads), dtype=torch.float32, device=self.device))

    def allocated_bytes(self) -> int:
        """Σ ``nbytes`` of the pool tensors (0 before the first append)."""
        return sum(t.nbytes for store in (self.k, self.v, self.ks, self.vs) for t in store)

    def release(self, seq: Hashable) -> None:
        """End ``seq``: its blocks go back to the pool."""
        self.tables.release(seq)
        self.seqs.release(seq)

    def begin(self, seqs: Sequence[Hashable], starts: Sequence[int], n_new: int) -> None:
        """Allocate blocks for positions ``starts[i] .. starts[i]+n_new-1`` and build the
        write indices and the block-table tensor for this pass.

        Raises:
            KvgateError: past ``max_seq``, too many sequences, or the pool is exhausted.
        """
        step = _Step(seqs, starts, n_new)
        if step.length > self.geom.max_seq:
            raise KvgateError(f"write up to position {step.length} exceeds max_seq {self.geom.max_seq}")
        if not self.k:
            self._allocate_pool()
        b = self.block_size
        idx: list[int] = []
        for seq, s0 in zip(step.seqs, step.starts):
            self.seqs.acquire(seq)
            self.tables.ensure(seq, s0 + step.n_new)
            table = self.tables.table(seq)
            idx.extend(table[p // b] * b + p % b for p in range(s0, s0 + step.n_new))
        nblocks = blocks_for(step.length, b)
        rows = []
        for seq in step.seqs:
            t = self.tables.table(seq)
            rows.append(t + [t[0]] * (nblocks - len(t)))  # pad with a real block; masked anyway
        self._write_idx = torch.tensor(idx, dtype=torch.long, device=self.device)
        self._table = torch.tensor(rows, dtype=torch.long, device=self.device)
        self._step = step

    def write(self, layer: int, k: torch.Tensor, v: torch.Tensor) -> None:
        """Quantize and scatter this pass's K, V (``[N, T, kv_heads, head_dim]``) into blocks."""
        g = self.geom
        qk, sk = quantize(k)  # [N, T, kv_heads, head_dim] int8, [N, T, kv_heads] f32
        qv, sv = quantize(v)
        idx = self._write_idx
        # Flat views over positions: [num_blocks*B, kv_heads, head_dim] and [num_blocks*B, kv_heads].
        self.k[layer].view(-1, g.kv_heads, g.head_dim).index_copy_(0, idx, qk.reshape(-1, g.kv_heads, g.head_dim))
        self.v[layer].view(-1, g.kv_heads, g.head_dim).index_copy_(0, idx, qv.reshape(-1, g.kv_heads, g.head_dim))
        self.ks[layer].view(-1, g.kv_heads).index_copy_(0, idx, sk.reshape(-1, g.kv_heads))
        self.vs[layer].view(-1, g.kv_heads).index_copy_(0, idx, sv.reshape(-1, g.kv_heads))

    def read(self, layer: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Dequantized K, V through the block tables: ``[N, L, kv_heads, head_dim]`` in ``dtype``."""
        g, n, table = self.geom, self._step.length, self._table
        nseq = table.shape[0]
        qk = self.k[layer][table].view(nseq, -1, g.kv_heads, g.head_dim)[:, :n]  # [N, L, kv_heads, head_dim] int8
        qv = self.v[layer][table].view(nseq, -1, g.kv_heads, g.head_dim)[:, :n]
        sk = self.ks[layer][table].view(nseq, -1, g.kv_heads)[:, :n]  # [N, L, kv_heads] f32
        sv = self.vs[layer][table].view(nseq, -1, g.kv_heads)[:, :n]
        return dequantize(qk, sk, self.dtype), dequantize(qv, sv, self.dtype)

    @property
    def step(self) -> _Step:
        return self._step
