"""vLLM's non-KV memory budget, term by term, each an interval with its source.

vLLM sizes its KV cache pool per GPU as (``vllm/v1/worker/gpu_worker.py``
``Worker.determine_available_memory``, 0.8 … 0.24; V0 ``vllm/worker/worker.py``
``determine_num_available_blocks``, 0.6.5 … 0.10, same ``memory_profiling`` in
``vllm/utils``)::

    available KV = total × gpu_memory_utilization
                   − (weights + activation peak of the profile run + non-torch memory)
                   − CUDA graph pool estimate            (0.20 and later, unless eager)

with ``total`` the CUDA total of the GPU (:mod:`kvgate.fit.gpus`). ``--kv-cache-memory-bytes``
replaces the whole computation by its value.

Calibration (the interval rule, :mod:`kvgate.engines.vllm.calibrate`). Each non-KV band is the
smallest one that meets every printed value of the logs in ``tests/data/fit_logs/``
(manifest.json), each printed value carrying its printing precision (two decimals of GiB =
±5.12 MiB); the deployed :data:`BANDS` are that data band widened by a few hand margins
(written below) and never narrower (``tests/test_fit_calibration.py`` checks it):

- **Activation peak** ("torch peak memory increase"; V0 0.6.4's ``peak_torch_memory`` less
  the weights). ``T·w`` is the profile run's tokens (``max_num_batched_tokens``) times the
  per-token width of :mod:`kvgate.fit.widths` (the forward pass), ``R`` the rows of logits the
  profile run computes, ``V`` the vocabulary, ``b`` the model dtype's bytes.

  *V0* (``vllm/worker/model_runner.py`` ``profile_run``, 0.6.4 … 0.10): the forward and the
  sampler of ``max_num_seqs`` sequences, additive: ``[K_LO·T·w + C_LO·S, K_HI·T·w + C_HI·S]``,
  ``S = max_num_seqs × V``. ``K`` from the logs whose sampler is small (``4·S ≤ T·w/10``:
  Llama-3.1-8B 2.07 / 1.984 and 2.99 / 2.876 GiB, 0.6.4, RTX 3090) and the low ends of all:
  data [1.04, 1.05], deployed [1.03, 1.05]. ``C_HI`` 25 B per logit (Qwen2.5-7B bitsandbytes,
  0.7.3, 1.42 GiB at 4,096 tokens, 256 sequences); ``C_LO`` 0.

  *V1*, from the code of ``vllm/v1/worker/gpu_model_runner.py`` ``profile_run`` per release
  (:func:`v1_logits_rule`), not fitted: the forward's temporaries are freed before the logits,
  so the peak is ``max(K·T·w, T·hidden·b + R·V·β)`` with ``β`` bytes per logit:

  - 0.7.0 … 0.7.2: ``compute_logits`` on every profiled token, no sampler: ``R = T``, ``β = b``;
  - 0.7.3: the last token of each of ``max_num_seqs`` dummy requests, no sampler: ``R =
    max_num_seqs``, ``β = b``;
  - 0.8 and later (``_dummy_sampler_run``): ``R = min(max_num_seqs, T)`` logits in the model
    dtype, their fp32 copy (``vllm/v1/sample/sampler.py``), and the top-k/top-p sampler with
    ``top_k = V − 1``, ``top_p = 0.9`` (``vllm/v1/sample/ops/topk_topp_sampler.py``). PyTorch's
    path sorts (``apply_top_k_top_p``): at the sort, fp32 values 4 + int64 indices 8 +
    PyTorch's int64 reverse indices 8 + cub's alternate key/value buffers 4 + 8
    (``aten/src/ATen/native/cuda/SortStable.cu`` ``segmented_sort_pairs``) on top of the
    ``b + 4`` logits: ``β = b + 36`` (``benchmarks/v1_sampler_peak.py`` on an H200, torch
    2.11: 38.02 B a logit for bf16 logits of 256 and 1,024 rows; 50.57 B for 64 rows, where
    PyTorch sorts 2 … 127 rows by a full sort with two int2 buffers: ``β = b + 49`` there).
    FlashInfer's ``top_k_top_p_sampling_from_logits``
    (a masked copy and its softmax) and the Triton top-k/top-p kernel of 0.19 (in place, then
    softmax, exponential noise and their quotient): ``β = b + 12`` … ``b + 16``. The sort's
    bytes are torch's: ``b + 36`` is torch 2.11's, and the 0.12 gpt-oss-20b log's printed
    1.83 GiB is ``b + 36`` too, so from 0.12, whose ``requirements/cuda.txt`` pins torch 2.9.0
    (0.16.0: 2.9.1), PyTorch's path is ``b + 36`` (:data:`TORCH_SORT_MEASURED_FROM`). 0.8 … 0.11
    pin torch 2.6.0 … 2.8.0, whose sort no run here has measured, and two of their logs that
    print "FlashInfer is not available" (0.10.0 AWQ on an RTX 3090, 0.11.0 on an L4) hold
    less than ``b + 36`` would leave; there the band keeps ``b + 26``, what PyTorch's path
    still holds after the sort (sorted values and indices, the masks, the top-p softmax and the
    scatter). Which path a release takes: 0.8 … 0.11 FlashInfer when installed (not a dependency
    of the wheel), else PyTorch: ``[b + 12, b + 36]``; 0.12 PyTorch unless
    ``VLLM_USE_FLASHINFER_SAMPLER=1``: ``b + 36``, and so through 0.16 (``topk_topp_sampler.py`` ``TopKTopPSampler.__init__``
    picks ``forward_native`` unless ``VLLM_USE_FLASHINFER_SAMPLER``: the file is the same at 0.12.0 and
    0.13.0, and at 0.14.0 and 0.16.0 up to the ROCm aiter switch; 0.15 lies between, not read);
    0.17 and later: Triton for 8 rows or more (``apply_top_k_top_p``: ``if HAS_TRITON and
    logits.shape[0] >= 8: return apply_top_k_top_p_triton(...)``, the file the same at 0.17.0,
    0.18.1 and 0.19.0; FlashInfer when enabled): ``[b + 12, b + 16]``, PyTorch below 8 rows.

  Each tensor-parallel rank holds the full vocabulary's logits (gathered before sampling);
  with pipeline parallelism only the last stage samples, and kvgate charges every stage
  (an upper bound for the others). The gpt-oss-20b log of 0.12 (L40S, 2,048 tokens, 256
  sequences, V = 201,088) prints 1.83 GiB; at ``b + 36`` this rule gives 1.83 GiB (38 B ×
  51.5 M logits + the 2,048 hidden states).
- **Non-torch memory** (CUDA/NCCL/cuBLAS memory outside torch's allocator), by the rule the
  release measures it with (:func:`non_torch_band`):

  - *growth since the first snapshot*, V0 0.7 … 0.10 and V1 from 0.9.1: ``memory_profiling`` in
    ``vllm/utils`` (0.7.0: ``result.non_torch_increase = diff_from_create.non_torch_memory``,
    ``non_torch_memory = cuda_memory − torch.cuda.memory_reserved()``, the baseline snapshot
    taken in ``Worker.init_device`` after ``torch.cuda.set_device``, so the CUDA context is
    not in it); V1 reuses it from 0.9.1 (vllm-project/vllm#19312, "Reuse V0's
    memory_profiling util for gpu worker memory profiling"); at 0.19 without ``--enforce-eager``
    the window also holds ``profile_cudagraph_memory()`` (``gpu_worker.py``), so what graph
    capture leaves outside torch counts too. At TP 1 it is what grows outside torch's
    allocator after the snapshot (kernels loaded lazily, library handles: not read): 0.03 GiB (RTX 4060,
    V0 0.7.3), 0.04 GiB (L40S, V1 0.12), 0.16 GiB (H100, V0 0.8). One band, V0 and V1 alike
    (:attr:`Bands.non_torch_growth`), up to a prior 0.5 GiB: the two 0.19 logs on an A100
    (no term printed) need 0.02–0.28 GiB more non-KV memory than 0.16 GiB leaves, a cause
    not printed (their CUDA total, from the card's name, is one candidate; not checked).
  - *V1 before 0.9.1* (``vllm/v1/worker/gpu_worker.py`` ``determine_available_memory`` 0.7.0 …
    0.9.0: ``total_allocated_bytes = mem_get_info()[1] − mem_get_info()[0]``,
    ``non_torch_allocations = total_allocated_bytes − torch_allocated_bytes``): everything the
    GPU holds less torch's allocation, the CUDA context included: the growth band +
    :data:`CUDA_CONTEXT`.
  - *V0 0.6.4 and before* (:attr:`Bands.non_torch_v064`; ``vllm/worker/worker.py``
    ``determine_num_available_blocks``: the same ``total_allocated_bytes −
    torch_allocated_bytes`` as V1 before 0.9.1, the context and other processes included):
    printed 0.35 GiB (RTX 3090, twice). *V0 0.6.5 … 0.6.6* (:attr:`Bands.non_torch_v0`;
    ``memory_profiling(baseline_memory_in_bytes=total − init_gpu_memory, …)``:
    ``current_cuda_memory_bytes − baseline − weights − Δ torch allocated``, so torch memory
    that is not the weights' counts too): 1.79 GiB (the 0.6.5 memory-profiling branch, H100).
    Both count at least what the growth rule counts (their bands start at its low end); other
    processes on the GPU count in 0.6.4, so neither has an upper end in the code: deployed, the
    V0 band of before (0.03 … 1.79 GiB).
- **CUDA graph pool**: before 0.20 (captured after the KV cache, not subtracted) printed
  0.13 GiB (Qwen3-0.6B, 0.8 V0, 67 sizes) and 1.62 GiB (Qwen3.5 GGUF hybrid, 0.18); from
  0.20 (estimated and subtracted) 0.17 GiB (estimate, TP 4) and 0.09 GiB (actual, TP 2,
  RTX 5090), and the band holds the earlier values too (the graphs are the same graphs);
  0 with ``--enforce-eager``. Not modelled from widths.
- **Weights**: "Model loading took" is the torch allocation of the loaded checkpoint:
  Llama-3.1-8B reads 16,060,522,496 B of safetensors and vLLM prints 14.9888 GiB
  (+0.2%); repacked quantized formats add more (gpt-oss MXFP4). Band on a checkpoint's
  bytes split over TP × PP ranks: [1.00, 1.08]; on an estimate from config.json:
  [0.85, 1.15], except an unquantized text model (no ``quantization_config``, no vision or
  audio tower, the config's own dtype), whose bytes the config determines:
  :data:`WEIGHTS_ESTIMATE_PLAIN` [1.00, 1.02]. vLLM creates every parameter in the model dtype
  (``vllm/model_executor/model_loader/loader.py`` 0.7.0 ``with
  set_default_torch_dtype(model_config.dtype): model = _initialize_model(...)``), so the load
  allocates parameters × dtype bytes and a few buffers more: the rotary ``cos_sin_cache``
  (``rotary_embedding.py``: ``cache = cache.to(dtype)``, ``register_buffer("cos_sin_cache",
  cache, persistent=False)``, max_position × rotary_dim: 32 MiB for Llama-3.1-8B), the
  vocabulary padded to a multiple of 64 (``vocab_parallel_embedding.py``
  ``DEFAULT_VOCAB_PADDING_SIZE = 64``) and what TP replicates (norms). The logs: +0.02%
  (Llama-3-8B), +0.2% (Llama-3.1-8B, the rotary cache), +0.9% (Qwen3-0.6B), +0.6% and +1.4%
  (Qwen2.5-32B and DeepSeek-R1-Distill-Qwen-14B at TP 2: 0.19–0.20 GiB more a rank, a cause
  not read); the upper end 1.02 holds them.

The table of every log, its interval and its width, in-sample (these bands) and
leave-one-out (each log's interval from bands calibrated without it), is made by
``benchmarks/fit_logs_table.py`` (``benchmarks/RESULTS.md``).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvgate.engines.vllm.flags import VllmSettings
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release
from kvgate.fit.widths import Widths
from kvgate.model import text_config
from kvgate.units import MiB, fmt_gib


@dataclass(frozen=True)
class Bands:
    """The calibrated non-KV bands (module docstring).

    Attributes:
        k: ``(K_LO, K_HI)``, multiples of the profile run's ``T·w`` bytes.
        c_v0: ``(C_LO, C_HI)``, bytes per sampler logit, V0 (V1's sampler is from the code:
            :func:`v1_logits_rule`).
        non_torch_v0: non-torch memory of V0 0.6.5 … 0.6.6 (growth less the weights and torch's
            change: ``memory_profiling(baseline_memory_in_bytes=…)``), bytes.
        non_torch_growth: non-torch memory as ``memory_profiling`` measures it (growth since the
            first snapshot: V0 from 0.7, V1 from 0.9.1; V1 before adds :data:`CUDA_CONTEXT`), bytes.
        cuda_graph: the CUDA graph pool before 0.20 (not subtracted), bytes.
        cuda_graph_021: the CUDA graph pool from 0.20 (estimated and subtracted), bytes.
        non_torch_v064: non-torch memory of V0 0.6.4 and before (all GPU memory in use less
            torch's allocation: the context and other processes count), bytes.
    """

    k: tuple[Fraction, Fraction]
    c_v0: tuple[int, int]
    non_torch_v0: Interval
    non_torch_growth: Interval
    cuda_graph: Interval
    cuda_graph_021: Interval
    non_torch_v064: Interval = Interval(25 * MiB, 1839 * MiB)

    def to_dict(self) -> dict[str, Any]:
        return {"k": [float(x) for x in self.k], "c_v0": list(self.c_v0),
                "non_torch_v0": self.non_torch_v0.to_dict(), "non_torch_growth": self.non_torch_growth.to_dict(),
                "cuda_graph": self.cuda_graph.to_dict(), "cuda_graph_021": self.cuda_graph_021.to_dict(),
                "non_torch_v064": self.non_torch_v064.to_dict()}


#: the deployed bands: the data bands of tests/data/fit_logs widened by the hand margins of the
#: module docstring (K_LO 1.03 where the data give 1.04; growth-rule non-torch up to 0.5 GiB)
BANDS = Bands(
    k=(Fraction(103, 100), Fraction(105, 100)),
    c_v0=(0, 25),      # bytes per logit of the sampler in the profile run, V0
    non_torch_v0=Interval(25 * MiB, 1839 * MiB),   # 0.03 GiB − 5 MiB … 1.79 GiB + 5 MiB
    non_torch_growth=Interval(25 * MiB, 512 * MiB),  # 0.03 GiB − 5 MiB … prior 0.5 GiB (module docstring)
    cuda_graph=Interval(128 * MiB, 1664 * MiB),    # 0.13 … 1.62 GiB, ± printing
    cuda_graph_021=Interval(87 * MiB, 1664 * MiB),  # 0.09 (0.20+) … 1.62 GiB, ± printing
    non_torch_v064=Interval(25 * MiB, 1839 * MiB),  # the V0 band of before: other processes count
)
#: the CUDA graph estimate's upper end for a model with linear-attention or Mamba layers: vLLM
#: 0.19.0 printed "Estimated CUDA graph memory: 3.65 GiB total" for Qwen3.5-9B at TP 4 on RTX 3090s
#: (51 piecewise + 35 full graphs; tests/data/fit_logs/vllm_0.19.0_qwen3.5-9b_rtx3090_tp4_1.log),
#: gpu_model_runner.py profile_cudagraph_memory, the estimator 0.20+ subtracts; the graph band's
#: 1.62 GiB is a Qwen3.5 GGUF's (a hybrid too); other models' bands are unchanged
HYBRID_GRAPH_HIGH = 3743 * MiB  # 3.65 GiB + printing, rounded up to the MiB
#: code-derived floor of V0's sampler band (not from logs)
C_LO = BANDS.c_v0[0]
K_LO, K_HI = BANDS.k
WEIGHTS_FILE = (Fraction(1), Fraction(108, 100))
#: the CUDA context of the engine process (as kvgate.engines.vllm.fit.CONTEXT: L40S 0.49 GiB from
#: tests/data/fit_logs/vllm_2025-12_gpt-oss-20b_44gib-gpu_1.log, H200 526.8 MiB measured)
CUDA_CONTEXT = Interval(490 * MiB, 560 * MiB)
#: from this vLLM release (torch 2.9.0 pinned) PyTorch's top-k/top-p sort is b + 36 bytes a logit, as
#: torch 2.11 measured (benchmarks/v1_sampler_peak.py) and the 0.12 gpt-oss-20b log printed
TORCH_SORT_MEASURED_FROM = (0, 12)
#: V1 measures non-torch memory as growth since its first snapshot from 0.9.1 (memory_profiling)
V1_PROFILER_FROM = (0, 9, 1)
#: V0 measures it so from 0.7.0 (memory_profiling with the baseline snapshot of init_device)
V0_PROFILER_FROM = (0, 7)
#: V0 0.6.5 … 0.6.6: memory_profiling(baseline_memory_in_bytes=total − init free, weights)
V065_RULE_FROM = (0, 6, 5)
WEIGHTS_ESTIMATE = (Fraction(85, 100), Fraction(115, 100))
#: an unquantized text model's estimate: parameters × dtype is what vLLM allocates, + buffers (docstring)
WEIGHTS_ESTIMATE_PLAIN = (Fraction(1), Fraction(102, 100))
_ACTIVE: ContextVar[Bands] = ContextVar("kvgate_vllm_bands", default=BANDS)


@contextmanager
def using_bands(bands: Bands) -> Iterator[None]:
    """Within the block, the non-KV terms use ``bands`` instead of :data:`BANDS` (the
    leave-one-out evaluation of ``benchmarks/fit_logs_table.py``)."""
    token = _ACTIVE.set(bands)
    try:
        yield
    finally:
        _ACTIVE.reset(token)


def active_bands() -> Bands:
    """The bands in force (:data:`BANDS` unless within :func:`using_bands`)."""
    return _ACTIVE.get()


SOURCE = "vllm/v1/worker/gpu_worker.py determine_available_memory; band calibrated on tests/data/fit_logs"


def weights_term(checkpoint_bytes: int, *, ranks: int, exact: bool, source: str, plain: bool = False) -> Term:
    """Weights per GPU from a whole checkpoint's bytes split over ``ranks`` (TP × PP);
    ``plain``: an estimate of an unquantized text model (:func:`plain_estimate`), whose band
    is :data:`WEIGHTS_ESTIMATE_PLAIN`."""
    lo, hi = WEIGHTS_FILE if exact else WEIGHTS_ESTIMATE_PLAIN if plain else WEIGHTS_ESTIMATE
    per = checkpoint_bytes // ranks
    kind = "file" if exact else "ESTIMATE, unquantized text model: parameters × dtype" if plain else "ESTIMATE"
    return Term("weights", Interval.scaled(per, lo, hi),
                f"{source}, ÷ {ranks} rank(s), ×[{float(lo):.2f}, {float(hi):.2f}] ({kind})")


def plain_estimate(config: dict[str, Any], *, multimodal: bool, dtype_override: str | None = None) -> bool:
    """True when a config-estimated checkpoint is an unquantized text model in its own dtype:
    no ``quantization_config``/``compression_config`` (top level or text config), no vision or
    audio tower (``multimodal``), no other dtype assumed for the checkpoint (``dtype_override``)."""
    if multimodal or dtype_override:
        return False
    keys = ("quantization_config", "compression_config")
    return not any(config.get(k) for k in keys) and not any(text_config(config).get(k) for k in keys)


def _dtype_and_hidden(config: dict[str, Any], dtype: str | None = None) -> tuple[int, int]:
    """``(b, hidden)``: the bytes of the dtype vLLM runs the model in (``dtype``, its
    :func:`kvgate.engines.vllm.dtype.run_dtype`; not given: the config's; 2 unless float32)
    and ``hidden_size``."""
    tc = text_config(config)
    dt = str(dtype or tc.get("torch_dtype") or tc.get("dtype") or config.get("torch_dtype") or "bfloat16").lower()
    b = 4 if dt in ("float32", "float", "fp32") else 2
    hidden = tc.get("hidden_size") or tc.get("n_embd") or tc.get("d_model") or 0
    return b, int(hidden)


def v1_logits_rule(release: Release | None, T: int, seqs: int, b: int,
                   flashinfer: bool | None = None) -> tuple[int, int, int, str]:
    """V1's logits in the profile run of ``release`` (module docstring): ``(rows, β_lo, β_hi,
    source)``, ``rows`` of logits of ``β`` bytes each, for ``T`` profiled tokens,
    ``max_num_seqs`` ``seqs`` and the model dtype's ``b`` bytes. ``flashinfer``: whether the
    run samples with FlashInfer, when known (``topk_topp_sampler.py`` logs it at startup: 0.8 …
    0.11 "Using FlashInfer for top-p & top-k sampling." when ``flashinfer`` imports and
    ``VLLM_USE_FLASHINFER_SAMPLER`` is not 0, else "FlashInfer is not available. Falling back to
    the PyTorch-native implementation …" or "FlashInfer is available, but it is not enabled";
    0.12 … 0.16 FlashInfer only with ``VLLM_USE_FLASHINFER_SAMPLER=1``): FlashInfer ``b+12 … b+16``,
    PyTorch's sort ``b+36`` from 0.12 (torch ≥ 2.9), ``b+26 … b+36`` before (``b+49`` for 2 … 127
    rows); from 0.17 the path without
    FlashInfer is Triton's for 8 rows or more, so only fewer rows change.

    Source: ``vllm/v1/worker/gpu_model_runner.py`` ``profile_run`` / ``_dummy_sampler_run``
    and ``vllm/v1/sample/ops/topk_topp_sampler.py`` at 0.7.0, 0.7.3, 0.8.0, 0.8.5, 0.10.1,
    0.11.0, 0.12.0, 0.13.0, 0.14.0, 0.16.0, 0.17.0, 0.18.1, 0.19.0, 0.24.0 (PyPI sdists)."""
    v = release.version if release is not None else None
    if v is not None and v < (0, 7, 3):
        return T, b, b, "0.7.0-0.7.2 profile_run: compute_logits on every profiled token, no sampler"
    if v is not None and v < (0, 8):
        return seqs, b, b, "0.7.3 profile_run: logits of the last token of max_num_seqs requests, no sampler"
    rows = min(seqs, T)
    # PyTorch's sort of 2 … 127 rows takes its full-sort path (two int2 buffers and a global
    # cub sort): 48.5 B a logit measured with the fp32 input, against 36 for 128 rows or more
    native = b + 36 if rows >= 128 or rows == 1 else b + 49
    flash, triton = b + 12, b + 16
    measured = v is not None and v >= TORCH_SORT_MEASURED_FROM
    post_sort = native if measured else b + 26
    sort_said = (f"b+{native - b}, torch >= 2.9 as measured" if measured else
                 "b+26 … b+36; b+49 for 2-127 rows")
    if flashinfer is True:
        return rows, flash, triton, "V1 _dummy_sampler_run, FlashInfer's top-k/top-p (the run uses it: b+12 … b+16)"
    if flashinfer is False and (v is None or v < (0, 17) or rows < 8):
        return rows, post_sort, native, ("V1 _dummy_sampler_run, PyTorch's top-k/top-p sort (the run has no "
                                         f"FlashInfer sampler: {sort_said})")
    if v is None:
        return rows, flash, native, "release not known: FlashInfer/Triton (b+12) … PyTorch sort (b+36)"
    if v < (0, 12):
        return rows, flash, native, ("0.8-0.11 _dummy_sampler_run, top-k/top-p: FlashInfer when installed "
                                     "(b+12) or PyTorch's sort (b+36; b+49 for 2-127 rows)")
    if v < (0, 17):
        return rows, native, native, ("0.12-0.16 _dummy_sampler_run, PyTorch's top-k/top-p sort unless "
                                      f"VLLM_USE_FLASHINFER_SAMPLER=1 ({sort_said})")
    if rows < 8:
        return rows, flash, native, "0.17+ with < 8 rows: PyTorch's sort (b+12 … b+36; b+49 for 2-127 rows)"
    return rows, flash, triton, "0.17+ _dummy_sampler_run: Triton top-k/top-p or FlashInfer (b+12 … b+16)"


def activation_term(s: VllmSettings, w: Widths, release: Release | None = None,
                    config: dict[str, Any] | None = None, dtype: str | None = None,
                    full: dict[str, Any] | None = None) -> Term:
    """The activation peak of the profile run (module docstring): V0 additive and calibrated;
    V1 ``max(forward, hidden states + logits)`` with the logits from the code
    (:func:`v1_logits_rule`); for a V1 multimodal model whose encoder profile is modelled
    (``full``: the whole config.json, :func:`kvgate.engines.vllm.encoder.encoder_profile`),
    plus the encoder cache held through it, and up to the pixel values on the GPU."""
    b = active_bands()
    k_lo, k_hi = b.k
    T = s.max_num_batched_tokens
    tw = T * w.token_bytes
    fwd = Interval.scaled(tw, k_lo, k_hi)
    if not s.v1:
        c_lo, c_hi = b.c_v0
        logits = s.max_num_seqs * w.vocab
        v = fwd + Interval(c_lo * logits, c_hi * logits)
        src = (f"{T:,} tokens × {w.token_bytes:,} B × [{float(k_lo):.2f}, {float(k_hi):.2f}]"
               f" + [{c_lo}, {c_hi}] B × {s.max_num_seqs} sequences × {w.vocab:,} vocab (V0 sampler); "
               "calibrated on tests/data/fit_logs")
    else:
        bb, hidden = _dtype_and_hidden(config or {}, dtype)
        rows, beta_lo, beta_hi, why = v1_logits_rule(release, T, s.max_num_seqs, bb, s.flashinfer_sampler)
        kept_lo = T * hidden * bb + rows * hidden * bb
        kept_hi = kept_lo + rows * hidden * bb
        lg = Interval(kept_lo + rows * w.vocab * beta_lo, kept_hi + rows * w.vocab * beta_hi)
        v = Interval(max(fwd.low, lg.low), max(fwd.high, lg.high))
        src = (f"max(forward {T:,} tokens × {w.token_bytes:,} B × [{float(k_lo):.2f}, {float(k_hi):.2f}], "
               f"{rows:,} rows × {w.vocab:,} vocab × [{beta_lo}, {beta_hi}] B + hidden states); {why}")
    enc = None
    if s.v1 and full is not None:
        from kvgate.engines.vllm.encoder import encoder_profile  # noqa: PLC0415

        bb = _dtype_and_hidden(config or {}, dtype)[0]
        enc = encoder_profile(full, release.version if release is not None else None, max_model_len=s.max_model_len,
                              max_num_batched_tokens=s.max_num_batched_tokens, max_num_seqs=s.max_num_seqs,
                              dtype_bytes=bb)
    if enc is not None:
        v = Interval(v.low + enc.held, v.high + enc.held + enc.pixels)
        src += (f"; + {enc.source}: {fmt_gib(enc.held)}, + up to the pixel values on the GPU "
                f"({enc.items} × {enc.patches:,} patches × {enc.patch_dim} × 4 B = {fmt_gib(enc.pixels)}); "
                "NOT COUNTED: the encoder's own forward peak")
    elif w.multimodal or (full is not None and any(k in full for k in ("vision_config", "audio_config"))):
        src += "; NOT COUNTED: the vision/audio encoder's profile (multimodal), which can be larger"
    return Term("activation peak (profile run)", v, src)


def non_torch_band(v1: bool, version: tuple[int, ...] | None) -> tuple[Interval, str]:
    """The non-torch band (before TP's NCCL term) by the rule the release measures it with
    (module docstring): the growth band for V0 0.7+ and V1 0.9.1+, + :data:`CUDA_CONTEXT` for V1
    before 0.9.1, the V0-before-0.7 band for 0.6.x; ``version`` not known: the hull of the
    engine's rules."""
    b = active_bands()
    growth, ctx = b.non_torch_growth, b.non_torch_growth + CUDA_CONTEXT
    src_g = "growth since the first snapshot (vllm/utils memory_profiling)"
    if v1:
        if version is None:
            return Interval(growth.low, ctx.high), f"V1 band: {src_g}, + the CUDA context before 0.9.1 (release not known)"
        if version < V1_PROFILER_FROM:
            return ctx, (f"V1 band: {src_g}, + the CUDA context (V1 before 0.9.1 counts all GPU memory in use "
                         "less torch's: vllm/v1/worker/gpu_worker.py determine_available_memory)")
        return growth, f"V1 band: {src_g}"
    if version is not None and version >= V0_PROFILER_FROM:
        return growth, f"V0 band: {src_g}"
    old, v064 = b.non_torch_v0, b.non_torch_v064
    if version is None:
        return (Interval(min(growth.low, old.low, v064.low), max(growth.high, old.high, v064.high)),
                "V0 band, 0.6.x or later rules (release not known)")
    if version < V065_RULE_FROM:
        return v064, ("V0 0.6.4 band (vllm/worker/worker.py determine_num_available_blocks: all GPU memory in "
                      "use less torch's allocation, the CUDA context included)")
    return old, ("V0 0.6.5-0.6.6 band (vllm/utils memory_profiling(baseline_memory_in_bytes=...): torch memory "
                 "other than the weights counted too)")


def non_torch_term(s: VllmSettings, release: Release | None = None, gpu_name: str | None = None) -> Term:
    """CUDA context growth, NCCL, cuBLAS: memory outside torch's allocator, by the release's
    rule (:func:`non_torch_band`); at TP ≥ 2 (or PP ≥ 2) the NCCL and custom all-reduce buffers
    of :func:`kvgate.engines.vllm.comm.tp_comm_term` for ``gpu_name``'s card class."""
    from kvgate.engines.vllm.comm import tp_comm_term  # noqa: PLC0415

    v, src = non_torch_band(s.v1, release.version if release is not None else None)
    src += " from tests/data/fit_logs"
    comm = tp_comm_term(s.tensor_parallel_size, s.pipeline_parallel_size, gpu_name)
    if comm is not None:
        v = v + comm.value
        src += f"; + {comm.source}"
    return Term("non-torch memory", v, src)


def cuda_graph_term(s: VllmSettings, recurrent: bool = False) -> Term:
    """The CUDA graph pool: 0 with ``--enforce-eager``; subtracted from the KV budget from
    0.20, else taken later from the memory the utilization leaves. ``recurrent``: the model
    has linear-attention or Mamba layers, whose estimate reaches :data:`HYBRID_GRAPH_HIGH`."""
    if s.enforce_eager:
        return Term("CUDA graph pool", Interval.point(0), "--enforce-eager: no graphs captured")
    b = active_bands()
    if s.cudagraph_pool_subtracted:
        if recurrent and b.cuda_graph_021.high < HYBRID_GRAPH_HIGH:
            v = Interval(b.cuda_graph_021.low, HYBRID_GRAPH_HIGH)
            return Term("CUDA graph pool", v, f"band of the logs' graph pools ({fmt_gib(v.low)} … {fmt_gib(v.high)}: "
                        "the top is vLLM's estimate on Qwen3.5-9B, for a model with linear-attention or Mamba "
                        "layers); subtracted from the KV budget (0.20+ estimate)")
        v = b.cuda_graph_021
        return Term("CUDA graph pool", v, f"band of the logs' graph pools ({fmt_gib(v.low)} … {fmt_gib(v.high)}); "
                    "subtracted from the KV budget (0.20+ estimate)")
    return Term("CUDA graph pool", b.cuda_graph, "band of two logs (0.13, 1.62 GiB); captured after the KV cache, "
                "out of the memory --gpu-memory-utilization leaves", counted=False)


def vllm_terms(s: VllmSettings, w: Widths, weights: Term, release: Release | None = None,
               config: dict[str, Any] | None = None, gpu_name: str | None = None,
               dtype: str | None = None, full: dict[str, Any] | None = None,
               recurrent: bool = False) -> list[Term]:
    """Every non-KV term for ``s`` under ``release`` (``config``: the model's, for V1's hidden
    size; ``dtype``: the one vLLM runs it in, else the config's; ``gpu_name``: the card, for the
    NCCL band at TP ≥ 2; ``full``: the whole config.json, for the encoder of a multimodal model;
    ``recurrent``: the model has linear-attention or Mamba layers, for the CUDA graph band):
    weights, activation peak, non-torch, CUDA graph pool."""
    return [weights, activation_term(s, w, release, config, dtype, full), non_torch_term(s, release, gpu_name),
            cuda_graph_term(s, recurrent)]


def requested_memory(cuda_total: Interval, util: float) -> Interval:
    """``total × gpu_memory_utilization`` (``request_memory`` in gpu_worker.py), floored."""
    u = Fraction(str(util))
    return Interval(int(cuda_total.low * u), int(cuda_total.high * u))
