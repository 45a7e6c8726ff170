"""The table of every vLLM log of tests/data/fit_logs against kvgate fit's interval.

    PYTHONPATH=src python benchmarks/fit_logs_table.py [tests/data/fit_logs]

Prints Markdown for benchmarks/RESULTS.md: per log the printed pool (available KV memory,
or GPU KV cache tokens), the predicted interval, its width, inside or not, and the error
of the interval's midpoint; then the shares. Logs whose terms informed the bands of
kvgate.fit.vllm_budget are marked "band" (in-sample); the others were only checked.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kvgate.atomicio import read_json
from kvgate.fit.logcheck import TERM_FIELDS, check_logs

GiB = 2**30


def _g(b: int) -> str:
    return f"{b / GiB:.2f}"


def main(argv: list[str]) -> int:
    folder = Path(argv[0] if argv else "tests/data/fit_logs")
    manifest = {e["file"]: e for e in read_json(folder / "manifest.json", what="manifest")}
    cases = check_logs(folder)
    print("| log | release | model | GPU | printed | predicted interval | width | inside | midpoint error | role |")
    print("|---|---|---|---|---:|---|---:|---|---:|---|")
    checked, errs = [], []
    for c in cases:
        if c.predicted is None:
            print(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | | not checked: {c.skip} | | | | |")
            continue
        checked.append(c)
        e = manifest[c.file]
        band = any(e.get(f) for f in TERM_FIELDS)
        role = ("band (in-sample)" if band else "checked only") + ("; " + "; ".join(c.presumed) if c.presumed else "")
        p, pr = c.predicted, c.printed or 0
        mid = (p.low + p.high) / 2
        err = (mid - pr) / abs(pr) * 100 if pr else float("nan")
        errs.append(abs(err))
        if c.quantity.startswith("avail"):
            printed, interval = f"{_g(pr)} GiB", f"[{_g(p.low)}, {_g(p.high)}] GiB"
            width = f"{_g(p.width)} GiB ({p.width / abs(pr) * 100:.0f}%)"
            err_text = f"{(mid - pr) / GiB:+.2f} GiB ({err:+.1f}%)"
        else:
            printed, interval = f"{pr:,} tokens", f"[{p.low:,}, {p.high:,}] tokens"
            width = f"{p.width:,} tokens ({p.width / pr * 100:.0f}%)"
            err_text = f"{mid - pr:+,.0f} tokens ({err:+.1f}%)"
        print(f"| `{c.file}` | {c.release} | {c.model} | {c.gpu} | {printed} | {interval} | {width} | "
              f"{'yes' if c.inside else '**no**'} | {err_text} | {role} |")
    inside = [c for c in checked if c.inside]
    strict = [c for c in checked if not c.presumed]
    held = [c for c in checked if not any(manifest[c.file].get(f) for f in TERM_FIELDS)]
    print()
    print(f"- inside: **{len(inside)} of {len(checked)}** checked logs ({len(inside) / len(checked):.1%}); "
          f"{sum(c.inside for c in strict)} of {len(strict)} where --gpu-memory-utilization is printed; "
          f"{sum(c.inside for c in held)} of {len(held)} logs that did not inform the bands.")
    print(f"- mean absolute error of the interval's midpoint: {sum(errs) / len(errs):.1f}% "
          f"(median {sorted(errs)[len(errs) // 2]:.1f}%).")
    print(f"- not checked: {len(cases) - len(checked)} vLLM logs (reason in the table).")
    from fit_logs_other import report  # SGLang and llama.cpp sections: benchmarks/fit_logs_other.py

    print("\n" + report(folder))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
