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

Calibration (the interval rule). Constants below are the smallest ratio bands that hold
every printed value of these logs in ``tests/data/fit_logs/`` (manifest.json), widened by
the printing precision (two decimals of GiB = ±5.12 MiB):

- **Activation peak** ("torch peak memory increase"; V0 0.6.4's ``peak_torch_memory`` less
  the weights): ``T·w`` is the profile run's tokens (``max_num_batched_tokens``) times the
  per-token width of :mod:`kvgate.fit.widths`, ``S = max_num_seqs × vocab`` the sampler's
  logits. Band ``[K_LO·T·w + C_LO·S, K_HI·T·w + C_HI·S]``. Printed (GiB) and ``T·w``:
  Llama-3-8B 1.26 / 0.812 (0.6.5, H100, 8192 tokens, 256 sequences); Llama-3.1-8B 2.07 / 1.984
  and 2.99 / 2.876 (0.6.4, RTX 3090, 20000 and 29000 tokens); Qwen3-0.6B 0.23 / 0.219 (0.8 V0);
  Qwen2.5-32B TP2 1.26 / 0.935 (0.7 V0, 10000 tokens); gpt-oss-20b 1.83 / 0.206 (0.12 V1, 2048
  tokens, 256 sequences, 201,088 words). The ratio printed / ``T·w`` is 1.04–1.05 where the
  sampler is small, so ``K_LO`` = 1.03 and ``K_HI`` = 1.05; what is left above ``K_HI·T·w``,
  per logit, is at most 13.5 B in V0 (Llama-3-8B, 0.6.5) and 33.7 B in V1 (gpt-oss-20b: fp32
  logits, probabilities and a sort with int64 indices): ``C_HI`` = 14 (V0), 34 (V1). ``C_LO``
  is 0 in V0 and 4 B in V1 (the fp32 logits of the sampler's dummy run must exist).
- **Non-torch memory** (CUDA/NCCL/cuBLAS memory outside torch's allocator): printed V0
  0.16 … 1.79 GiB (1.79 GiB on the 0.6.5 memory-profiling branch, H100; 0.35 GiB RTX 3090;
  0.30 GiB TP 2), V1 0.04 GiB (0.12). V1's band is [0.04 − 0.005, 0.5] GiB: its upper end is
  not from a V1 log (only one prints the term) but V0's TP 1 values (0.16–0.35) with a margin.
- **CUDA graph pool**: printed 0.13 GiB (Qwen3-0.6B, 0.8 V0, 67 sizes) and 1.62 GiB
  (Qwen3.5 GGUF hybrid, 0.18); 0 with ``--enforce-eager``. Not modelled from widths: the
  band spans the two logs.
- **Weights**: "Model loading took" is the torch allocation of the loaded checkpoint:
  Llama-3.1-8B reads 16,060,522,496 B of safetensors and vLLM prints 14.9888 GiB
  (+0.2%); repacked quantized formats add more (gpt-oss MXFP4). Band on a checkpoint's
  bytes split over TP × PP ranks: [1.00, 1.08]; on an estimate from config.json:
  [0.85, 1.15].

Nine vLLM logs print enough to check the pool (``tests/data/fit_logs/fit_inputs.json`` says
why the others cannot be checked); the table of every log, its interval and its width is made
by ``benchmarks/fit_logs_table.py`` (``benchmarks/RESULTS.md``). Six of the nine set the bands
above (in-sample); three print only their pool and were only checked.
"""

from __future__ import annotations

from fractions import Fraction

from kvgate.fit.interval import Interval, Term
from kvgate.fit.vllm_flags import VllmSettings
from kvgate.fit.widths import Widths

GiB = 2**30
MiB = 2**20
K_LO = Fraction(103, 100)
K_HI = Fraction(105, 100)
C_V0 = (0, 14)  # bytes per logit of the sampler in the profile run, V0
C_V1 = (4, 34)  # V1: dummy_sampler_run
NON_TORCH_V0 = Interval(150 * MiB, 1838 * MiB)  # 0.16 GiB − 5 MiB … 1.79 GiB + 5 MiB
NON_TORCH_V1 = Interval(35 * MiB, 512 * MiB)     # 0.04 GiB − 5 MiB … V0's TP=1 RTX 3090 0.35 GiB + margin
CUDA_GRAPH = Interval(128 * MiB, 1664 * MiB)     # 0.13 … 1.62 GiB, ± printing
WEIGHTS_FILE = (Fraction(1), Fraction(108, 100))
WEIGHTS_ESTIMATE = (Fraction(85, 100), Fraction(115, 100))

SOURCE = "vllm/v1/worker/gpu_worker.py determine_available_memory; band calibrated on tests/data/fit_logs"


def weights_term(checkpoint_bytes: int, *, ranks: int, exact: bool, source: str) -> Term:
    """Weights per GPU from a whole checkpoint's bytes split over ``ranks`` (TP × PP)."""
    lo, hi = WEIGHTS_FILE if exact else WEIGHTS_ESTIMATE
    per = checkpoint_bytes // ranks
    return Term("weights", Interval.scaled(per, lo, hi),
                f"{source}, ÷ {ranks} rank(s), ×[{float(lo):.2f}, {float(hi):.2f}] ({'file' if exact else 'ESTIMATE'})")


def activation_term(s: VllmSettings, w: Widths) -> Term:
    """The activation peak of the profile run (module docstring)."""
    tw = s.max_num_batched_tokens * w.token_bytes
    c_lo, c_hi = C_V1 if s.v1 else C_V0
    logits = s.max_num_seqs * w.vocab
    v = Interval.scaled(tw, K_LO, K_HI) + Interval(c_lo * logits, c_hi * logits)
    src = (f"{s.max_num_batched_tokens:,} tokens × {w.token_bytes:,} B × [{float(K_LO):.2f}, {float(K_HI):.2f}]"
           f" + [{c_lo}, {c_hi}] B × {s.max_num_seqs} sequences × {w.vocab:,} vocab (sampler); "
           "calibrated on tests/data/fit_logs")
    if w.multimodal:
        src += "; NOT COUNTED: the vision/audio encoder's profile (multimodal), which can be larger"
    return Term("activation peak (profile run)", v, src)


def non_torch_term(s: VllmSettings) -> Term:
    """CUDA context growth, NCCL, cuBLAS: memory outside torch's allocator."""
    v = NON_TORCH_V1 if s.v1 else NON_TORCH_V0
    return Term("non-torch memory", v, f"{'V1' if s.v1 else 'V0'} band from tests/data/fit_logs")


def cuda_graph_term(s: VllmSettings) -> Term:
    """The CUDA graph pool: 0 with ``--enforce-eager``; subtracted from the KV budget from
    0.21, else taken later from the memory the utilization leaves."""
    if s.enforce_eager:
        return Term("CUDA graph pool", Interval.point(0), "--enforce-eager: no graphs captured")
    note = ("subtracted from the KV budget (0.21+ estimate)" if s.cudagraph_pool_subtracted
            else "captured after the KV cache, out of the memory --gpu-memory-utilization leaves")
    return Term("CUDA graph pool", CUDA_GRAPH, f"band of two logs (0.13, 1.62 GiB); {note}",
                counted=s.cudagraph_pool_subtracted)


def vllm_terms(s: VllmSettings, w: Widths, weights: Term) -> list[Term]:
    """Every non-KV term for ``s``: weights, activation peak, non-torch, CUDA graph pool."""
    return [weights, activation_term(s, w), non_torch_term(s), cuda_graph_term(s)]


def requested_memory(cuda_total: Interval, util: float) -> Interval:
    """``total × gpu_memory_utilization`` (``request_memory`` in gpu_worker.py), floored."""
    u = Fraction(str(util))
    return Interval(int(cuda_total.low * u), int(cuda_total.high * u))
