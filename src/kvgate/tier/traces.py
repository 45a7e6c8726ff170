"""Hashed request traces: one list of prompt-block hash ids per request.

A hashed trace says which prompt blocks two requests share without giving the text:
request ``i`` has ``input_length[i]`` prompt tokens cut into blocks of ``block_tokens``
tokens, and ``hash_ids`` names block ``j`` of that prompt. Equal ids mean equal blocks
*and* (in both published traces) equal prefixes up to that block, so the trace can be
replayed through any prefix cache. The formats, read from each data set's own pages:

=================  ===============================================  =======  ========
format             columns                                          block    time
=================  ===============================================  =======  ========
``mooncake``       ``timestamp, input_length, output_length,        512      ms
                   hash_ids`` (kvcache-ai/Mooncake
                   ``FAST25-release/traces/*.jsonl``)
``qwen-bailian``   ``chat_id, parent_chat_id, timestamp,             16       s
                   input_length, output_length, type, turn,
                   hash_ids`` (alibaba-edu/qwen-bailian-usagetraces-anon,
                   ``*_blksz_16.jsonl``)
``offline``        ``input_length`` and ``hash_ids``, no time       given or none
                   column (an offline trace: requests in file       from the
                   order; ServeGen publishes per-client             data
                   distributions, not hashed requests, so a
                   hashed offline trace built from it reads here)
=================  ===============================================  =======  ========

The formats are recognized by :func:`kvgate.replay.readers.formats.detect_format` (the
same columns, the same rule) and the time unit is the format's, or the column name's
suffix, or detected from the data by :func:`kvgate.replay.timeunits.detect_time_unit`;
the arrival times only order nothing here (requests are taken in file order, as every
published replay does) but are kept for a caller who wants them.

**The hash block is the trace's, not the engine's.** Mooncake hashed 512-token blocks;
vLLM caches 16-token blocks, SGLang single tokens, llama.cpp single tokens. A trace
block of B tokens is B / b engine blocks of b tokens when b divides B, and an engine
hit is always a whole number of engine blocks; what a trace cannot say is whether two
prompts that differ inside a trace block share a shorter run of engine blocks. So every
count kvgate gives from a trace is in whole trace blocks (a *lower* bound on the
engine's own hit by at most one trace block per request), and an engine block that does
not divide the trace block is refused by :func:`engine_blocks_per_trace_block`.

**Block size.** Taken from, in order: the caller (``block_tokens``, the CLI's
``--trace-block-tokens``); the format (Mooncake 512, Qwen-Bailian 16); the data: the
sizes B in 16, 32, ..., 4096 for which every request has ``ceil(input_length / B)``
ids. Exactly one such B is taken; none or several is refused with the hint.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from kvgate.replay.readers.base import TraceError
from kvgate.replay.readers.formats import (
    MOONCAKE,
    QWEN_BAILIAN,
)

FORMAT_BLOCK_TOKENS: dict[str, int] = {MOONCAKE.name: 512, QWEN_BAILIAN.name: 16}
"""Hash block of each published format, in tokens (Mooncake README: "block size 512";
Qwen-Bailian file names ``*_blksz_16``)."""  # fmt: skip
CANDIDATE_BLOCKS = tuple(2**k for k in range(4, 13))  # 16 .. 4096
HASH_COLUMNS = ("hashids", "blockhashes", "hashes")


@dataclass
class HashedTrace:
    """Requests in file order with their prompt-block hash ids.

    Attributes:
        input_length: int64 ``[n]`` prompt tokens per request.
        offsets: int64 ``[n + 1]``; request ``i``'s ids are ``ids[offsets[i]:offsets[i+1]]``.
        ids: int64 ``[offsets[-1]]`` block hash ids, request by request, block by block.
        block_tokens: tokens per hash block (the trace's, see the module docstring).
        block_reason: how ``block_tokens`` was decided.
        arrival_s: float64 ``[n]`` seconds after the first request in file order, or
            ``None`` (no time column).
        source, format, attribution: where it came from, the recognized format name
            (``"mooncake"``, ``"qwen-bailian"``, ``"offline"``, ``"hashed"``, ``"synthetic"``)
            and the data set's citation (or ``None``).
        warnings: what a command must print.
        ids_kept: ``False`` when the reader handed the ids to a curve builder as it read
            and kept none (:meth:`kvgate.tier.stream.TraceStream.read`): ``ids`` is then
            empty, and so are the per-request arrays when ``counted`` is given.
        counted: ``(requests, prompt tokens)`` of a trace read without its per-request
            arrays (only what :attr:`n_requests` and :attr:`prompt_tokens` say is kept).
    """

    input_length: np.ndarray
    offsets: np.ndarray
    ids: np.ndarray
    block_tokens: int
    block_reason: str = "given"
    arrival_s: np.ndarray | None = None
    source: str = "in memory"
    format: str = "hashed"
    attribution: str | None = None
    warnings: list[str] = field(default_factory=list)
    ids_kept: bool = True
    counted: tuple[int, int] | None = None

    @property
    def n_requests(self) -> int:
        """Number of requests."""
        return len(self.input_length) if self.counted is None else self.counted[0]

    @property
    def prompt_tokens(self) -> int:
        """Σ input_length: every prompt token of the trace (the hit share's whole)."""
        return int(self.input_length.sum()) if self.counted is None else self.counted[1]

    def request_ids(self, i: int) -> np.ndarray:
        """The hash ids of request ``i`` (a view)."""
        return self.ids[self.offsets[i] : self.offsets[i + 1]]

    @classmethod
    def from_lists(cls, requests: list[tuple[int, list[int]]], block_tokens: int, **kw: object) -> HashedTrace:
        """A trace from ``[(input_length, [hash ids...]), ...]`` (tests, benchmarks).

        Raises:
            TraceError: as :func:`check`.
        """
        lengths = np.array([r[0] for r in requests], dtype=np.int64)
        counts = np.array([len(r[1]) for r in requests], dtype=np.int64)
        offsets = np.zeros(len(requests) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.array([h for r in requests for h in r[1]], dtype=np.int64)
        t = cls(lengths, offsets, ids, block_tokens, **kw)  # type: ignore[arg-type]
        check(t)
        return t


def check(t: HashedTrace) -> None:
    """Refuse a trace kvgate cannot replay.

    Raises:
        TraceError: a block size < 1, a negative input length or hash id, mismatched
            arrays.
    """
    if t.block_tokens < 1:
        raise TraceError(f"trace block size must be at least 1 token, got {t.block_tokens}")
    if len(t.offsets) != len(t.input_length) + 1 or (t.ids_kept and int(t.offsets[-1]) != len(t.ids)):
        raise TraceError("hashed trace: offsets do not match the requests and ids")
    if len(t.input_length) and int(t.input_length.min()) < 0:
        raise TraceError(f"trace {t.source}: a negative input_length ({int(t.input_length.min())})")
    if len(t.ids) and int(t.ids.min()) < 0:
        raise TraceError(f"trace {t.source}: a negative hash id ({int(t.ids.min())})")


def engine_blocks_per_trace_block(trace_block_tokens: int, engine_block_tokens: int) -> int:
    """How many engine blocks one trace block is (module docstring).

    Raises:
        TraceError: the engine block does not divide the trace block (e.g. vLLM
            ``--block-size 48`` on Mooncake's 512): hits cannot be told in engine blocks.
    """
    if engine_block_tokens < 1 or trace_block_tokens % engine_block_tokens:
        raise TraceError(
            f"the engine block ({engine_block_tokens} tokens) does not divide the trace's hash block "
            f"({trace_block_tokens} tokens)",
            hint="a hashed trace can be replayed through engine blocks that divide its own block "
                 "(vLLM 16 on Mooncake's 512: 32 engine blocks per trace block)",
        )  # fmt: skip
    return trace_block_tokens // engine_block_tokens


#: the most prompt tokens one request may carry (10^9: far above any context; keeps int64 sums exact)
MAX_INPUT_TOKENS = 10**9


def infer_block_tokens(input_length: np.ndarray, counts: np.ndarray) -> list[int]:
    """The sizes of :data:`CANDIDATE_BLOCKS` for which every request has
    ``ceil(input_length / B)`` hash ids (``counts``)."""
    return [b for b in CANDIDATE_BLOCKS if np.array_equal((input_length + b - 1) // b, counts)]


def synthetic_hashed(
    n_requests: int,
    *,
    block_tokens: int = 512,
    mean_blocks: float = 8.0,
    share: float = 0.5,
    prefixes: int = 1000,
    seed: int = 0,
) -> HashedTrace:
    """A seeded synthetic hashed trace for benchmarks: each request has
    1 + Poisson(mean_blocks − 1) blocks; with probability ``share`` it continues one of
    ``prefixes`` earlier conversations (reusing a Zipf-chosen earlier request's ids as its
    prefix), else all its blocks are new. Ids are dense (0, 1, 2, ...).

    Returns:
        a :class:`HashedTrace` with ``input_length = blocks × block_tokens`` and format
        ``"synthetic"``.
    """
    rng = np.random.default_rng(seed)
    nb = 1 + rng.poisson(max(mean_blocks - 1.0, 0.0), n_requests).astype(np.int64)
    reuse = rng.random(n_requests) < share
    # parent: a recent request (geometric look-back over `prefixes` conversations)
    back = np.minimum(rng.zipf(1.3, n_requests), prefixes)
    parent = np.arange(n_requests) - back
    offsets = np.zeros(n_requests + 1, dtype=np.int64)
    np.cumsum(nb, out=offsets[1:])
    ids = np.arange(int(offsets[-1]), dtype=np.int64)
    # a reusing request copies the parent's first min(parent blocks, own blocks - 1) ids
    for i in np.flatnonzero(reuse & (parent >= 0)):
        p = parent[i]
        k = int(min(nb[p], nb[i] - 1))
        if k > 0:
            ids[offsets[i] : offsets[i] + k] = ids[offsets[p] : offsets[p] + k]
    return HashedTrace(nb * block_tokens, offsets, ids, block_tokens, "synthetic", None,
                       f"synthetic hashed (n={n_requests}, seed={seed})", "synthetic")  # fmt: skip

