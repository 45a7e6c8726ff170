"""Bookkeeping for the reference workload's KV cache: no torch, tested in CI.

Everything here is plain Python over ints (bytes, positions, slot and block ids). The
torch modules (:mod:`kvgate.workload.mirror`, :mod:`kvgate.workload.paged`) ask these
classes *where* to put a position and only then touch tensors, the way nano-vllm's
``block_manager.py`` never imports torch.

Terms (DESIGN.md §2):

- **position bytes** of one layer, format ``int8-f32scale``: int8 K and int8 V rows
  (``kv_heads·head_dim`` bytes each) plus one f32 scale per KV head for K and one for V:
  ``2·kv_heads·head_dim + 8·kv_heads`` (the source: 2·512 + 8·4 = 1056 B).
- **slot bytes** S(L) = layers × L × position bytes (the source: 48 × 8192 × 1056 =
  415,236,096 B = 396 MiB). A contiguous slot reserves all L positions when the sequence
  first appends.
- **block bytes** = layers × B × position bytes: one block of B positions in every layer.
  A paged sequence holding ``t`` positions holds ``ceil(t / B)`` blocks.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Any

from kvgate.errors import KvgateError
from kvgate.model.fields import head_dims, num_kv_heads, text_config
from kvgate.model.spec import LayerSpec, ModelSpec
from kvgate.options import DEFAULT_PAGE_SIZE as DEFAULT_BLOCK_SIZE  # vLLM's default --block-size

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.geometry import KVGeometry

DEFAULT_SLOT_CAP = 8  # the source engine's VC_KV_SLOTS
MIRROR_FORMAT = "int8-f32scale"  # the mirror's KV format (kvgate.geometry.formats)


def _pos_int(value: Any, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KvgateError(f"{what} must be a positive integer, got {value!r}")
    return value


@dataclass(frozen=True)
class MirrorGeometry:
    """Shape of the int8 + f32-scale mirror for one model at one ``max_seq``.

    Attributes:
        n_layers: decoder layers holding KV (all of them: full attention only).
        kv_heads: KV heads per layer (``num_key_value_heads``).
        head_dim: per-head dimension, from the config's ``head_dim`` when present.
        max_seq: positions a contiguous slot reserves (L).
    """

    n_layers: int
    kv_heads: int
    head_dim: int
    max_seq: int

    def __post_init__(self) -> None:
        for name in ("n_layers", "kv_heads", "head_dim", "max_seq"):
            _pos_int(getattr(self, name), name)

    @classmethod
    def from_config(cls, cfg: dict[str, Any], max_seq: int) -> MirrorGeometry:
        """Geometry from an HF config dict (``text_config`` unwrapped).

        ``head_dim`` is taken from the config when present, never re-derived: on Qwen3
        ``hidden_size / num_attention_heads`` is wrong (2048 / 32 = 64, not 128). Only
        when it is absent (Llama-2) is it ``hidden_size // num_attention_heads``
        (:func:`kvgate.model.fields.head_dims`).

        Raises:
            KvgateError: a needed field is missing (named).
        """
        cfg = text_config(cfg)
        if "num_hidden_layers" not in cfg:
            raise KvgateError("model config lacks 'num_hidden_layers'")
        return cls(n_layers=cfg["num_hidden_layers"], kv_heads=num_kv_heads(cfg), head_dim=head_dims(cfg)[0],
                   max_seq=max_seq)

    @cached_property
    def geometry(self) -> KVGeometry:
        """The mirror as a :class:`KVGeometry`: ``n_layers`` full-attention layers in
        ``int8-f32scale``, contiguous."""
        layer = LayerSpec(kind="full", num_kv_heads=self.kv_heads, head_dim=self.head_dim, v_head_dim=self.head_dim)
        from kvgate.geometry import KVGeometry  # noqa: PLC0415 - geometry loads the KV formats (gguf)

        return KVGeometry(ModelSpec(name="mirror", source="workload", layers=[layer] * self.n_layers), MIRROR_FORMAT)

    @property
    def position_bytes(self) -> int:
        """Bytes per position per layer: ``2·kv_dim + 8·kv_heads``."""
        return self.geometry.position_bytes(0)

    @property
    def slot_bytes(self) -> int:
        """S(L) = n_layers × max_seq × position_bytes: one contiguous slot, bytes."""
        return self.geometry.slot_bytes(self.max_seq)

    def block_bytes(self, block_size: int) -> int:
        """Bytes of one block of ``block_size`` positions across all layers."""
        return self.geometry.block_bytes(_pos_int(block_size, "block size"))

    def mirror_bytes(self, slots: int) -> int:
        """``slots × S(L)``: what a contiguous mirror with ``slots`` allocated slots holds."""
        return slots * self.slot_bytes

    def pool_bytes(self, num_blocks: int, block_size: int) -> int:
        """Bytes of a paged pool of ``num_blocks`` blocks."""
        return num_blocks * self.block_bytes(block_size)


def blocks_for(positions: int, block_size: int) -> int:
    """``ceil(positions / block_size)``: blocks that hold ``positions`` positions."""
    return -(-positions // _pos_int(block_size, "block size"))


class SlotAllocator:
    """Lazy slot allocation with a cap, as the source engine's mirror does.

    A sequence gets a slot on its first append (:meth:`acquire`) and gives it back when
    it ends (:meth:`release`). The lowest free slot index is reused first.

    Raises (from :meth:`acquire`):
        KvgateError: all ``cap`` slots are in use (message gives the numbers).
    """

    def __init__(self, cap: int = DEFAULT_SLOT_CAP) -> None:
        self.cap = _pos_int(cap, "slot cap")
        self._slot_of: dict[Hashable, int] = {}
        self._free = list(range(self.cap))

    def slot_of(self, seq: Hashable) -> int | None:
        """The slot ``seq`` holds, or ``None`` (it has not appended yet)."""
        return self._slot_of.get(seq)

    def acquire(self, seq: Hashable) -> tuple[int, bool]:
        """``(slot, new)``: the slot of ``seq``, allocating one if it has none."""
        if seq in self._slot_of:
            return self._slot_of[seq], False
        if not self._free:
            raise KvgateError(
                f"slot cap reached: {self.cap} of {self.cap} slots in use, sequence {seq!r} needs slot {self.cap + 1}",
                hint="raise --slot-cap or run fewer concurrent streams",
            )
        self._free.sort()
        slot = self._free.pop(0)
        self._slot_of[seq] = slot
        return slot, True

    def release(self, seq: Hashable) -> int | None:
        """Free the slot of ``seq``; returns it, or ``None`` if ``seq`` held none."""
        slot = self._slot_of.pop(seq, None)
        if slot is not None:
            self._free.append(slot)
        return slot

    @property
    def in_use(self) -> int:
        """Slots currently held."""
        return len(self._slot_of)

    def active(self) -> dict[Hashable, int]:
        """``{sequence: slot}`` for the sequences holding a slot."""
        return dict(self._slot_of)


class BlockAllocator:
    """A free list over ``num_blocks`` block ids ``0 .. num_blocks-1``.

    Raises (from :meth:`allocate`):
        KvgateError: no free block (message gives the numbers).
    """

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = _pos_int(num_blocks, "number of blocks")
        self._free = list(range(num_blocks - 1, -1, -1))  # pop() hands out 0, 1, 2, ...
        self._used: set[int] = set()

    def allocate(self) -> int:
        if not self._free:
            raise KvgateError(
                f"block pool exhausted: all {self.num_blocks} blocks in use",
                hint="raise --pool-blocks or run fewer / shorter streams",
            )
        b = self._free.pop()
        self._used.add(b)
        return b

    def free(self, block: int) -> None:
        """Return ``block`` to the pool.

        Raises:
            KvgateError: ``block`` is not allocated (a double free).
        """
        if block not in self._used:
            raise KvgateError(f"block {block} is not allocated")
        self._used.remove(block)
        self._free.append(block)

    @property
    def free_count(self) -> int:
        return len(self._free)

    @property
    def used_count(self) -> int:
        return len(self._used)


class BlockTables:
    """Per-sequence block tables over one :class:`BlockAllocator`.

    Position ``p`` of a sequence lives in block ``table[p // B]`` at offset ``p % B``.
    Blocks are allocated as positions are written (:meth:`ensure`) and all freed when the
    sequence ends (:meth:`release`).
    """

    def __init__(self, allocator: BlockAllocator, block_size: int = DEFAULT_BLOCK_SIZE) -> None:
        self.allocator = allocator
        self.block_size = _pos_int(block_size, "block size")
        self._tables: dict[Hashable, list[int]] = {}

    def table(self, seq: Hashable) -> list[int]:
        """The block ids of ``seq`` in position order (empty if it holds none)."""
        return list(self._tables.get(seq, ()))

    def ensure(self, seq: Hashable, positions: int) -> list[int]:
        """Make ``seq`` hold blocks for positions ``0 .. positions-1``; returns new block ids.

        Raises:
            KvgateError: the pool ran out (blocks allocated by this call are given back).
        """
        table = self._tables.setdefault(seq, [])
        new: list[int] = []
        try:
            while len(table) < blocks_for(positions, self.block_size):
                b = self.allocator.allocate()
                table.append(b)
                new.append(b)
        except KvgateError:
            for b in new:
                table.remove(b)
                self.allocator.free(b)
            if not table:
                self._tables.pop(seq, None)
            raise
        return new

    def locate(self, seq: Hashable, position: int) -> tuple[int, int]:
        """``(block, offset)`` of ``position`` in ``seq``.

        Raises:
            KvgateError: the position has no block yet.
        """
        table = self._tables.get(seq, [])
        i = position // self.block_size
        if position < 0 or i >= len(table):
            raise KvgateError(f"sequence {seq!r} has no block for position {position}")
        return table[i], position % self.block_size

    def release(self, seq: Hashable) -> int:
        """Free every block of ``seq``; returns how many."""
        table = self._tables.pop(seq, [])
        for b in table:
            self.allocator.free(b)
        return len(table)

    def sequences(self) -> list[Hashable]:
        return list(self._tables)


@dataclass(frozen=True)
class Admission:
    """What a stream run will hold, computed before anything is allocated.

    Attributes:
        streams: concurrent sequences.
        positions: positions each sequence writes (prompt + generated tokens).
        slots: contiguous slots the run allocates (= streams).
        blocks_per_seq: ``ceil(positions / block_size)``.
        pool_blocks: blocks in the paged pool.
        mirror_bytes: bytes the chosen layout allocates for KV (contiguous:
            streams × S(L); paged: pool_blocks × block bytes).
    """

    layout: str
    streams: int
    positions: int
    slots: int
    blocks_per_seq: int
    pool_blocks: int
    mirror_bytes: int
    contiguous_bytes: int
    written_bytes: int

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)


def admit(
    geom: MirrorGeometry,
    *,
    layout: str,
    streams: int,
    prompt: int,
    tokens: int,
    slot_cap: int = DEFAULT_SLOT_CAP,
    block_size: int = DEFAULT_BLOCK_SIZE,
    pool_blocks: int | None = None,
) -> Admission:
    """Check that ``streams`` sequences of ``prompt + tokens`` positions fit the mirror.

    Contiguous: each stream takes one slot of ``max_seq`` positions; at most ``slot_cap``.
    Paged: the same cap on concurrent sequences, and the pool (default: exactly the
    blocks the run writes, ``streams × ceil((prompt + tokens) / B)``) must hold them.
    ``written_bytes`` is the part of the mirror the run writes:
    ``streams × n_layers × positions × position_bytes``.

    Raises:
        KvgateError: bad numbers, a sequence longer than ``max_seq``, more streams than
            the slot cap, or a pool too small; each message gives the numbers.
    """
    if layout not in ("contiguous", "paged"):
        raise KvgateError(f"unknown layout {layout!r}", hint="use contiguous or paged")
    _pos_int(streams, "streams")
    _pos_int(prompt, "prompt length")
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0:
        raise KvgateError(f"tokens must be a non-negative integer, got {tokens!r}")
    _pos_int(slot_cap, "slot cap")
    _pos_int(block_size, "block size")
    positions = prompt + tokens
    if positions > geom.max_seq:
        raise KvgateError(
            f"prompt {prompt} + tokens {tokens} = {positions} positions exceed max_seq {geom.max_seq}",
            hint="raise --max-seq or shorten --prompt / --tokens",
        )
    if streams > slot_cap:
        raise KvgateError(
            f"{streams} streams need {streams} slots but the slot cap is {slot_cap} "
            f"({slot_cap} × {geom.slot_bytes:,} B = {slot_cap * geom.slot_bytes:,} B)",
            hint=f"pass --slot-cap {streams} or run at most {slot_cap} streams",
        )
    per_seq = blocks_for(positions, block_size)
    need_blocks = streams * per_seq
    if pool_blocks is None:
        pool_blocks = need_blocks
    _pos_int(pool_blocks, "pool blocks")
    if layout == "paged" and pool_blocks < need_blocks:
        raise KvgateError(
            f"{streams} streams × {per_seq} blocks of {block_size} positions = {need_blocks} blocks, "
            f"but the pool holds {pool_blocks}",
            hint=f"pass --pool-blocks {need_blocks} or more",
        )
    contiguous = geom.mirror_bytes(streams)
    mirror = contiguous if layout == "contiguous" else geom.pool_bytes(pool_blocks, block_size)
    return Admission(
        layout=layout,
        streams=streams,
        positions=positions,
        slots=streams,
        blocks_per_seq=per_seq,
        pool_blocks=pool_blocks,
        mirror_bytes=mirror,
        contiguous_bytes=contiguous,
        written_bytes=streams * geom.n_layers * positions * geom.position_bytes,
    )
