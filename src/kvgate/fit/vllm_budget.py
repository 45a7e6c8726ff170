"""vLLM's non-KV memory budget, term by term, each an interval with its source.

vLLM sizes its KV cache pool per GPU as (``vllm/v1/worker/gpu_worker.py``
``Worker.determine_available_memory``, 0.8 … 0.24; V0 ``vllm/worker/worker.py``
``determine_num_available_blocks``, 0.6.5 … 0.10, same ``memory_profiling`` in
``vllm/utils``)::

    available KV = total × gpu_memory_utilization
                   − (weights + activation peak of the profile run + non-torch memory)
                   − CUDA graph pool estimate            (0.21 and later, unless eager)

with ``total`` the CUDA total of the GPU (:mod:`kvgate.fit.gpus`). ``--kv-cache-memory-bytes``
replaces the whole computation by its value.

Calibration (the interval rule, :mod:`kvgate.fit.calibrate`). Each non-KV band is the
smallest one that meets every printed value of the logs in ``tests/data/fit_logs/``
(manifest.json), each printed value carrying its printing precision (two decimals of GiB =
±5.12 MiB); the deployed :data:`BANDS` are that data band widened by a few hand margins
(written below) and never narrower (``tests/test_fit_calibration.py`` checks it):

- **Activation peak** ("torch peak memory increase"; V0 0.6.4's ``peak_torch_memory`` less
  the weights): ``T·w`` is the profile run's tokens (``max_num_batched_tokens``) times the
  per-token width of :mod:`kvgate.fit.widths`, ``S = max_num_seqs × vocab`` the sampler's
  logits. Band ``[K_LO·T·w + C_LO·S, K_HI·T·w + C_HI·S]``. ``K`` from the logs whose sampler
  is small (``4·S ≤ T·w/10``: Llama-3.1-8B 2.07 / 1.984 and 2.99 / 2.876 GiB, 0.6.4, RTX 3090)
  and the low ends of all: data [1.04, 1.05], deployed [1.03, 1.05]. ``C_HI``, bytes per
  logit above ``K_HI·T·w``: V0 25 (Qwen2.5-7B bitsandbytes, 0.7.3, 1.42 GiB at 4,096 tokens,
  256 sequences; Llama-3-8B 0.6.5 needs 14), V1 34 (gpt-oss-20b, 0.12, 1.83 GiB: fp32 logits,
  probabilities and a sort with int64 indices). ``C_LO`` is from the code,
  not the logs: 0 in V0, 4 B in V1 (the fp32 logits of the sampler's dummy run must exist).
- **Non-torch memory** (CUDA/NCCL/cuBLAS memory outside torch's allocator): printed V0
  0.03 … 1.79 GiB (0.03 GiB RTX 4060; 1.79 GiB on the 0.6.5 memory-profiling branch, H100;
  0.35 GiB RTX 3090; 0.25/0.30 GiB TP 2), V1 0.04 GiB. V1's upper end, 0.5 GiB, is not from a
  V1 log (only one prints the term) but V0's TP 1 values (0.16–0.35) with a margin (a prior).
- **CUDA graph pool**: before 0.21 (captured after the KV cache, not subtracted) printed
  0.13 GiB (Qwen3-0.6B, 0.8 V0, 67 sizes) and 1.62 GiB (Qwen3.5 GGUF hybrid, 0.18); from
  0.21 (estimated and subtracted) 0.17 GiB (estimate, TP 4) and 0.09 GiB (actual, TP 2,
  RTX 5090), and the band holds the earlier values too (the graphs are the same graphs);
  0 with ``--enforce-eager``. Not modelled from widths.
- **Weights**: "Model loading took" is the torch allocation of the loaded checkpoint:
  Llama-3.1-8B reads 16,060,522,496 B of safetensors and vLLM prints 14.9888 GiB
  (+0.2%); repacked quantized formats add more (gpt-oss MXFP4). Band on a checkpoint's
  bytes split over TP × PP ranks: [1.00, 1.08]; on an estimate from config.json:
  [0.85, 1.15].

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

from kvgate.fit.interval import Interval, Term
from kvgate.fit.vllm_flags import VllmSettings
from kvgate.fit.widths import Widths

GiB = 2**30
MiB = 2**20


@dataclass(frozen=True)
class Bands:
    """The calibrated non-KV bands (module docstring).

    Attributes:
        k: ``(K_LO, K_HI)``, multiples of the profile run's ``T·w`` bytes.
        c_v0, c_v1: ``(C_LO, C_HI)``, bytes per sampler logit, V0 and V1.
        non_torch_v0, non_torch_v1: non-torch memory, bytes.
        cuda_graph: the CUDA graph pool before 0.21 (not subtracted), bytes.
        cuda_graph_021: the CUDA graph pool from 0.21 (estimated and subtracted), bytes.
    """

    k: tuple[Fraction, Fraction]
    c_v0: tuple[int, int]
    c_v1: tuple[int, int]
    non_torch_v0: Interval
    non_torch_v1: Interval
    cuda_graph: Interval
    cuda_graph_021: Interval

    def to_dict(self) -> dict[str, Any]:
        return {"k": [float(x) for x in self.k], "c_v0": list(self.c_v0), "c_v1": list(self.c_v1),
                "non_torch_v0": self.non_torch_v0.to_dict(), "non_torch_v1": self.non_torch_v1.to_dict(),
                "cuda_graph": self.cuda_graph.to_dict(), "cuda_graph_021": self.cuda_graph_021.to_dict()}


#: the deployed bands: the data bands of tests/data/fit_logs widened by the hand margins of the
#: module docstring (K_LO 1.03 where the data give 1.04; V1 non-torch up to 0.5 GiB)
BANDS = Bands(
    k=(Fraction(103, 100), Fraction(105, 100)),
    c_v0=(0, 25),      # bytes per logit of the sampler in the profile run, V0
    c_v1=(4, 34),      # V1: dummy_sampler_run
    non_torch_v0=Interval(25 * MiB, 1839 * MiB),   # 0.03 GiB − 5 MiB … 1.79 GiB + 5 MiB
    non_torch_v1=Interval(35 * MiB, 512 * MiB),    # 0.04 GiB − 5 MiB … V0's TP=1 RTX 3090 0.35 GiB + margin
    cuda_graph=Interval(128 * MiB, 1664 * MiB),    # 0.13 … 1.62 GiB, ± printing
    cuda_graph_021=Interval(87 * MiB, 1664 * MiB),  # 0.09 (0.21+) … 1.62 GiB, ± printing
)
#: code-derived floors of the sampler band (not from logs)
C_LO = {False: BANDS.c_v0[0], True: BANDS.c_v1[0]}
K_LO, K_HI = BANDS.k
WEIGHTS_FILE = (Fraction(1), Fraction(108, 100))
WEIGHTS_ESTIMATE = (Fraction(85, 100), Fraction(115, 100))
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


def weights_term(checkpoint_bytes: int, *, ranks: int, exact: bool, source: str) -> Term:
    """Weights per GPU from a whole checkpoint's bytes split over ``ranks`` (TP × PP)."""
    lo, hi = WEIGHTS_FILE if exact else WEIGHTS_ESTIMATE
    per = checkpoint_bytes // ranks
    return Term("weights", Interval.scaled(per, lo, hi),
                f"{source}, ÷ {ranks} rank(s), ×[{float(lo):.2f}, {float(hi):.2f}] ({'file' if exact else 'ESTIMATE'})")


def activation_term(s: VllmSettings, w: Widths) -> Term:
    """The activation peak of the profile run (module docstring)."""
    b = active_bands()
    k_lo, k_hi = b.k
    tw = s.max_num_batched_tokens * w.token_bytes
    c_lo, c_hi = b.c_v1 if s.v1 else b.c_v0
    logits = s.max_num_seqs * w.vocab
    v = Interval.scaled(tw, k_lo, k_hi) + Interval(c_lo * logits, c_hi * logits)
    src = (f"{s.max_num_batched_tokens:,} tokens × {w.token_bytes:,} B × [{float(k_lo):.2f}, {float(k_hi):.2f}]"
           f" + [{c_lo}, {c_hi}] B × {s.max_num_seqs} sequences × {w.vocab:,} vocab (sampler); "
           "calibrated on tests/data/fit_logs")
    if w.multimodal:
        src += "; NOT COUNTED: the vision/audio encoder's profile (multimodal), which can be larger"
    return Term("activation peak (profile run)", v, src)


def non_torch_term(s: VllmSettings) -> Term:
    """CUDA context growth, NCCL, cuBLAS: memory outside torch's allocator."""
    b = active_bands()
    v = b.non_torch_v1 if s.v1 else b.non_torch_v0
    return Term("non-torch memory", v, f"{'V1' if s.v1 else 'V0'} band from tests/data/fit_logs")


def cuda_graph_term(s: VllmSettings) -> Term:
    """The CUDA graph pool: 0 with ``--enforce-eager``; subtracted from the KV budget from
    0.21, else taken later from the memory the utilization leaves."""
    if s.enforce_eager:
        return Term("CUDA graph pool", Interval.point(0), "--enforce-eager: no graphs captured")
    b = active_bands()
    if s.cudagraph_pool_subtracted:
        return Term("CUDA graph pool", b.cuda_graph_021, "band of the logs' graph pools (0.09 … 1.62 GiB); "
                    "subtracted from the KV budget (0.21+ estimate)")
    return Term("CUDA graph pool", b.cuda_graph, "band of two logs (0.13, 1.62 GiB); captured after the KV cache, "
                "out of the memory --gpu-memory-utilization leaves", counted=False)


def vllm_terms(s: VllmSettings, w: Widths, weights: Term) -> list[Term]:
    """Every non-KV term for ``s``: weights, activation peak, non-torch, CUDA graph pool."""
    return [weights, activation_term(s, w), non_torch_term(s), cuda_graph_term(s)]


def requested_memory(cuda_total: Interval, util: float) -> Interval:
    """``total × gpu_memory_utilization`` (``request_memory`` in gpu_worker.py), floored."""
    u = Fraction(str(util))
    return Interval(int(cuda_total.low * u), int(cuda_total.high * u))
