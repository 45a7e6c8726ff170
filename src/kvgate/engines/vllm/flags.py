"""vLLM's launch flags that size memory, and their defaults per release.

Each field is the ``vllm serve`` flag of the same name (``None`` = not given: the
release's default applies, and :func:`resolve_vllm_flags` says which default it took).

Defaults, read at pinned releases:

- ``--gpu-memory-utilization`` (``vllm/config/cache.py`` ``CacheConfig.gpu_memory_utilization``,
  read in the wheels): 0.9 up to 0.19.0 (``Field(default=0.9, gt=0, le=1)``), 0.92 from
  0.20.0 (``Field(default=0.92, gt=0, le=1)``, also 0.21.0, 0.22.0, 0.24.0).
- ``--max-model-len``: the model's ``max_position_embeddings`` (``ModelConfig``,
  ``_get_and_verify_max_len``).
- ``--block-size`` 16 (``CacheConfig.block_size`` on CUDA).
- Engine: V0 up to 0.7, V1 from 0.8 (``VLLM_USE_V1`` default 1 from 0.8.0; V0 removed in
  0.11). ``use_v1`` overrides (``VLLM_USE_V1=0``).
- V0 ``--max-num-seqs`` 256; ``--max-num-batched-tokens``: chunked prefill turns on by itself
  for ``max_model_len > 32768`` (``EngineArgs.create_engine_config``, 0.6–0.7) with 2048
  (512 before 0.6.4); otherwise ``max(max_model_len, 2048)`` (``SchedulerConfig``).
- V1 (``vllm serve`` entry point, ``UsageContext.OPENAI_API_SERVER``; ``EngineArgs.__post_init__``
  / ``_override_v1_engine_args`` 0.7, ``_set_default_args_v1`` 0.8 on, read in the PyPI sdists
  of each release): ``--max-num-batched-tokens`` 8192 on a "large" GPU, else 2048;
  ``--max-num-seqs`` 1024 on a large GPU, else 256. "Large" by release: 0.7.0 … 0.8.4 the
  device name contains ``h100`` or ``h200``; 0.8.5 at least 70 GiB; 0.9.0 on at least 70 GiB
  and not an A100. ``--max-num-seqs`` is 1024 on every GPU from 0.7.0 to 0.8.3.
- CUDA graphs: captured unless ``--enforce-eager``; the graph pool is subtracted from the
  KV budget from 0.20 (``VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS``: ``vllm/envs.py`` default
  ``"0"`` at 0.19.0 and 0.19.1, ``"1"`` at 0.20.0 and 0.21.0, though 0.20.0's own log line says
  "default since v0.21.0"; ``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory``
  subtracts ``cudagraph_memory_estimate_applied``), before that it is
  taken after the KV cache, out of the memory ``--gpu-memory-utilization`` leaves.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from kvgate.engines.base import make_flags
from kvgate.engines.vllm.pool import DEFAULT_BLOCK_SIZE
from kvgate.errors import KvgateError
from kvgate.fit.release import Release
from kvgate.units import GiB

CUDAGRAPH_ESTIMATE_FROM = (0, 20)
#: vLLM's default --gpu-memory-utilization is 0.92 from this release (0.9 before)
UTIL_092_FROM = (0, 20)


def default_utilization(release: Release) -> float:
    """vLLM's default ``--gpu-memory-utilization`` for ``release`` (module docstring)."""
    return 0.92 if release.at_least(*UTIL_092_FROM) else 0.9


@dataclass(frozen=True)
class VllmFlags:
    """The memory-relevant ``vllm serve`` flags as given (``None`` = the default;
    ``max_model_len=-1`` = ``--max-model-len auto``)."""

    gpu_memory_utilization: float | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    decode_context_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    kv_cache_memory_bytes: int | None = None
    enforce_eager: bool = False
    block_size: int | None = None
    use_v1: bool | None = None
    #: V1's top-k/top-p sampler is FlashInfer's (its log: "Using FlashInfer for top-p & top-k
    #: sampling") or not ("FlashInfer is not available …"); None: the release's rule
    #: (kvgate.engines.vllm.budget.v1_logits_rule)
    flashinfer_sampler: bool | None = None

    def __post_init__(self) -> None:
        u = self.gpu_memory_utilization
        if u is not None and not (0 < u <= 1):
            raise KvgateError(f"--gpu-memory-utilization must be in (0, 1], got {u}",
                              hint="vLLM takes a fraction of the GPU's memory, e.g. 0.9")
        for k in ("max_num_seqs", "max_num_batched_tokens", "tensor_parallel_size",
                  "pipeline_parallel_size", "decode_context_parallel_size", "kv_cache_memory_bytes", "block_size", "max_model_len"):
            if k == "max_model_len" and self.max_model_len == -1:
                continue
            v = getattr(self, k)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise KvgateError(f"--{k.replace('_', '-')} must be a positive integer, got {v!r}")
        bs = self.block_size
        if bs is not None and bs not in (1, 8) and bs % 16:
            # CacheConfig.block_size: Literal[1, 8, 16, 32, 64, 128, 256] (vllm/config/cache.py,
            # 0.10 ... 0.2x); later any int > 0, but the CUDA attention backends take multiples
            # of 16 only (FlashAttentionBackend.get_supported_kernel_block_sizes: MultipleOf(16))
            raise KvgateError(f"--block-size {bs}: no vLLM release starts with it: its CacheConfig took 1, 8, 16, 32, "
                              "64, 128, 256, and its CUDA attention backends take multiples of 16",
                              hint="--block-size 16 (vLLM's default), 32, 64, ...")


def build_flags(base: Any = None, /, **given: Any) -> VllmFlags:
    """vLLM's flags, built once for every path (``kvgate fit``'s inputs, a log's flags for a
    what-if, a recorded case): :func:`kvgate.engines.base.make_flags`."""
    return make_flags(VllmFlags, base, **given)


@dataclass(frozen=True)
class VllmSettings:
    """The flags with every default filled in for one release and GPU.

    ``defaults`` names each value that was not given and the rule that chose it.
    """

    gpu_memory_utilization: float
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    kv_cache_memory_bytes: int | None
    enforce_eager: bool
    block_size: int
    v1: bool
    cudagraph_pool_subtracted: bool
    defaults: dict[str, str] = field(default_factory=dict)
    decode_context_parallel_size: int = 1
    flashinfer_sampler: bool | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def resolve_vllm_flags(flags: VllmFlags, release: Release, *, cuda_total_bytes: int, gpu_name: str,
                       max_position_embeddings: int | None) -> VllmSettings:
    """Fill in ``flags``' defaults for ``release`` on a GPU of ``cuda_total_bytes`` named
    ``gpu_name`` (module docstring for each rule).

    Raises:
        KvgateError: no ``--max-model-len`` and no ``max_position_embeddings`` in the config.
    """
    d: dict[str, str] = {}
    util = flags.gpu_memory_utilization
    if util is None:
        util = default_utilization(release)
        d["gpu_memory_utilization"] = (f"vLLM default {util} (" + ("0.92 from 0.20.0" if util == 0.92 else
                                                                   "0.9 before 0.20.0") + ")")
    L = flags.max_model_len
    if L is None:
        if not max_position_embeddings:
            raise KvgateError("--max-model-len not given and the config has no max_position_embeddings",
                              hint="pass --max-model-len (vLLM takes 32k = 32,000, 32K = 32,768)")
        L = max_position_embeddings
        d["max_model_len"] = "the model's max_position_embeddings (vLLM's default)"
    v1 = flags.use_v1 if flags.use_v1 is not None else release.at_least(0, 8)
    if release.at_least(0, 11) and not v1:
        raise KvgateError(f"vLLM {release.text} has no V0 engine", hint="V0 was removed in 0.11")
    if v1:
        name = gpu_name.lower()
        if not release.at_least(0, 8, 5):
            big = "h100" in name or "h200" in name
            rule = "H100/H200 by device name (0.7.0-0.8.4)"
        elif not release.at_least(0, 9):
            big = cuda_total_bytes >= 70 * GiB
            rule = "GPUs ≥ 70 GiB (0.8.5)"
        else:
            big = cuda_total_bytes >= 70 * GiB and "a100" not in name
            rule = "GPUs ≥ 70 GiB other than A100 (0.9+)"
        mnbt_def = 8192 if big else 2048
        seqs_def = 1024 if big or not release.at_least(0, 8, 4) else 256
        why = f"V1 `vllm serve` default ({'large' if big else 'not large'}: {rule})"
        if not release.at_least(0, 8, 4):
            why += "; max_num_seqs 1024 on every GPU before 0.8.4"
    else:
        seqs_def = 256
        chunk = 2048 if release.at_least(0, 6, 4) else 512
        mnbt_def = chunk if L > 32768 else max(L, 2048)
        why = ("V0 default with chunked prefill (on by itself above 32,768)" if L > 32768
               else "V0 default max(max_model_len, 2048) (chunked prefill off)")
    seqs = flags.max_num_seqs
    if seqs is None:
        seqs = seqs_def
        d["max_num_seqs"] = why
    mnbt = flags.max_num_batched_tokens
    if mnbt is None:
        mnbt = mnbt_def
        d["max_num_batched_tokens"] = why
    bs = flags.block_size
    if bs is None:
        bs = DEFAULT_BLOCK_SIZE
        d["block_size"] = f"vLLM default {DEFAULT_BLOCK_SIZE}"
    return VllmSettings(
        gpu_memory_utilization=util, max_model_len=L, max_num_seqs=seqs, max_num_batched_tokens=mnbt,
        tensor_parallel_size=flags.tensor_parallel_size, pipeline_parallel_size=flags.pipeline_parallel_size,
        kv_cache_dtype=flags.kv_cache_dtype, kv_cache_memory_bytes=flags.kv_cache_memory_bytes,
        enforce_eager=flags.enforce_eager, block_size=bs, v1=v1,
        cudagraph_pool_subtracted=release.at_least(*CUDAGRAPH_ESTIMATE_FROM) and not flags.enforce_eager,
        defaults=d, decode_context_parallel_size=flags.decode_context_parallel_size,
        flashinfer_sampler=flags.flashinfer_sampler,
    )
