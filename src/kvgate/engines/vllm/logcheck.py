"""Check ``kvgate fit``'s vLLM intervals against real startup logs.

Input: a ``manifest.json`` of logs with every printed memory term (the format of
``tests/data/fit_logs/manifest.json``) and a ``fit_inputs.json`` naming, per log, the model
config, GPU, release and engine (or why the log cannot be checked). Weights come from the
log's own weights line, so what is checked is the rest: the GPU's CUDA total, the
activation peak, non-torch memory, the CUDA graph rule, and the pool→tokens geometry.

Weights come from the log's own weights line; where a log has none, ``fit_inputs.json`` may
give them instead, labelled: ``{"estimate_dtype": ...}`` (kvgate's estimate from the config,
:func:`kvgate.model.weights.estimate_weight_bytes`, with the estimate band of
:func:`kvgate.engines.vllm.budget.weights_term`) or ``{"from_log": FILE}`` (the weights line of
another log of the same checkpoint). The GPU is a name of :mod:`kvgate.fit.gpus`, a list of
names (the hull of their CUDA totals, for a GPU known only by its class), or the CUDA total
the log prints (``"cuda_total_printed": "total_gpu_memory (8.00GiB)"``, which must be in the
file).

A log is **inside** when its printed "Available KV cache memory" (or, when only that is
printed, "GPU KV cache size" tokens, or "# GPU blocks") lies in the predicted interval. Printed values carry
their printing precision (``53.29GiB`` is 53.29 ± 0.005 GiB: vLLM formats the pool with
``{:.2f}`` in ``gpu_worker.py``, so any pool in [53.285, 53.295) GiB prints so); a printed pool
is inside when that interval meets the predicted one, on either side (:attr:`LogCase.printed_range`),
and a miss is measured from the nearer edge of it. Token and block counts are exact.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.engines.vllm.budget import plain_estimate, weights_term
from kvgate.engines.vllm.fit import fit_vllm
from kvgate.engines.vllm.flags import build_flags
from kvgate.engines.vllm.quantization import online_fp8_weight_bytes, online_quantization
from kvgate.errors import KvgateError
from kvgate.fit.gpus import Gpu, lookup_gpu
from kvgate.fit.interval import Interval, Term
from kvgate.fit.release import Release, parse_version
from kvgate.fit.widths import is_multimodal, model_widths
from kvgate.model import ModelSpec, load_model
from kvgate.model.weights import estimate_weight_bytes, raw_config
from kvgate.units import GiB

_NUM = re.compile(r"(-?\d+(?:\.\d+)?)\s*(GiB|GB)?")

#: the terms each log prints that informed the bands of kvgate.engines.vllm.budget
TERM_FIELDS = ("torch_peak", "non_torch_memory", "cuda_graph_pool")


def printed_bytes(text: str) -> Interval:
    """A printed GiB figure (``"53.29GiB"``, ``"kv_cache_size=3.81GiB"``, ``"14.9888 GB"``,
    ``"-2.14 GiB"``) as the byte interval its decimals allow. vLLM's "GB" is 2^30
    (tests/data/fit_logs/SOURCES.md).

    Raises:
        ValueError: no number in ``text``.
    """
    t = text.split("=", 1)[-1]
    m = _NUM.search(t)
    if not m:
        raise ValueError(f"no number in {text!r}")
    num = m.group(1)
    d = Decimal(num)
    places = len(num.split(".")[1]) if "." in num else 0
    half = Decimal(5) / Decimal(10) ** (places + 1)
    return Interval(int((d - half) * GiB), int((d + half) * GiB))


def meets(predicted: Interval, printed: Interval) -> bool:
    """A printed figure known to ``printed`` (its printing precision) is inside ``predicted``
    when the two intervals share a point: the pool it stands for may be anywhere in it."""
    return printed.high >= predicted.low and printed.low <= predicted.high


def miss_gap(predicted: Interval, printed: Interval) -> int:
    """How far ``printed`` lies outside ``predicted`` (bytes from the nearer edge; > 0 above,
    < 0 below, 0 inside)."""
    if printed.low > predicted.high:
        return printed.low - predicted.high
    if printed.high < predicted.low:
        return printed.high - predicted.low
    return 0


#: what vllm/v1/sample/ops/topk_topp_sampler.py logs at startup (0.8 ...): FlashInfer's sampler or not
SAMPLER_LINES = (("Using FlashInfer for top-p & top-k sampling", True),
                 ("FlashInfer is not available. Falling back to the PyTorch-native", False),
                 ("FlashInfer is available, but it is not enabled", False))


def sampler_from_log(text: str) -> bool | None:
    """Whether a vLLM log's run samples with FlashInfer (:data:`SAMPLER_LINES`); ``None``: the
    log does not say."""
    for line, fi in SAMPLER_LINES:
        if line in text:
            return fi
    return None


_QUANT_FLAG = (re.compile(r"non-default args: \{.*?'quantization': '([^']+)'"),
               re.compile(r"(?:vllm serve|vllm\.entrypoints\S*)\s.*?(?:--quantization[= ]|\s-q\s)([A-Za-z0-9_\-]+)"))


def quantization_from_log(text: str) -> str | None:
    """The ``--quantization`` a vLLM log's run was started with, as the user gave it: the
    non-default args line's ``'quantization': 'fp8'`` (``vllm/entrypoints/utils.py`` logs the
    arguments that differ from the defaults) or a ``vllm serve ... --quantization fp8`` command
    in the log; ``None`` when neither says one. The engine-config line's ``quantization=fp8`` is
    not read: it is the method vLLM resolved, the checkpoint's own for a quantized checkpoint."""
    for rx in _QUANT_FLAG:
        m = rx.search(text)
        if m:
            return m.group(1)
    return None


def printed_int(text: str) -> int:
    """``"158,656"`` → 158656."""
    return int(str(text).replace(",", ""))


@dataclass
class LogCase:
    """One log's check: the printed figure, the predicted interval, inside or not."""

    file: str
    release: str
    model: str
    gpu: str
    quantity: str  # "available KV bytes" or "GPU KV cache tokens"
    printed: int | None
    predicted: Interval | None
    inside: bool | None
    skip: str | None = None
    terms: dict[str, Any] = field(default_factory=dict)
    presumed: list[str] = field(default_factory=list)
    weights_from: str = "log"
    #: the bytes the printed figure stands for at its printing precision (``printed`` is its middle)
    printed_range: Interval | None = None

    def to_dict(self) -> dict[str, Any]:
        return {"file": self.file, "release": self.release, "model": self.model, "gpu": self.gpu,
                "quantity": self.quantity, "printed": self.printed,
                "predicted": self.predicted.to_dict() if self.predicted else None,
                "width": self.predicted.width if self.predicted else None, "inside": self.inside,
                "skip": self.skip, "terms": self.terms, "presumed": self.presumed, "weights_from": self.weights_from,
                "printed_range": self.printed_range.to_dict() if self.printed_range else None}


def presumed_settings(entry: dict[str, Any]) -> list[str]:
    """The settings of a manifest entry that scale the whole pool but were not printed:
    ``--gpu-memory-utilization`` (multiplies the GPU) when the log and command do not show
    it (the manifest leaves it null or lists it under ``inferred``)."""
    inferred = entry.get("inferred") or {}
    if entry.get("gpu_memory_utilization") is None or "gpu_memory_utilization" in inferred:
        return ["gpu_memory_utilization (vLLM default presumed, not printed)"]
    return []


def check_logs(folder: str | Path, only: str | None = None, *, weights: str = "given") -> list[LogCase]:
    """Every vLLM log of ``folder/manifest.json`` with ``folder/fit_inputs.json``: its check
    (``only``: that one file's). ``weights="estimate"``: every case takes kvgate's own weight
    estimate from its config (the dtype ``fit_inputs.json`` names for an estimate, else the
    config's, and its ``quantization_config``) instead of the log's line: what ``kvgate fit``
    answers without the checkpoint's files.

    Raises:
        KvgateError: unreadable files; a case naming an unknown GPU or model.
    """
    folder = Path(folder)
    manifest = read_json(folder / "manifest.json", what="fit log manifest")
    inputs = read_json(folder / "fit_inputs.json", what="fit inputs")["cases"]
    out = []
    for e in manifest:
        if e["engine"] != "vllm" or (only is not None and e["file"] != only):
            continue
        inp = inputs.get(e["file"], {"skip": "no entry in fit_inputs.json"})
        if "skip" in inp:
            out.append(LogCase(e["file"], e["release_series"], e["model"], str(e["gpu_type"]), "-", None, None, None,
                               skip=inp["skip"]))
            continue
        if weights == "estimate":
            inp = {**inp, "weights": {"estimate_dtype": (inp.get("weights") or {}).get("estimate_dtype")}}
        out.append(_check(folder, e, inp))
    return out


def _model(folder: Path, ref: str) -> ModelSpec:
    """A preset name, or a config file relative to ``folder`` (``configs/x.json``, ``../configs/x.json``)."""
    return load_model(folder / ref if ref.endswith(".json") else ref)


def _gpu(folder: Path, e: dict[str, Any], inp: dict[str, Any]) -> Gpu:
    """The GPU of a case: the log's printed CUDA total, the hull of a class of cards, or one card.

    Raises:
        KvgateError: a printed total that is not in the log; an unknown GPU name.
    """
    printed = inp.get("cuda_total_printed")
    if printed:
        if printed not in (folder / e["file"]).read_text(encoding="utf-8"):
            raise KvgateError(f"{e['file']}: cuda_total_printed {printed!r} is not in the log")
        total = printed_bytes(printed)
        return Gpu(str(inp.get("gpu", "printed total")), total.high, total, f"CUDA total printed by the log: {printed}")
    names = inp["gpu"] if isinstance(inp["gpu"], list) else [inp["gpu"]]
    gpus = [lookup_gpu(n) for n in names]
    if len(gpus) == 1:
        return gpus[0]
    hull = Interval(min(g.cuda_total.low for g in gpus), max(g.cuda_total.high for g in gpus))
    return Gpu(" or ".join(g.name for g in gpus), max(g.nvml_total_bytes for g in gpus), hull,
               "hull of the CUDA totals of " + ", ".join(g.name for g in gpus))


def _weights(folder: Path, e: dict[str, Any], inp: dict[str, Any], model: ModelSpec, ranks: int) -> tuple[Term, str]:
    """The weights term of a case and where it comes from (``log``, ``estimate``, ``other log``).

    Raises:
        KvgateError: no weights line and no ``weights`` in the case.
    """
    w = inp.get("weights")
    if w is None:
        if not e.get("weights"):
            raise KvgateError(f"{e['file']}: no weights line and no 'weights' in fit_inputs.json")
        return Term("weights", printed_bytes(e["weights"]), "printed by the log"), "log"
    if "from_log" in w:
        other = {x["file"]: x for x in read_json(folder / "manifest.json", what="fit log manifest")}[w["from_log"]]
        return Term("weights", printed_bytes(other["weights"]), f"printed by {w['from_log']} (same checkpoint)"), "other log"
    ref = inp["model"]
    cfg = model.config or {}
    # the file as published: a wrapper (Gemma 4, Qwen-VL) holds quantization_config above its text config
    raw = raw_config(folder / ref) if ref.endswith(".json") else None
    if online_quantization(quantization_from_log((folder / e["file"]).read_text(encoding="utf-8")),
                           raw or cfg) == "fp8":
        dt = e.get("dtype")
        fp8 = online_fp8_weight_bytes(cfg, None if dt in (None, "auto") else str(dt))
        return (weights_term(fp8.bytes, ranks=ranks, exact=False,
                             source=f"ESTIMATE from the config under vLLM's online FP8 ({fp8.params:,} parameters; "
                                    "the log's --quantization fp8)"), "estimate")
    wb = estimate_weight_bytes(cfg, w.get("estimate_dtype"), raw=raw)
    mm = is_multimodal(folder / ref) if ref.endswith(".json") else False
    plain = plain_estimate(model.config or {}, multimodal=mm, dtype_override=w.get("estimate_dtype"))
    return (weights_term(wb.bytes, ranks=ranks, exact=False, plain=plain,
                         source=f"ESTIMATE from the config ({wb.params:,} parameters × {w.get('estimate_dtype') or 'config dtype'})"),
            "estimate")


def _hull(parts: list[Interval]) -> Interval:
    return Interval(min(p.low for p in parts), max(p.high for p in parts))


def _check(folder: Path, e: dict[str, Any], inp: dict[str, Any]) -> LogCase:
    """One case; a list of GPUs (a card known only by its class) is checked card by card and
    the hull of the intervals kept, since vLLM's defaults depend on the card (its name or
    total: :func:`kvgate.engines.vllm.flags.resolve_vllm_flags`)."""
    names = inp.get("gpu")
    if isinstance(names, list) and len(names) > 1 and not inp.get("cuda_total_printed"):
        cases = [_check(folder, e, {**inp, "gpu": n}) for n in names]
        c0 = cases[0]
        assert c0.predicted is not None and c0.printed is not None
        pred = _hull([c.predicted for c in cases if c.predicted is not None])
        terms = dict(c0.terms)
        for name in c0.terms:
            if name != "profile" and not name.startswith("printed "):
                terms[name] = _hull([Interval(c.terms[name]["low"], c.terms[name]["high"]) for c in cases]).to_dict()
        return LogCase(e["file"], c0.release, c0.model, " or ".join(c.gpu for c in cases), c0.quantity, c0.printed,
                       pred, meets(pred, c0.printed_range or Interval.point(c0.printed)), terms=terms,
                       presumed=c0.presumed, weights_from=c0.weights_from, printed_range=c0.printed_range)
    return _check_one(folder, e, inp)


def _check_one(folder: Path, e: dict[str, Any], inp: dict[str, Any]) -> LogCase:
    ref = inp["model"]
    model = _model(folder, ref)
    gpu = _gpu(folder, e, inp)
    rel = Release("vllm", inp["release"], parse_version(inp["release"]), "given (fit_inputs.json)")
    tp, pp = e.get("tp") or 1, e.get("pp") or 1
    weights, weights_from = _weights(folder, e, inp, model, tp * pp)
    w = weights.value
    kvd = e.get("kv_cache_dtype") or "auto"
    flags = build_flags(gpu_memory_utilization=e.get("gpu_memory_utilization"), max_model_len=e.get("max_model_len"),
                      max_num_seqs=e.get("max_num_seqs"), max_num_batched_tokens=e.get("max_num_batched_tokens"),
                      tensor_parallel_size=tp, pipeline_parallel_size=pp,
                      kv_cache_dtype=kvd, enforce_eager=bool(e.get("enforce_eager")), use_v1=inp.get("use_v1"),
                      flashinfer_sampler=sampler_from_log((folder / e["file"]).read_text(encoding="utf-8")))
    a = fit_vllm(model, weights, gpu, flags, rel)
    presumed = presumed_settings(e) + list(inp.get("presumed", []))
    if weights_from != "log":
        presumed.append(f"weights: {weights.source}")
    terms = {t.name: t.value.to_dict() for t in a.terms}
    for f in TERM_FIELDS:
        if e.get(f):
            v = printed_bytes(str(e[f]))
            if f == "torch_peak" and str(e[f]).startswith("peak_torch_memory="):
                v = v - w  # V0 0.6.4 prints the absolute torch peak, weights included
            terms[f"printed {f}"] = v.to_dict()
    s = a.settings
    wd = model_widths(model.config or {}, tp)
    terms["profile"] = {"tokens": int(s["max_num_batched_tokens"]), "seqs": int(s["max_num_seqs"]),
                        "max_model_len": int(s["max_model_len"]), "v1": bool(s.get("v1")),
                        "tp": tp, "eager": bool(e.get("enforce_eager")), "token_bytes": wd.token_bytes, "vocab": wd.vocab}
    if e.get("available_kv_cache_memory"):
        p = printed_bytes(e["available_kv_cache_memory"])
        mid = (p.low + p.high) // 2
        return LogCase(e["file"], inp["release"], model.name, gpu.name, "available KV bytes", mid, a.kv_pool,
                       meets(a.kv_pool, p), terms=terms, presumed=presumed, weights_from=weights_from, printed_range=p)
    pred = Interval(int(a.tokens["low"] or 0), int(a.tokens["high"] or 0))
    if e.get("gpu_kv_cache_tokens"):
        tok = printed_int(e["gpu_kv_cache_tokens"])
        return LogCase(e["file"], inp["release"], model.name, gpu.name, "GPU KV cache tokens", tok, pred,
                       pred.contains(tok), terms=terms, presumed=presumed, weights_from=weights_from)
    # "# GPU blocks: N" only (V0, V1 before 0.8): blocks of block_size tokens, one KV group
    blocks, bs = printed_int(e["gpu_blocks"]), int(s["block_size"])
    pb = Interval(pred.low // bs, pred.high // bs)
    return LogCase(e["file"], inp["release"], model.name, gpu.name, "GPU blocks", blocks, pb, pb.contains(blocks),
                   terms=terms, presumed=presumed, weights_from=weights_from)
