"""Out-of-sample check of ``kvgate fit``'s vLLM pool interval: leave a whole release, a whole
card, a whole TP size out at a time (issue 25, item 3; ../shared/DESIGN.md §9).

    PYTHONPATH=src python benchmarks/fit_logs_oos.py [tests/data/fit_logs]

For every checkable vLLM log of the folder (``kvgate.engines.vllm.logcheck.check_logs``) and for each
way of grouping the logs (release series, card, TP size), each group is checked with the
non-KV bands calibrated on the other groups' printed terms only
(``kvgate.engines.vllm.calibrate.calibrate``, the data rule without hand margins) and the cards'
driver reserve bands without the group's own CUDA totals (``kvgate.fit.gpus.excluding_logs``); what
is not a band (the logits rule per release, the defaults per release, the NCCL/custom all-reduce
term of ``kvgate.engines.vllm.comm``) is the same in every column.

Two weight modes: the log's own weights line (``given``) and kvgate's estimate from the
config (``estimate``: what ``kvgate fit`` answers without the checkpoint's files).

Then, config-free, every printed non-torch figure of the manifest against the non-torch band
kvgate would use at that log's TP size and card (the term check the TP model answers to).

Last, the width each non-KV term adds to the pool's interval, per log (in-sample, the log's
weights): which term to narrow next.

Prints Markdown for benchmarks/RESULTS.md and a short table for README.md (``--readme``).
"""

from __future__ import annotations

import statistics
import sys
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path

from kvgate.atomicio import read_json
from kvgate.engines.vllm.budget import using_bands
from kvgate.engines.vllm.calibrate import calibrate, observations
from kvgate.engines.vllm.comm import card_class, tp_comm_term
from kvgate.engines.vllm.logcheck import LogCase, check_logs, miss_gap, printed_bytes
from kvgate.fit.gpus import RESERVE_READINGS, excluding_logs
from kvgate.fit.interval import Interval

GiB = 2**30
FOLDER = Path(__file__).resolve().parent.parent / "tests" / "data" / "fit_logs"


def _groupers(folder: Path) -> dict[str, Callable[[str], str]]:
    man = {e["file"]: e for e in read_json(folder / "manifest.json", what="fit log manifest")}
    inputs = read_json(folder / "fit_inputs.json", what="fit inputs")["cases"]

    def card(f: str) -> str:
        g = inputs.get(f, {}).get("gpu")
        return " or ".join(g) if isinstance(g, list) else str(g)

    return {"release": lambda f: str(man[f]["release_series"]), "card": card,
            "TP size": lambda f: f"TP {man[f].get('tp') or 1}"}


def _checked(cases: list[LogCase]) -> list[LogCase]:
    return [c for c in cases if c.predicted is not None and c.printed is not None]


def leave_group_out(folder: Path, key: Callable[[str], str], weights: str) -> dict[str, tuple[LogCase, str]]:
    """``{file: (case checked with bands that never saw its group, group)}``."""
    base = _checked(check_logs(folder, weights=weights))
    obs = observations(folder, check_logs(folder))  # the printed terms (weights do not enter them)
    out: dict[str, tuple[LogCase, str]] = {}
    for g in sorted({key(c.file) for c in base}):
        files = {c.file for c in base if key(c.file) == g}
        bands = calibrate([o for o in obs if key(o.file) != g])
        # a card left out loses every reading of its reserve, the logs outside the check too
        own = files | {r.log for r in RESERVE_READINGS if r.card in g.split(" or ")}
        with using_bands(bands), excluding_logs(own):
            for f in sorted(files):
                out[f] = (check_logs(folder, only=f, weights=weights)[0], g)
    return out


def _width_pct(c: LogCase) -> float:
    assert c.predicted is not None and c.printed is not None
    return c.predicted.width / max(abs(c.printed), 1) * 100


def _summary(cases: list[LogCase]) -> tuple[int, int, float, float]:
    """``(inside, n, median width % of the printed pool, median width GiB of the GiB logs)``."""
    inside = sum(1 for c in cases if c.inside)
    gib = [c.predicted.width / GiB for c in cases if c.predicted is not None and c.quantity == "available KV bytes"]
    return (inside, len(cases), statistics.median(_width_pct(c) for c in cases) if cases else float("nan"),
            statistics.median(gib) if gib else float("nan"))


def _miss(c: LogCase) -> str:
    """Side and gap of a miss, from the nearer edge of the printed figure's interval (its
    printing precision: ``kvgate.engines.vllm.logcheck.miss_gap``)."""
    assert c.predicted is not None and c.printed is not None
    gap = miss_gap(c.predicted, c.printed_range or Interval.point(c.printed))
    side = "above" if gap > 0 else "below"
    g = f"{abs(gap) / GiB:.3f} GiB" if c.quantity == "available KV bytes" else f"{abs(gap):,} {c.quantity.split()[-1]}"
    return f"{side} by {g}"


def _nontorch_band(v1: bool, release: str, tp: int, pp: int, card: str | None) -> Interval:
    """The non-torch band ``kvgate fit`` uses (``kvgate.engines.vllm.budget.non_torch_term``)."""
    from kvgate.engines.vllm.budget import non_torch_band  # noqa: PLC0415
    from kvgate.fit.release import parse_version  # noqa: PLC0415

    band, _ = non_torch_band(v1, parse_version(release))
    comm = tp_comm_term(tp, pp, card)
    return band + comm.value if comm is not None else band


TERM_RECORDS = Path(__file__).resolve().parent.parent / "tests" / "data" / "logs" / "nontorch_terms.json"


def nontorch_terms(folder: Path, records: Path = TERM_RECORDS) -> list[tuple[str, str, str, Interval, Interval]]:
    """``(file, TP, card class, printed non-torch, kvgate's band)`` for every vLLM log of the
    manifest that prints the term, and every term record of ``records`` (no config needed).
    A record whose TP/PP split is not printed gets the hull of TP 1 and TP = its ranks."""
    inputs = read_json(folder / "fit_inputs.json", what="fit inputs")["cases"]
    out = []
    for e in read_json(folder / "manifest.json", what="fit log manifest"):
        if e["engine"] != "vllm" or not e.get("non_torch_memory"):
            continue
        tp, pp = e.get("tp") or 1, e.get("pp") or 1
        inp = inputs.get(e["file"], {})
        v1 = bool(inp["use_v1"]) if "use_v1" in inp else "v1" in e["file"].lower()
        card = inp["gpu"] if isinstance(inp.get("gpu"), str) else str(e.get("gpu_type") or "")
        band = _nontorch_band(v1, str(inp.get("release") or e["release_series"]), tp, pp, card)
        out.append((e["file"], str(tp), card_class(card), printed_bytes(str(e["non_torch_memory"])), band))
    for r in read_json(records, what="non-torch term records")["records"]:
        card, rel = r["card"], r["release_series"]
        if r.get("tp") is not None:
            tp = str(r["tp"])
            band = _nontorch_band(r["v1"], rel, r["tp"], r.get("pp") or 1, card)
        else:
            tp = f"? ({r['ranks']} ranks)"
            a, b = _nontorch_band(r["v1"], rel, 1, 1, card), _nontorch_band(r["v1"], rel, r["ranks"], 1, card)
            band = Interval(min(a.low, b.low), max(a.high, b.high))
        out.append((r["file"], tp, card_class(card), printed_bytes(r["non_torch_memory"]), band))
    return out


_TERMS = (("weights", "weights"), ("activation", "activation peak (profile run)"),
          ("non-torch", "non-torch memory"), ("CUDA graphs", "CUDA graph pool"))


def term_widths(folder: Path, weights: str = "given") -> list[tuple[str, dict[str, float]]]:
    """Per checked log printing its pool in GiB (deployed bands): the width each non-KV term
    adds to the pool's interval, GiB, and the rest (``budget``: the CUDA total × utilization,
    the driver reserve). The CUDA graph pool adds width only where it is subtracted (0.21+)."""
    from kvgate.fit.release import parse_version  # noqa: PLC0415

    out = []
    for c in _checked(check_logs(folder, weights=weights)):
        if c.quantity != "available KV bytes" or c.predicted is None:
            continue
        row = {}
        for short, name in _TERMS:
            t = c.terms.get(name)
            counted = short != "CUDA graphs" or parse_version(c.release) >= (0, 21)
            row[short] = (t["high"] - t["low"]) / GiB if t is not None and counted else 0.0
        row["budget"] = max(0.0, c.predicted.width / GiB - sum(row.values()))
        row["pool"] = c.predicted.width / GiB
        out.append((c.file, row))
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[0]) if argv and not argv[0].startswith("--") else FOLDER
    readme = "--readme" in argv
    groupers = _groupers(folder)
    rows: list[list[str]] = []
    misses: dict[str, list[str]] = defaultdict(list)
    for weights in ("given", "estimate"):
        ins = _checked(check_logs(folder, weights=weights))
        a, n, w, g = _summary(ins)
        rows.append([weights, "in-sample (deployed bands)", f"{a} of {n} ({a / n:.0%})", f"{w:.0f}%", f"{g:.2f} GiB"])
        for name, key in groupers.items():
            res = leave_group_out(folder, key, weights)
            cases = [c for c, _ in res.values()]
            a, n, w, g = _summary(cases)
            rows.append([weights, f"leave one {name} out ({len({grp for _, grp in res.values()})} groups)",
                         f"{a} of {n} ({a / n:.0%})", f"{w:.0f}%", f"{g:.2f} GiB"])
            for c, g in res.values():
                if not c.inside:
                    misses[f"{weights} weights, leave one {name} out"].append(f"`{c.file}` ({g}): {_miss(c)}")
    if readme:
        print("| weights | check | logged pool inside | median width (% of pool) | median width |")
        print("|---|---|---:|---:|---:|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
        return 0
    print("| weights | check | logged pool inside | median width (% of the printed pool) | median width (GiB logs) |")
    print("|---|---|---:|---:|---:|")
    for r in rows:
        print("| " + " | ".join(r) + " |")
    print()
    print("Misses:")
    print()
    for k, v in misses.items():
        for m in v:
            print(f"- {k}: {m}")
    print()
    print("Non-torch memory as printed, against the band kvgate uses at that TP size and card "
          "(in-sample: the band saw the TP-1 figures; the TP ≥ 2 figures are out of the base band):")
    print()
    print("| log | TP | card class | printed | kvgate's band | inside |")
    print("|---|---:|---|---:|---|---|")
    hits = 0
    nt = nontorch_terms(folder)
    for f, tp, cls, p, band in nt:
        ok = p.high >= band.low and p.low <= band.high
        hits += ok
        print(f"| `{f}` | {tp} | {cls} | {(p.low + p.high) / 2 / GiB:.2f} GiB | "
              f"[{band.low / GiB:.2f}, {band.high / GiB:.2f}] GiB | {'yes' if ok else '**no**'} |")
    print()
    print(f"- non-torch inside its band: {hits} of {len(nt)}")
    print()
    print("Width of the pool's interval by term (GiB; in-sample, the log's weights; the logs printing the "
          "pool in GiB; budget = the CUDA total × utilization, the driver reserve):")
    print()
    tw = term_widths(folder)
    cols = [k for k, _ in _TERMS] + ["budget", "pool"]
    print("| log | " + " | ".join(cols) + " |")
    print("|---|" + "---:|" * len(cols))
    for f, row in tw:
        print(f"| `{f}` | " + " | ".join(f"{row[k]:.2f}" for k in cols) + " |")
    print("| median | " + " | ".join(f"{statistics.median(r[k] for _, r in tw):.2f}" for k in cols) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
