"""The SGLang and llama.cpp logs of tests/data/fit_logs against kvgate fit's intervals.

    PYTHONPATH=src python benchmarks/fit_logs_other.py [tests/data/fit_logs]

Inputs: ``manifest.json`` (every printed term) and ``fit_inputs_other.json`` (model config,
GPU, release and, for llama.cpp, the run's flags). Printed two-decimal figures are read as
the byte interval their decimals allow; a log is inside when that interval meets the
predicted one.

- **SGLang**: the token pool (``max_total_num_tokens`` or ``KV Cache is allocated.
  #tokens``) against :func:`kvgate.engines.sglang.fit.fit_sglang` with the log's weights
  (``mem usage`` or the two ``avail mem`` lines) and its ``--mem-fraction-static`` if
  printed, else the release's default (:mod:`kvgate.engines.sglang.budget`). What is checked is
  the GPU's CUDA total, the memory taken at start (the init band) and the fraction rule.
  Leave-one-out: the init band rebuilt from the other logs' observed start memory (CUDA
  logs from CUDA logs; the one ROCm log has none to learn from).
- **llama.cpp**: the KV buffer on the GPU to the printed 0.01 MiB (exact geometry), and the
  compute buffer against :func:`kvgate.engines.llamacpp.fit.compute_buffer`. Leave-one-out:
  the band's two factors (0.9, 1.15) rebuilt from the other logs and the tiny-GGUF
  reserves (``benchmarks/results/llamacpp_compute_buffer.json``) as the extreme ratios of
  observed to phase estimate.
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from decimal import Decimal
from fractions import Fraction
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvgate.atomicio import read_json  # noqa: E402
from kvgate.engines.llamacpp.fit import LlamaCppFlags, _kv_on_gpu, compute_phases, kv_geometry  # noqa: E402
from kvgate.engines.sglang.fit import budget_fraction, fit_sglang, init_band  # noqa: E402
from kvgate.engines.sglang.flags import SglangFlags  # noqa: E402
from kvgate.fit.gpus import Gpu, gpu_from_total, lookup_gpu  # noqa: E402
from kvgate.fit.interval import Interval, Term  # noqa: E402
from kvgate.fit.release import Release, parse_version  # noqa: E402
from kvgate.model import ModelSpec, load_model, load_preset  # noqa: E402
from kvgate.units import parse_bytes  # noqa: E402

GiB, MiB = 2**30, 2**20
FOLDER = ROOT / "tests" / "data" / "fit_logs"
MEASURED = ROOT / "benchmarks" / "results" / "llamacpp_compute_buffer.json"
_NUM = re.compile(r"(-?\d+(?:\.\d+)?)\s*(GB|GiB|MiB)")


def printed(text: str) -> Interval:
    """A printed ``X.XX GB`` (SGLang: 2^30), ``GiB`` or ``MiB`` figure as the byte interval
    of its decimals (the last number with a unit in ``text``).

    Raises:
        ValueError: no figure with a unit.
    """
    found = _NUM.findall(text)
    if not found:
        raise ValueError(f"no figure in {text!r}")
    num, unit = found[-1]
    scale = MiB if unit == "MiB" else GiB
    places = len(num.split(".")[1]) if "." in num else 0
    d, half = Decimal(num), Decimal(5) / Decimal(10) ** (places + 1)
    return Interval(int((d - half) * scale), int((d + half) * scale))


def _tokens(entry: dict[str, Any]) -> int | None:
    for key in ("sglang_max_total_num_tokens", "sglang_kv_cache_allocated"):
        m = re.search(r"(?:max_total_num_tokens=|#tokens: )(\d+)", entry.get(key) or "")
        if m:
            return int(m.group(1))
    return None


def _model(ref: str, folder: Path) -> ModelSpec:
    return load_model(folder / ref) if ref.startswith("configs/") else load_preset(ref)


@dataclass
class Check:
    """One log's check: what was printed, the interval predicted in-sample and leave-one-out."""

    file: str
    engine: str
    release: str
    model: str
    gpu: str
    quantity: str
    printed: Interval | None = None
    predicted: Interval | None = None
    loo: Interval | None = None
    skip: str | None = None
    note: str = ""
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def inside(self) -> bool | None:
        """The printed interval meets the prediction."""
        if self.printed is None or self.predicted is None:
            return None
        return self.printed.high >= self.predicted.low and self.printed.low <= self.predicted.high

    @property
    def inside_loo(self) -> bool | None:
        if self.printed is None or self.loo is None:
            return None
        return self.printed.high >= self.loo.low and self.printed.low <= self.loo.high


# ---------------------------------------------------------------- SGLang


def _sglang_gpu(inp: dict[str, Any]) -> Gpu:
    return gpu_from_total(parse_bytes(inp["total"])) if "total" in inp else lookup_gpu(inp["gpu"])


_BEGIN = re.compile(r"Load weight begin\. avail mem=([\d.]+ GB)")
_END = re.compile(r"Load weight end\..*?avail mem=([\d.]+ GB)")


def _sglang_weights_and_free(e: dict[str, Any], text: str) -> tuple[Interval, Interval]:
    """(weights, free memory when loading began) as the log prints them (``mem usage``, or
    the ``avail mem`` of the two ``Load weight`` lines), each an interval."""
    b, a = _BEGIN.search(text), _END.search(text)
    after = printed(a.group(1)) if a else None
    begin = printed(b.group(1)) if b else None
    w = printed(e["weights"]) if e.get("weights") else None
    if w is None and begin is not None and after is not None:
        w = begin - after
    if begin is None and w is not None and after is not None:
        begin = after + w
    if w is None or begin is None:
        raise ValueError("the log prints neither 'mem usage' nor both avail lines")
    return w, begin


def observed_init(gpu: Gpu, begin: Interval) -> Interval:
    """Memory taken before the weights: CUDA total − free when loading began."""
    return gpu.cuda_total - begin


def _band_from(inits: list[Interval]) -> Interval:
    """The init band spanned by observed start memory, outward to 10 MiB."""
    step = 10 * MiB
    lo = min(i.low for i in inits) // step * step
    hi = -(-max(i.high for i in inits) // step) * step
    return Interval(max(0, lo), hi)


def sglang_checks(folder: Path = FOLDER) -> list[Check]:
    """Every SGLang log of the manifest checked (module docstring)."""
    manifest = read_json(folder / "manifest.json", what="fit log manifest")
    inputs = read_json(folder / "fit_inputs_other.json", what="fit inputs")["sglang"]
    out: list[Check] = []
    seen: list[tuple[Check, Interval, dict[str, Any]]] = []
    for e in manifest:
        if e["engine"] != "sglang":
            continue
        inp = inputs.get(e["file"], {"skip": "no entry in fit_inputs_other.json"})
        c = Check(e["file"], "sglang", e["release_series"], e["model"], str(e["gpu_type"]), "max_total_num_tokens")
        if "skip" in inp:
            c.skip = inp["skip"]
            out.append(c)
            continue
        model = _model(inp["model"], folder)
        gpu = _sglang_gpu(inp)
        tp = e.get("tp") or 1
        rel = Release("sglang", inp["release"], parse_version(inp["release"]), "given (fit_inputs_other.json)")
        w, begin = _sglang_weights_and_free(e, (folder / e["file"]).read_text(encoding="utf-8"))
        flags = SglangFlags(mem_fraction_static=e.get("mem_fraction_static"), tp_size=tp,
                            context_length=e.get("max_model_len"))
        a = fit_sglang(model, Term("weights", w, "printed by the log"), gpu, flags, rel,
                       multimodal=bool(inp.get("multimodal")))
        tok = _tokens(e)
        c.printed = Interval.point(tok) if tok is not None else None
        c.predicted = Interval(int(a.tokens["low"] or 0), int(a.tokens["high"] or 0))
        c.gpu = inp.get("gpu_name", gpu.name)
        init = observed_init(gpu, begin)
        c.extra = {"init_observed_mib": (round(init.low / MiB), round(init.high / MiB)),
                   "mem_fraction_static": a.settings["mem_fraction_static"],
                   "fraction_source": a.settings["defaults"].get("mem_fraction_static", "printed")}
        out.append(c)
        seen.append((c, init, {"model": model, "gpu": gpu, "tp": tp, "rel": rel, "w": w, "flags": flags,
                               "mm": bool(inp.get("multimodal")), "rocm": bool(inp.get("rocm"))}))
    for c, _, ctx in seen:  # leave one out: the init band from the other logs of the same platform
        others = [i for d, i, x in seen if d is not c and x["rocm"] == ctx["rocm"]]
        if not others:
            continue
        band = _band_from(others)
        f_lo, f_hi = budget_fraction(ctx["flags"].mem_fraction_static, ctx["rel"], ctx["gpu"], ctx["tp"], ctx["mm"])
        free = ctx["gpu"].cuda_total - band
        pool = Interval(int(free.low * f_lo), int(free.high * f_hi)) - ctx["w"]
        a = fit_sglang(ctx["model"], Term("weights", ctx["w"], "log"), ctx["gpu"], ctx["flags"], ctx["rel"],
                       multimodal=ctx["mm"])
        cell = a.request_bytes // a.settings["context_length"] if a.request_bytes else 0
        if cell:
            c.loo = Interval(max(0, pool.low) // cell, max(0, pool.high) // cell)
    return out


def sglang_init_observed(folder: Path = FOLDER) -> dict[str, Interval]:
    """Observed start memory per checked SGLang log (for the init band's calibration)."""
    return {c.file: Interval(c.extra["init_observed_mib"][0] * MiB, c.extra["init_observed_mib"][1] * MiB)
            for c in sglang_checks(folder) if c.extra}


# ---------------------------------------------------------------- llama.cpp


def _mib_line(text: str) -> Interval:
    return printed(text)


def _flags(inp: dict[str, Any]) -> LlamaCppFlags:
    return LlamaCppFlags(ctx_size=inp["ctx"], parallel=inp["parallel"], flash_attn=inp["fa"],
                         ubatch_size=inp["ubatch"], batch_size=inp["batch"], n_gpu_layers=inp["ngl"])


_GPU_BUFFER = re.compile(r"(CUDA|ROCm|MTL|Vulkan)\d|Metal ")


def _gpu_buffers(lines: Any, kind: str) -> Interval | None:
    """The first GPU ``… {kind} buffer size = X MiB`` line: CUDA0, ROCm0, Vulkan0, MTL0, or
    ``Metal``, the name the Metal backend's buffers carry in builds before per-device names
    (``Metal KV buffer size =   384.00 MiB`` in the ggml-org/ci Apple M4 runs of b4846)."""
    for line in [lines] if isinstance(lines, str) else (lines or []):
        if _GPU_BUFFER.match(line) and f"{kind} buffer size" in line:
            return _mib_line(line)
    return None


def tiny_llama_reserve(r: dict[str, Any]) -> tuple[ModelSpec, LlamaCppFlags]:
    """The tiny Llama and the llama-server flags of one row of
    ``benchmarks/results/llamacpp_compute_buffer.json`` (``benchmarks/llamacpp_compute_buffer.py``
    wrote and ran that GGUF): ``(ModelSpec, LlamaCppFlags)``."""
    from kvgate.model import spec_from_config  # noqa: PLC0415

    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": r["n_embd"],
           "num_attention_heads": r["n_head"], "num_key_value_heads": r["n_head_kv"], "head_dim": r["head_dim"],
           "intermediate_size": r["n_ff"], "num_hidden_layers": 2, "vocab_size": r["n_vocab"],
           "max_position_embeddings": 32768}
    m = spec_from_config(cfg, name=r["shape"], source="benchmarks/llamacpp_compute_buffer.py")
    f = LlamaCppFlags(ctx_size=r["ctx"], parallel=r["parallel"], flash_attn=r["flash_attn"], ubatch_size=r["ubatch"],
                      batch_size=max(2048, r["ubatch"]), n_outputs_max=r["parallel"])
    return m, f


def _measured_points() -> list[tuple[int, int, int]]:
    """(observed, phase low, phase high) bytes of every tiny-GGUF reserve."""
    rows = read_json(MEASURED, what="llama.cpp compute buffer measurements")["rows"]
    pts = []
    for r in rows:
        m, f = tiny_llama_reserve(r)
        lo, hi = compute_phases(m, f, r["ctx"])
        pts.append((int(r["compute_buffer_mib"]["CPU"] * MiB), lo, hi))
    return pts


def llamacpp_checks(folder: Path = FOLDER) -> list[Check]:
    """Every llama.cpp log: KV buffer (exact) and compute buffer (band), module docstring."""
    manifest = read_json(folder / "manifest.json", what="fit log manifest")
    inputs = read_json(folder / "fit_inputs_other.json", what="fit inputs")["llama.cpp"]
    out: list[Check] = []
    raw: list[tuple[Check, int, int, int]] = []
    for e in manifest:
        if e["engine"] != "llama.cpp":
            continue
        inp = inputs.get(e["file"], {"skip": "no entry in fit_inputs_other.json"})
        kv = Check(e["file"], "llama.cpp", e["release_series"], e["model"], str(e["gpu_type"]), "KV buffer")
        cb = Check(e["file"], "llama.cpp", e["release_series"], e["model"], str(e["gpu_type"]), "compute buffer")
        if "skip" in inp:
            kv.skip = cb.skip = inp["skip"]
            out += [kv, cb]
            continue
        model = _model(inp["model"], folder)
        f = _flags(inp)
        rel = Release("llama.cpp", inp["release"], parse_version(inp["release"]), "given")
        g = kv_geometry(model, f, rel)
        on_gpu, _ = _kv_on_gpu(g, inp["ctx"], f.parallel, inp["ngl"], rel)
        kv.printed = _gpu_buffers(e["llamacpp_kv_buffer"], "KV")
        kv.predicted = Interval.point(on_gpu)
        wb = parse_bytes(inp["weights"].replace(" ", ""))
        from kvgate.engines.llamacpp.fit import compute_buffer  # noqa: PLC0415

        cb.printed = _gpu_buffers(e["llamacpp_compute_buffers"], "compute")
        cb.predicted = compute_buffer(model, f, inp["ctx"], release=rel, ngl=inp["ngl"], weights_bytes=wb)
        lo, hi = compute_phases(model, f, inp["ctx"], release=rel, ngl=inp["ngl"], weights_bytes=wb)
        cb.note = f"FA {inp['fa']}, {inp['ngl']} layers on the GPU"
        out += [kv, cb]
        if cb.printed is not None:
            raw.append((cb, (cb.printed.low + cb.printed.high) // 2, lo, hi))
    measured = _measured_points()
    for cb, _obs, lo, hi in raw:  # leave one out: the two factors from everything else
        rest = [(o, a, b) for c, o, a, b in raw if c is not cb] + measured
        f_lo = min(Fraction(o, a) for o, a, _ in rest)
        f_hi = max(Fraction(o, b) for o, _, b in rest)
        cb.loo = Interval(int(lo * f_lo), int(-(-hi * f_hi // 1)))
    return out


# ---------------------------------------------------------------- report


def _fmt(c: Check, unit: int, name: str) -> tuple[str, str, str]:
    p, q = c.printed, c.predicted
    assert p is not None and q is not None
    if unit == 1:
        return f"{(p.low + p.high) // 2:,}", f"[{q.low:,}, {q.high:,}]", f"{q.width / max(1, p.low) * 100:.0f}%"
    mid = (p.low + p.high) / 2 / unit
    return (f"{mid:.2f} {name}", f"[{q.low / unit:.2f}, {q.high / unit:.2f}] {name}",
            f"{q.width / unit:.2f} {name} ({q.width / max(1, p.low) * 100:.0f}%)")


def _share(checks: list[Check], loo: bool = False) -> str:
    got = [c.inside_loo if loo else c.inside for c in checks]
    got = [g for g in got if g is not None]
    return f"{sum(got)} of {len(got)}" + (f" ({sum(got) / len(got):.0%})" if got else "")


def _yes(v: bool | None) -> str:
    return "-" if v is None else ("yes" if v else "**no**")


def report(folder: Path = FOLDER) -> str:
    """Markdown: the SGLang and llama.cpp tables and their coverage."""
    lines = ["### SGLang: `max_total_num_tokens` against `kvgate fit --engine sglang`", "",
             "| log | release | model | GPU | printed tokens | predicted | width | inside | leave-one-out | fraction | start memory seen |",
             "|---|---|---|---|---:|---|---:|---|---|---|---|"]
    sg = sglang_checks(folder)
    for c in sg:
        if c.skip:
            lines.append(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | | not checked: {c.skip} | | | | | |")
            continue
        pr, iv, wd = _fmt(c, 1, "")
        lo, hi = c.extra["init_observed_mib"]
        lines.append(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | {pr} | {iv} | {wd} | {_yes(c.inside)} | "
                     f"{_yes(c.inside_loo)} | {c.extra['mem_fraction_static']} ({c.extra['fraction_source']}) | "
                     f"{lo}–{hi} MiB |")
    checked = [c for c in sg if not c.skip]
    lines += ["", f"- SGLang inside: **{_share(checked)}** in-sample (init band {init_band(1).low // MiB}–"
              f"{init_band(1).high // MiB} MiB at TP 1, {init_band(2).low // MiB}–{init_band(2).high // MiB} MiB with TP), "
              f"{_share(checked, True)} leave-one-out (init band spanned by the other logs of the same platform; "
              f"none for the one ROCm log).", ""]
    lines += ["### llama.cpp: KV buffer (exact) and compute buffer against `kvgate fit --engine llama.cpp`", "",
              "| log | release | model | buffer | printed | predicted | width | inside | leave-one-out | setting |",
              "|---|---|---|---|---:|---|---:|---|---|---|"]
    lc = llamacpp_checks(folder)
    for c in lc:
        if c.skip:
            if c.quantity == "KV buffer":
                lines.append(f"| `{c.file}` | {c.release} | {c.model} | | | not checked: {c.skip} | | | | |")
            continue
        if c.printed is None:
            continue
        pr, iv, wd = _fmt(c, MiB, "MiB")
        lines.append(f"| `{c.file}` | {c.release} | {c.model} | {c.quantity} | {pr} | {iv} | {wd} | {_yes(c.inside)} | "
                     f"{_yes(c.inside_loo) if c.quantity == 'compute buffer' else 'exact'} | {c.note} |")
    kvs = [c for c in lc if c.quantity == "KV buffer" and c.printed is not None]
    cbs = [c for c in lc if c.quantity == "compute buffer" and c.printed is not None]
    lines += ["", f"- llama.cpp KV buffer to the printed 0.01 MiB: **{_share(kvs)}**; compute buffer inside: "
              f"**{_share(cbs)}** in-sample, {_share(cbs, True)} leave-one-out (the band's factors from the other "
              f"logs and the {len(_measured_points())} tiny-GGUF reserves)."]
    return "\n".join(lines)


def main(argv: list[str]) -> int:
    print(report(Path(argv[0]) if argv else FOLDER))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
