"""The table of every vLLM log of tests/data/fit_logs against kvgate fit's interval,
in-sample and leave-one-out.

    PYTHONPATH=src python benchmarks/fit_logs_table.py [tests/data/fit_logs]

Prints Markdown for benchmarks/RESULTS.md: per log the printed pool (available KV memory,
GPU KV cache tokens or GPU blocks), the predicted interval with the deployed bands of
kvgate.engines.vllm.budget (in-sample: these bands saw every log), its width, inside or not, the
error of the interval's midpoint; then the same with bands calibrated without that log
(kvgate.engines.vllm.calibrate.leave_one_out: the data rule, no hand margins); then the shares and
the statistics llm-d-planner publishes for its planner (mean and mean absolute error of the
KV pool, of the activation peak and of the non-torch memory, fp8 KV tokens), computed the same
way for kvgate's interval midpoints.
"""

from __future__ import annotations

import statistics
import sys
from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.engines.vllm.budget import BANDS
from kvgate.engines.vllm.calibrate import data_bands, leave_one_out
from kvgate.engines.vllm.logcheck import LogCase, check_logs, printed_bytes, printed_int
from kvgate.fit.interval import Interval

GiB = 2**30
ACT, NT = "activation peak (profile run)", "non-torch memory"


def _g(b: float) -> str:
    return f"{b / GiB:.2f}"


def _unit(c: LogCase) -> str:
    return {"available KV bytes": "GiB", "GPU blocks": "blocks"}.get(c.quantity, "tokens")


def _fmt(c: LogCase, v: float) -> str:
    return f"{_g(v)}" if _unit(c) == "GiB" else f"{v:,.0f}"


def _err(c: LogCase) -> float:
    """Midpoint error, % of |printed|."""
    p = c.predicted
    assert p is not None and c.printed is not None
    return ((p.low + p.high) / 2 - c.printed) / abs(c.printed) * 100


def _cells(c: LogCase) -> tuple[str, str, str, str]:
    p = c.predicted
    assert p is not None and c.printed is not None
    u = _unit(c)
    mid = (p.low + p.high) / 2
    interval = f"[{_fmt(c, p.low)}, {_fmt(c, p.high)}] {u}"
    width = f"{_fmt(c, p.width)} {u} ({p.width / abs(c.printed) * 100:.0f}%)"
    err = f"{_fmt(c, mid - c.printed) if u != 'GiB' else f'{(mid - c.printed) / GiB:+.2f}'} {u} ({_err(c):+.1f}%)"
    return interval, width, "yes" if c.inside else "**no**", err


def _term_errors(cases: list[LogCase], name: str, printed: str) -> list[float]:
    """Signed % error of the term band's midpoint against the printed term, per log."""
    out = []
    for c in cases:
        if c.predicted is None or printed not in c.terms:
            continue
        b, p = c.terms[name], c.terms[printed]
        pm = (p["low"] + p["high"]) / 2
        if pm:
            out.append(((b["low"] + b["high"]) / 2 - pm) / pm * 100)
    return out


def _term_inside(cases: list[LogCase], name: str, printed: str) -> str:
    """How many printed terms meet their band (± printing precision): ``k of n``."""
    hits = [c.terms[printed]["high"] >= c.terms[name]["low"] and c.terms[printed]["low"] <= c.terms[name]["high"]
            for c in cases if c.predicted is not None and printed in c.terms]
    return f"{sum(hits)} of {len(hits)}"


def _stats(v: list[float]) -> str:
    if not v:
        return "n/a"
    return f"{statistics.fmean(v):+.1f}% (mean abs {statistics.fmean(abs(x) for x in v):.1f}%, n = {len(v)})"


def tokens_given_pool(folder: Path) -> list[tuple[str, str, float]]:
    """For every vLLM log that prints its pool in GiB and its "GPU KV cache size" tokens, with a
    model in fit_inputs.json (a checked case's, or a skipped case's ``geometry``): kvgate's
    tokens for the printed pool (its midpoint) against the printed tokens, % — llm-d-planner's
    "fp8 KV tokens" statistic is this for fp8 KV caches. ``(file, kv dtype, error %)``."""
    from kvgate.engines.vllm.fit import _Predictor  # noqa: PLC0415
    from kvgate.engines.vllm.flags import VllmFlags  # noqa: PLC0415
    from kvgate.engines.vllm.logcheck import _gpu, _model  # noqa: PLC0415
    from kvgate.fit.interval import Term  # noqa: PLC0415
    from kvgate.fit.release import Release, parse_version  # noqa: PLC0415
    from kvgate.geometry import vllm_kv_cache_report  # noqa: PLC0415

    inputs = read_json(folder / "fit_inputs.json", what="fit inputs")["cases"]
    out = []
    for e in read_json(folder / "manifest.json", what="manifest"):
        inp = inputs.get(e["file"], {})
        inp = inp.get("geometry", inp)
        if (e["engine"] != "vllm" or "model" not in inp or not e.get("available_kv_cache_memory")
                or not e.get("gpu_kv_cache_tokens")):
            continue
        rel = Release("vllm", inp["release"], parse_version(inp["release"]), "given")
        pr = _Predictor(_model(folder, inp["model"]), Term("weights", Interval.point(0), "-"), _gpu(folder, e, inp), rel)
        kvd = e.get("kv_cache_dtype") or "auto"
        s = pr.settings(VllmFlags(max_model_len=e.get("max_model_len"), kv_cache_dtype=kvd,
                                  tensor_parallel_size=e.get("tp") or 1, use_v1=inp.get("use_v1")))
        pool = printed_bytes(e["available_kv_cache_memory"])
        tok = vllm_kv_cache_report(pr.geometry(s), (pool.low + pool.high) // 2, s.max_model_len)["gpu_kv_cache_tokens"]
        got = printed_int(e["gpu_kv_cache_tokens"])
        out.append((e["file"], kvd, (tok - got) / got * 100))
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "tests/data/fit_logs")
    cases = check_logs(folder)
    loo = leave_one_out(folder, cases)
    checked = [c for c in cases if c.predicted is not None]
    print("| log | release | model | GPU | printed | in-sample interval | width | inside | midpoint error "
          "| leave-one-out interval | inside (LOO) | presumed |")
    print("|---|---|---|---|---:|---|---:|---|---:|---|---|---|")
    for c in cases:
        if c.predicted is None:
            print(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | | not checked: {c.skip} | | | | | | |")
            continue
        lc = loo[c.file][0]
        iv, width, ins, err = _cells(c)
        liv, _, lins, _ = _cells(lc)
        printed = f"{_fmt(c, c.printed or 0)} {_unit(c)}"
        pres = "; ".join(c.presumed) or "—"
        print(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | {printed} | {iv} | {width} | {ins} | {err} "
              f"| {liv} | {lins} | {pres} |")
    lchk = [loo[c.file][0] for c in checked]
    n = len(checked)
    ins, lins = sum(bool(c.inside) for c in checked), sum(bool(c.inside) for c in lchk)
    own = [c for c in checked if not c.presumed]
    avail = [c for c in checked if c.quantity == "available KV bytes"]
    widths = sorted(c.predicted.width for c in avail if c.predicted is not None)
    print()
    print(f"- inside, in-sample (deployed bands): **{ins} of {n}** checked logs ({ins / n:.1%}); "
          f"{sum(bool(c.inside) for c in own)} of {len(own)} checked with nothing presumed (own weights line, "
          f"printed utilization, a GPU of the table).")
    print(f"- inside, leave-one-out (bands calibrated without the log, data rule): **{lins} of {n}** ({lins / n:.1%}).")
    print(f"- width of the pool interval (GiB logs, n = {len(widths)}): median {_g(statistics.median(widths))} GiB, "
          f"max {_g(widths[-1])} GiB; with the log's own weights line: max "
          f"{_g(max(c.predicted.width for c in avail if c.weights_from == 'log' and c.predicted))} GiB.")
    errs = [abs(_err(c)) for c in checked]
    print(f"- midpoint error, all checked: mean abs {statistics.fmean(errs):.1f}%, median {statistics.median(errs):.1f}%.")
    print(f"- not checked: {len(cases) - n} vLLM logs (reason in the table).")
    at_default = [c for c in cases if c.skip and "at vLLM's default" in c.skip]
    if at_default:
        print(f"- counting the {len(at_default)} not-checkable log(s) whose pool at vLLM's default utilization "
              f"would be outside (reason in the table) as misses: {ins} of {n + len(at_default)} in-sample "
              f"({ins / (n + len(at_default)):.1%}), {lins} of {n + len(at_default)} leave-one-out "
              f"({lins / (n + len(at_default)):.1%}).")
    print()
    _comparison(checked, lchk, avail, folder)
    print()
    _bands_table(folder)
    print()
    from fit_logs_other import report  # SGLang and llama.cpp sections: benchmarks/fit_logs_other.py

    print(report(folder))
    return 0


def _comparison(checked: list[LogCase], lchk: list[LogCase], avail: list[LogCase], folder: Path) -> None:
    kv = [_err(c) for c in avail]
    kv_loo = [_err(c) for c in lchk if c.quantity == "available KV bytes"]
    kv_pos = [_err(c) for c in avail if (c.printed or 0) > 0]
    tg = tokens_given_pool(folder)
    fp8 = [x for x in tg if "fp8" in x[1]]
    print("| statistic (predicted − actual) / actual | llm-d-planner, published | kvgate, in-sample | "
          "kvgate, leave-one-out |")
    print("|---|---|---|---|")
    print(f"| KV cache pool (GiB) | +0.28% (mean abs 6.70%, n = 50) | {_stats(kv)} | {_stats(kv_loo)} |")
    gib = [((c.predicted.low + c.predicted.high) / 2 - (c.printed or 0)) / GiB for c in avail if c.predicted]
    print(f"| KV cache pool, GiB | | {statistics.fmean(gib):+.2f} GiB (mean abs "
          f"{statistics.fmean(abs(x) for x in gib):.2f} GiB, median abs {statistics.median(abs(x) for x in gib):.2f} GiB) | |")
    print(f"| KV cache pool, logs with a positive pool | | {_stats(kv_pos)} | |")
    print(f"| activation peak | +188.64% (n = 50) | {_stats(_term_errors(checked, ACT, 'printed torch_peak'))} | "
          f"{_stats(_term_errors(lchk, ACT, 'printed torch_peak'))} |")
    print(f"| non-torch memory | −43.54% (n = 50) | {_stats(_term_errors(checked, NT, 'printed non_torch_memory'))} | "
          f"{_stats(_term_errors(lchk, NT, 'printed non_torch_memory'))} |")
    print(f"| activation peak inside its band | | {_term_inside(checked, ACT, 'printed torch_peak')} | "
          f"{_term_inside(lchk, ACT, 'printed torch_peak')} |")
    print(f"| non-torch memory inside its band | | {_term_inside(checked, NT, 'printed non_torch_memory')} | "
          f"{_term_inside(lchk, NT, 'printed non_torch_memory')} |")
    fp8_text = ", ".join(f"{e:+.2f}%" for _, _, e in fp8) or "n/a: no fp8 log with a known model prints pool and tokens"
    print(f"| fp8 KV tokens, given the pool | −52.11% and −51.73% (2 runs) | {fp8_text} | (geometry: no bands) |")
    all_text = "; ".join(f"`{f}` ({k}) {e:+.3f}%" for f, k, e in tg)
    print(f"| KV tokens given the pool, any KV dtype | | {all_text} | (geometry: no bands) |")


def _bands_table(folder: Path) -> None:
    d = data_bands(folder)
    rows: list[tuple[str, Any, Any]] = [
        ("K (× T·w)", f"[{float(d.k[0]):.2f}, {float(d.k[1]):.2f}]", f"[{float(BANDS.k[0]):.2f}, {float(BANDS.k[1]):.2f}]"),
        ("C V0 (B / logit)", f"[{d.c_v0[0]}, {d.c_v0[1]}]", f"[{BANDS.c_v0[0]}, {BANDS.c_v0[1]}]"),
        ("V1 logits / sampler (B / logit)", "from the code per release (v1_logits_rule)",
         "0.7.0-0.7.2: b × T rows; 0.7.3: b × seqs; 0.8-0.11: [b+12, b+36]; 0.12: [b+26, b+36]; "
         "0.13-0.18: [b+12, b+36]; 0.19+: [b+12, b+16]"),
        ("non-torch V0 0.6.4 and before (GiB)", _iv(d.non_torch_v064), _iv(BANDS.non_torch_v064)),
        ("non-torch V0 0.6.5-0.6.6 (GiB)", _iv(d.non_torch_v0), _iv(BANDS.non_torch_v0)),
        ("non-torch growth, V0 0.7+ / V1 (GiB)", _iv(d.non_torch_growth), _iv(BANDS.non_torch_growth)),
        ("CUDA graph pool < 0.21 (GiB)", _iv(d.cuda_graph), _iv(BANDS.cuda_graph)),
        ("CUDA graph pool ≥ 0.21 (GiB)", _iv(d.cuda_graph_021), _iv(BANDS.cuda_graph_021)),
    ]
    print("| band | data rule, all logs | deployed (kvgate.engines.vllm.budget.BANDS) |")
    print("|---|---|---|")
    for name, a, b in rows:
        print(f"| {name} | {a} | {b} |")


def _iv(v: Interval) -> str:
    return f"[{v.low / GiB:.3f}, {v.high / GiB:.3f}]"


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
