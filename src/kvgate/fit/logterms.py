"""The non-KV memory terms a startup log printed, read as byte intervals.

``kvgate import-log`` / ``gate --engine-log`` read the KV pool itself
(:mod:`kvgate.engines.pool`); the what-if answers (:mod:`kvgate.fit.whatif`) also need the
terms the engine subtracted before it, to carry them over as measured values. Lines read
(vLLM's GiB are 2^30 bytes, printed with two or four decimals; each figure is the
interval its decimals leave, :func:`kvgate.engines.logtext.logged`):

- vLLM V0 0.6.4 (``vllm/worker/worker.py`` ``determine_num_available_blocks``):
  ``Memory profiling results: total_gpu_memory=23.58GiB … peak_torch_memory=17.06GiB …
  non_torch_memory=0.35GiB kv_cache_size=3.81GiB gpu_memory_utilization=0.90`` (the
  activation peak is ``peak_torch_memory`` less the weights);
- vLLM V0 0.6.5: one line per term, ``total_gpu_memory  79.22GiB``, ``model weights take
  14.96GiB``, ``non_torch_memory  1.79GiB``, ``PyTorch activation peak memory  1.26GiB``,
  ``available_kv_cache_memory  53.29GiB``;
- vLLM 0.7–0.10 (V0 ``worker.py``, V1 ``gpu_worker.py``): ``the current vLLM instance can
  use total_gpu_memory (44.42GiB) x gpu_memory_utilization (0.90) = 39.98GiB`` and ``model
  weights take 30.71GiB; non_torch_memory takes 0.30GiB; PyTorch activation peak memory
  takes 1.26GiB; the rest of the memory reserved for KV Cache is 7.71GiB.``;
- vLLM V1 0.11+ (``gpu_worker.py``, DEBUG): ``Free memory on device (43.91/44.4 GiB) on
  startup. Desired GPU memory utilization is (0.9, 39.96 GiB). Actual usage is 13.72 GiB
  for weight, 1.83 GiB for peak activation, 0.04 GiB for non-torch memory, and 0.0 GiB for
  CUDAGraph memory.``;
- CUDA graphs: ``Estimated CUDA graph memory: 1.62 GiB total`` (``gpu_model_runner.py``,
  0.18+) and ``Graph capturing finished in 2 secs, took 0.13 GiB`` (V0 ``model_runner.py``,
  V1 ``gpu_model_runner.py``);
- the V0/V1 engine: V1 prints from ``gpu_worker.py`` / ``EngineCore`` / ``V1 LLM engine``;
  V0 from ``worker.py`` / ``executor_base.py`` (``VLLM_USE_V1=0`` on 0.8–0.10 included).

llama.cpp: ``CUDA0 model buffer size = 5049.71 MiB`` and ``CUDA0 compute buffer size =
162.00 MiB`` (``llama-model-loader`` / ``llama-context.cpp``). SGLang: the weights line
``Load weight end. … avail mem=131.08 GB, mem usage=8.13 GB`` is read by
:mod:`kvgate.engines.sglang.log` already (its GB are 2^30 bytes).

Each term is the first printed value (rank 0 in a tensor-parallel log: every rank of one
startup prints the same split).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvgate.engines.logtext import GIB, MIB, Line, Logged, logged
from kvgate.fit.interval import Interval

_N = r"(\d+(?:\.\d+)?)"
_TOTAL = (re.compile(r"total_gpu_memory\s*[=(]?\s*" + _N + r"\s*GiB"),
          re.compile(r"Free memory on device \(" + _N + r"/" + _N + r" ?GiB\)"))
_UTIL = (re.compile(r"gpu_memory_utilization\s*[=(]?\s*" + _N), re.compile(r"Desired GPU memory utilization is \(" + _N))
_WEIGHTS = (re.compile(r"model weights take\s+" + _N + r"\s*GiB"), re.compile(_N + r" GiB for weight"))
_ACT = (re.compile(r"PyTorch activation peak memory(?: takes)?\s+" + _N + r"\s*GiB"),
        re.compile(_N + r" GiB for peak activation"))
_PEAK_TORCH = re.compile(r"peak_torch_memory=" + _N + r"GiB")
_NON_TORCH = (re.compile(r"non_torch_memory(?: takes)?\s*[= ]\s*" + _N + r"\s*GiB"),
              re.compile(_N + r" GiB for non-torch memory"))
_GRAPH = (re.compile(r"Estimated CUDA graph memory: " + _N + r" ?GiB"),
          re.compile(r"Graph capturing finished in .*?took " + _N + r" ?GiB"),
          re.compile(_N + r" GiB for CUDAGraph memory"))
_AVAIL = (re.compile(r"kv_cache_size=" + _N + r"GiB"), re.compile(r"available_kv_cache_memory\s+" + _N + r"\s*GiB"),
          re.compile(r"the rest of the memory reserved for KV Cache is " + _N + r"\s*GiB"))
_V1 = re.compile(r"gpu_worker\.py|EngineCore|V1 LLM engine|gpu_model_runner\.py")
_V0 = re.compile(r"\bworker\.py:\d+\]|executor_base\.py|\bmodel_runner\.py:\d+\]|Memory profiling results")
_LCPP_MODEL = re.compile(r"CUDA0 model buffer size\s*=\s*" + _N + r" MiB")
_LCPP_ANY_MODEL = re.compile(r"\b([A-Za-z][\w]*) model buffer size\s*=\s*" + _N + r" MiB")
_LCPP_OFFLOADED = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")
_LCPP_COMPUTE = re.compile(r"CUDA0 compute buffer size\s*=\s*" + _N + r" MiB")


def _iv(g: Logged) -> Interval:
    return Interval(g.low, g.high)


def _first(lines: list[Line], pats: tuple[re.Pattern[str], ...]) -> tuple[str, Line] | None:
    """The first figure (group 1) any of ``pats`` finds, and its line."""
    for ln in lines:
        for p in pats:
            m = p.search(ln.text)
            if m:
                return m.group(1), ln
    return None


@dataclass
class LoggedTerms:
    """What one startup printed besides its KV pool, each an :class:`Interval` of bytes
    (``None``: not printed).

    Attributes:
        total: the CUDA total vLLM multiplies by its utilization (``total_gpu_memory``).
        utilization: ``gpu_memory_utilization`` as printed, or ``None``.
        weights, activation, non_torch, cuda_graph: the terms vLLM subtracted (the graph
            pool: estimated or captured, whichever the log prints).
        available_kv: the KV budget from a V0 profiling line the pool reader does not read.
        v1: ``True`` (V1 engine lines), ``False`` (V0 lines), ``None`` (neither seen).
        model_buffer, compute_buffer: llama.cpp's ``CUDA0`` buffers.
        model_buffers: llama.cpp's model buffers on every device summed (``CPU_Mapped``,
            ``CUDA0``, ...; each device's first line): the loaded weights, wherever they are.
        offloaded: llama.cpp's ``offloaded N/M layers to GPU`` (``llama-model.cpp``
            ``load_tensors``: ``N = min(-ngl, n_layer + 1)`` of ``M = n_layer + 1``, the
            output layer counted), or ``None``.
        printed: each term's printed text, for the user.
    """

    total: Interval | None = None
    utilization: float | None = None
    weights: Interval | None = None
    activation: Interval | None = None
    non_torch: Interval | None = None
    cuda_graph: Interval | None = None
    available_kv: Interval | None = None
    v1: bool | None = None
    model_buffer: Interval | None = None
    compute_buffer: Interval | None = None
    model_buffers: Interval | None = None
    offloaded: tuple[int, int] | None = None
    printed: dict[str, str] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for k in ("total", "weights", "activation", "non_torch", "cuda_graph", "available_kv", "model_buffer",
                  "compute_buffer", "model_buffers"):
            v = getattr(self, k)
            out[k] = v.to_dict() if v is not None else None
        out.update(utilization=self.utilization, v1=self.v1, printed=dict(self.printed))
        if self.offloaded is not None:
            out["offloaded_layers"] = {"on_gpu": self.offloaded[0], "of": self.offloaded[1]}
        return out


def vllm_logged_terms(lines: list[Line], weights: Logged | None = None) -> LoggedTerms:
    """The non-KV terms of one vLLM startup (module docstring for the lines).

    Args:
        lines: the startup's logical lines (:func:`kvgate.engines.startups.select_startup`).
        weights: the pool reader's "Model loading took" figure, used when no profiling line
            gives the weights.
    """
    t = LoggedTerms()
    hit = _first(lines, _TOTAL)
    if hit:
        num = hit[0]
        m = _TOTAL[1].search(hit[1].text)
        if m:
            num = m.group(2)
        t.total, t.printed["total"] = _iv(logged(num, GIB, "GiB")), f"{num} GiB"
    hit = _first(lines, _UTIL)
    if hit:
        t.utilization = float(hit[0])
    for name, pats in (("weights", _WEIGHTS), ("activation", _ACT), ("non_torch", _NON_TORCH),
                       ("cuda_graph", _GRAPH), ("available_kv", _AVAIL)):
        hit = _first(lines, pats)
        if hit:
            setattr(t, name, _iv(logged(hit[0], GIB, "GiB")))
            t.printed[name] = f"{hit[0]} GiB at line {hit[1].number}"
    if t.weights is None and weights is not None:
        t.weights, t.printed["weights"] = _iv(weights), weights.text
    if t.activation is None and t.weights is not None:
        hit = _first(lines, (_PEAK_TORCH,))
        if hit:  # V0 0.6.4 prints the absolute torch peak, weights included
            peak = _iv(logged(hit[0], GIB, "GiB"))
            t.activation = peak - t.weights
            t.printed["activation"] = f"peak_torch_memory {hit[0]} GiB − weights at line {hit[1].number}"
    text = "\n".join(ln.text for ln in lines)
    t.v1 = True if _V1.search(text) else (False if _V0.search(text) else None)
    return t


def llamacpp_logged_terms(lines: list[Line]) -> LoggedTerms:
    """llama.cpp's ``CUDA0 model buffer size`` and ``CUDA0 compute buffer size``, MiB, and
    its ``offloaded N/M layers to GPU``."""
    t = LoggedTerms()
    for name, pat in (("model_buffer", _LCPP_MODEL), ("compute_buffer", _LCPP_COMPUTE)):
        hit = _first(lines, (pat,))
        if hit:
            setattr(t, name, _iv(logged(hit[0], MIB, "MiB")))
            t.printed[name] = f"{hit[0]} MiB at line {hit[1].number}"
    for ln in lines:
        m = _LCPP_OFFLOADED.search(ln.text)
        if m:
            t.offloaded = (int(m.group(1)), int(m.group(2)))
            t.printed["offloaded"] = f"offloaded {m.group(1)}/{m.group(2)} layers at line {ln.number}"
            break
    seen: dict[str, tuple[Interval, str]] = {}
    for ln in lines:  # ``llama-model.cpp`` ``load_tensors``: one line per buffer type
        m = _LCPP_ANY_MODEL.search(ln.text)
        if m and m.group(1) not in seen:
            seen[m.group(1)] = (_iv(logged(m.group(2), MIB, "MiB")), f"{m.group(1)} {m.group(2)} MiB at line {ln.number}")
    if seen:
        vals = [v for v, _ in seen.values()]
        acc = vals[0]
        for v in vals[1:]:
            acc = acc + v
        t.model_buffers = acc
        t.printed["model_buffers"] = " + ".join(txt for _, txt in seen.values())
    return t
