"""SGLang's launch flags that size memory, and their defaults (``python/sglang/srt/server_args.py``,
0.4 series).

- ``--mem-fraction-static``: by tensor parallelism, 0.79 (TP ≥ 16), 0.81 (≥ 8), 0.85 (≥ 4),
  0.87 (≥ 2), 0.88 (1); multimodal models × 0.95. (Checked on
  ``tests/data/fit_logs/sglang_2025-03_gemma-3-4b_h200_1.log``: Gemma-3-4B, TP 1, pool
  108.24 GiB from 139.21 GiB free and 8.13 GiB of weights: 0.836 = 0.88 × 0.95.) Releases from
  0.4.7 compute it from the GPU's memory, the chunked-prefill size and the CUDA-graph batch
  size instead: not modelled, give the value your server logs (``mem_fraction_static=`` in
  its ``server_args``).
- ``--context-length``: the model's ``max_position_embeddings``.
- ``--page-size`` 1; ``--kv-cache-dtype`` auto (the model dtype); ``--tp-size`` 1.
- ``--chunked-prefill-size`` and ``--max-running-requests`` do not change the pool: they
  are shown, and the requests that fit are compared with ``--max-running-requests``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvgate.errors import KvgateError


@dataclass(frozen=True)
class SglangFlags:
    """The memory-relevant ``sglang.launch_server`` flags as given (``None`` = default)."""

    mem_fraction_static: float | None = None
    context_length: int | None = None
    max_running_requests: int | None = None
    tp_size: int = 1
    kv_cache_dtype: str = "auto"
    page_size: int = 1
    chunked_prefill_size: int | None = None

    def __post_init__(self) -> None:
        f = self.mem_fraction_static
        if f is not None and not 0 < f < 1:
            raise KvgateError(f"--mem-fraction-static must be in (0, 1), got {f}")
        for k in ("context_length", "max_running_requests", "tp_size", "page_size", "chunked_prefill_size"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise KvgateError(f"--{k.replace('_', '-')} must be a positive integer, got {v!r}")


@dataclass(frozen=True)
class SglangSettings:
    """Flags with defaults filled in; ``defaults`` says which were not given and why."""

    mem_fraction_static: float
    context_length: int
    max_running_requests: int | None
    tp_size: int
    kv_cache_dtype: str
    page_size: int
    chunked_prefill_size: int | None
    defaults: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_mem_fraction_static(tp: int, multimodal: bool) -> float:
    """SGLang 0.4's default (module docstring)."""
    f = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
    return round(f * 0.95, 3) if multimodal else f


def resolve_sglang_flags(flags: SglangFlags, *, multimodal: bool, max_position_embeddings: int | None) -> SglangSettings:
    """Fill in SGLang's defaults.

    Raises:
        KvgateError: no ``--context-length`` and no ``max_position_embeddings``.
    """
    d: dict[str, str] = {}
    f = flags.mem_fraction_static
    if f is None:
        f = default_mem_fraction_static(flags.tp_size, multimodal)
        d["mem_fraction_static"] = (f"SGLang 0.4 default for TP {flags.tp_size}" + (" × 0.95 (multimodal)" if multimodal else "")
                                    + "; releases from 0.4.7 compute it: give the logged value")
    L = flags.context_length
    if L is None:
        if not max_position_embeddings:
            raise KvgateError("--context-length not given and the config has no max_position_embeddings")
        L = max_position_embeddings
        d["context_length"] = "the model's max_position_embeddings"
    return SglangSettings(mem_fraction_static=f, context_length=L, max_running_requests=flags.max_running_requests,
                          tp_size=flags.tp_size, kv_cache_dtype=flags.kv_cache_dtype, page_size=flags.page_size,
                          chunked_prefill_size=flags.chunked_prefill_size, defaults=d)
