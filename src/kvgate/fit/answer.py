"""The answer of ``kvgate fit``: terms, KV pool, the engine's own log lines, a verdict and
flip points, for any engine. Pure data; :mod:`kvgate.fit.render` prints it."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvgate.fit.gpus import Gpu
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release

FITS = ("yes", "no", "unknown")


@dataclass
class FitAnswer:
    """What ``kvgate fit`` answers.

    Attributes:
        engine: ``vllm``, ``sglang`` or ``llama.cpp``.
        release: the :class:`Release` modelled.
        gpu: the :class:`Gpu`.
        model: the model's name.
        settings: every engine flag with its value (defaults filled in) and ``defaults``
            saying which were not given.
        terms: the non-KV terms (:class:`Term`), per GPU.
        budget: the memory the engine gives itself (e.g. total × utilization).
        kv_pool: the KV cache pool in bytes per GPU (an :class:`Interval`).
        tokens: the KV cache pool's total token capacity, ``{low, high}``, for every engine
            (vLLM's "GPU KV cache size", SGLang's ``max_total_num_tokens``, llama.cpp's
            ``n_ctx``: the cells of all its sequences).
        max_concurrency: requests of the full length the pool holds at once, ``{low, high}``,
            exact (unrounded) for every engine.
        tokens_per_sequence: the longest a sequence may be, ``{low, high}`` (vLLM's
            ``--max-model-len``, SGLang's ``--context-length``, llama.cpp's ``n_ctx_seq``).
        max_concurrency_printed: ``max_concurrency`` as the engine prints it (vLLM
            ``"12.74x"``, llama.cpp ``"n_seq_max = 4"``; SGLang prints none: ``None``).
        request_bytes: KV bytes one full-length request needs.
        fits: ``yes`` / ``no`` / ``unknown``.
        reason: one sentence why.
        engine_error: the error the engine would stop with (``no``), else ``None``.
        log_lines: what the engine would print, at the pool's low and high end.
        flip_points: the engine flags' values where the answer changes.
        notes: assumptions said to the user.
        kv_stored: the bytes the KV pool stores, per GPU, where the engine stores more per
            token than it budgets (SGLang's DeepSeek sparse attention pool, the size of its
            ``KV size`` log line); ``None`` where they are the same.
        kv_stored_label: how ``kv_stored`` is counted, for the table.
        kv_heads: the model's KV heads copied over the tensor-parallel ranks
            (:class:`kvgate.fit.kv_heads.KvHeadSplit`), said under the KV per request;
            ``None`` where each rank keeps its even share.
    """

    engine: str
    release: Release
    gpu: Gpu
    model: str
    settings: dict[str, Any]
    terms: list[Term]
    budget: Interval
    kv_pool: Interval
    tokens: dict[str, int | None]
    max_concurrency: dict[str, float | None]
    request_bytes: int | None
    fits: str
    reason: str
    engine_error: str | None = None
    log_lines: dict[str, list[str]] = field(default_factory=dict)
    flip_points: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    how_to_measure: str | None = None
    tokens_per_sequence: dict[str, int | None] = field(default_factory=dict)
    max_concurrency_printed: dict[str, str | None] = field(default_factory=dict)
    kv_stored: Interval | None = None
    kv_stored_label: str | None = None
    kv_heads: Any = None

    def __post_init__(self) -> None:
        """The release's own note (e.g. newer than modelled) said first among the notes."""
        if self.release.note and self.release.note not in self.notes:
            self.notes.insert(0, self.release.note)

    def to_dict(self) -> dict[str, Any]:
        """The ``--json`` payload (schema ``kvgate.fit/1``)."""
        return {
            "schema": "kvgate.fit/1",
            "engine": self.engine,
            "release": self.release.text,
            "release_how": self.release.how,
            "gpu": self.gpu.to_dict(),
            "model": self.model,
            "settings": self.settings,
            "terms": [t.to_dict() for t in self.terms],
            "budget_bytes": self.budget.to_dict(),
            "kv_pool_bytes": self.kv_pool.to_dict(),
            "kv_stored_bytes": None if self.kv_stored is None else self.kv_stored.to_dict(),
            "tokens": self.tokens,
            "max_concurrency": self.max_concurrency,
            "max_concurrency_printed": self.max_concurrency_printed,
            "tokens_per_sequence": self.tokens_per_sequence,
            "request_bytes": self.request_bytes,
            "fits": self.fits,
            "reason": self.reason,
            "engine_error": self.engine_error,
            "log_lines": self.log_lines,
            "flip_points": self.flip_points,
            "how_to_measure": self.how_to_measure,
            "notes": list(self.notes),
        }
