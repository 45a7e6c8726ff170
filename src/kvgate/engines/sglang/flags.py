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
- ``--swa-full-tokens-ratio`` 0.8: SWA tokens per full-layer token of the hybrid
  sliding-window pool (:mod:`kvgate.engines.sglang.swa`); shown only for models that get it.
- ``--chunked-prefill-size`` and ``--max-running-requests`` do not change the pool: they
  are shown, and the requests that fit are compared with ``--max-running-requests``.
- DeepSeek sparse attention models (DeepSeek-V3.2, GLM-5; ``server_args.py`` at v0.5.5 and
  v0.5.9, ``_handle_model_specific_adjustments`` / ``_set_default_nsa_kv_cache_dtype``):
  ``--page-size`` is set to 64 on CUDA whatever was given; ``--kv-cache-dtype auto``
  becomes ``fp8_e4m3`` on a GPU of compute capability 10 or more (Blackwell) and
  ``bfloat16`` before it; ``bf16`` is read as ``bfloat16``; any other dtype is refused.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field
from typing import Any

from kvgate.engines.base import make_flags
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
    swa_full_tokens_ratio: float | None = None

    def __post_init__(self) -> None:
        if self.swa_full_tokens_ratio is not None:
            check_ratio(self.swa_full_tokens_ratio)
        f = self.mem_fraction_static
        if f is not None and not 0 < f < 1:
            raise KvgateError(f"--mem-fraction-static must be in (0, 1), got {f}")
        for k in ("context_length", "max_running_requests", "tp_size", "page_size", "chunked_prefill_size"):
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise KvgateError(f"--{k.replace('_', '-')} must be a positive integer, got {v!r}")


def build_flags(base: Any = None, /, **given: Any) -> SglangFlags:
    """SGLang's flags, built once for every path (``kvgate fit``'s inputs, a log's flags for a
    what-if): :func:`kvgate.engines.base.make_flags`."""
    return make_flags(SglangFlags, base, **given)


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
    swa_full_tokens_ratio: float | None = None
    defaults: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def default_mem_fraction_static(tp: int, multimodal: bool) -> float:
    """SGLang 0.4's default (module docstring)."""
    f = 0.79 if tp >= 16 else 0.81 if tp >= 8 else 0.85 if tp >= 4 else 0.87 if tp >= 2 else 0.88
    return round(f * 0.95, 3) if multimodal else f


#: GPU names of compute capability ≥ 10 (Blackwell: B100/B200/B300, GB200/GB300, RTX 50xx,
#: RTX PRO 6000 Blackwell, DGX Spark GB10) and of capability < 10 (Hopper and older)
_SM10_PLUS = re.compile(r"(?i)\bg?b\d{2,3}\b|blackwell|rtx[ -]?50\d0|\b50\d0\b|gb10")
_BEFORE_SM10 = re.compile(r"(?i)\b(h100|h200|h20|h800|gh200|a100|a800|a10g?|a30|a40|l40s?|l4|l20|a6000|v100|t4|"
                          r"rtx[ -]?(30|40)\d0|\b(30|40)\d0)\b")


def check_ratio(ratio: float) -> None:
    """``--swa-full-tokens-ratio`` in (0, 1] as SGLang requires it.

    Raises:
        KvgateError: outside (0, 1].
    """
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or not 0 < ratio <= 1:
        raise KvgateError(f"--swa-full-tokens-ratio must be in (0, 1], got {ratio!r}",
                          hint="SGLang's default is 0.8 (SWA tokens per full-layer token)")


def is_blackwell(gpu_name: str | None) -> bool | None:
    """Whether a GPU of this name has compute capability 10 or more (``torch.cuda.
    get_device_capability()[0] >= 10``, SGLang's test for the DSA KV default), ``None`` when
    the name does not say (``--total``, an unknown card)."""
    name = gpu_name or ""
    if _SM10_PLUS.search(name):
        return True
    if _BEFORE_SM10.search(name):
        return False
    return None


def _dsa_kv_cache_dtype(given: str, gpu_name: str | None, d: dict[str, str]) -> str:
    """SGLang's KV dtype for a DSA model (module docstring).

    Raises:
        KvgateError: ``auto`` on a GPU whose compute capability the name does not say, or a
            dtype SGLang refuses for DSA models.
    """
    kv = given.lower()
    if kv == "auto":
        bw = is_blackwell(gpu_name)
        if bw is None:
            raise KvgateError(f"--kv-cache-dtype auto for a DeepSeek sparse attention model: SGLang picks fp8_e4m3 on "
                              f"a GPU of compute capability 10 or more (Blackwell) and bfloat16 before it, and "
                              f"{gpu_name or 'this GPU'!r} does not say which",
                              hint="give --kv-cache-dtype fp8_e4m3 or bfloat16 (or --gpu NAME)")
        kv = "fp8_e4m3" if bw else "bfloat16"
        d["kv_cache_dtype"] = (f"SGLang's default for DeepSeek sparse attention on {gpu_name}: "
                               + ("fp8_e4m3 (compute capability ≥ 10)" if bw else "bfloat16 (compute capability < 10)"))
    if kv == "bf16":
        kv = "bfloat16"
    if kv not in ("bfloat16", "fp8_e4m3"):
        raise KvgateError(f"SGLang runs DeepSeek sparse attention models with a bfloat16 or fp8_e4m3 KV cache only, "
                          f"not --kv-cache-dtype {given}", hint="--kv-cache-dtype fp8_e4m3 or bfloat16")
    return kv


def resolve_sglang_flags(flags: SglangFlags, *, multimodal: bool, max_position_embeddings: int | None,
                         dsa: bool = False, gpu_name: str | None = None) -> SglangSettings:
    """Fill in SGLang's defaults. ``dsa``: the model has DeepSeek sparse attention
    (:func:`kvgate.engines.sglang.pool.is_dsa`): page size 64 and the KV dtype by ``gpu_name``
    (module docstring).

    Raises:
        KvgateError: no ``--context-length`` and no ``max_position_embeddings``; for a DSA
            model, a KV dtype SGLang refuses or ``auto`` on a GPU the name does not place.
    """
    d: dict[str, str] = {}
    page, kv = flags.page_size, flags.kv_cache_dtype
    if dsa:
        kv = _dsa_kv_cache_dtype(kv, gpu_name, d)
        if page != 64:
            d["page_size"] = f"SGLang sets 64 for DeepSeek sparse attention models (--page-size {page} not used)"
            page = 64
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
                          tp_size=flags.tp_size, kv_cache_dtype=kv, page_size=page,
                          chunked_prefill_size=flags.chunked_prefill_size,
                          swa_full_tokens_ratio=flags.swa_full_tokens_ratio, defaults=d)
