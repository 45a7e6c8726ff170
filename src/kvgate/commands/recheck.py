"""``kvgate recheck RECORD``: recompute a record; "would the verdict change if ...?"."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.argtypes import nonneg_int, positive_int
from kvgate.errors import KvgateError
from kvgate.measure.measurement import load_measurement_file
from kvgate.output import emit, table
from kvgate.gate.record import load_record, recheck
from kvgate.gate.render import boundary_lines, candidate_limit_lines, sensitivity_line
from kvgate.units import fmt_gib, fmt_mib, parse_bytes

_LABELS = {
    "total_bytes": "card memory",
    "peak_bytes": "peak used",
    "idle_bytes": "idle used",
    "max_seq": "max_seq",
    "slots_target": "target slots",
    "weights_delta_bytes": "resident weights heavier by",
}


def _change(key: str, value: Any) -> str:
    if value is None:
        return f"{_LABELS.get(key, key)} not available"
    if key.endswith("_bytes"):
        return f"{_LABELS.get(key, key)} {fmt_mib(value)} ({fmt_gib(value)})"
    return f"{_LABELS.get(key, key)} {value:,}"

NAME = "recheck"
HELP = "recompute a decision record; what-ifs (--total 24GiB, --max-seq 40960, --slots 16) or a new measurement"
DESCRIPTION = """\
Recompute a decision record from its own inputs, and answer "would the verdict change
if ...?". Measured facts (from the record) and what-ifs (from these options) are shown
apart. A new measurement (--measurement / --smi) is applied only on the same basis
(device, total memory, driver, CUDA, CPU); otherwise: "different basis: re-measure".

  kvgate recheck kvgate-records/qwen3-30b-a3b-....json --total 24GiB
  kvgate recheck decisions/ --max-seq 40960          # every record in a directory

Exit status: 0 verdicts unchanged, 1 a verdict changed, 3 different basis.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("record", metavar="RECORD", help="a decision record (.json) or a directory of them")
    w = p.add_argument_group("what-if (each replaces one input)")
    w.add_argument("--total", help="card memory, e.g. 24GiB")
    w.add_argument("--peak", help="peak used")
    w.add_argument("--max-seq", type=positive_int, help="target max_seq")
    w.add_argument("--slots", type=nonneg_int, help="target slots")
    w.add_argument("--weights-delta", help="resident weights heavier by this much")
    m = p.add_argument_group("new measurement (applied only on the same basis)")
    m.add_argument("--measurement", help="a kvgate measurement JSON")
    m.add_argument("--smi", help="an nvidia-smi --format=csv log")
    m.add_argument("--domain", default=None, help="domain of a multi-GPU measurement")


def _what_if(args: argparse.Namespace) -> dict[str, Any]:
    return {
        "total_bytes": parse_bytes(args.total) if args.total else None,
        "peak_bytes": parse_bytes(args.peak, allow_zero=True) if args.peak else None,
        "max_seq": args.max_seq,
        "slots_target": args.slots,
        "weights_delta_bytes": parse_bytes(args.weights_delta, allow_zero=True) if args.weights_delta else None,
    }


def _new_measurement(args: argparse.Namespace):
    if args.domain and not (args.measurement or args.smi):
        raise KvgateError("--domain chooses a domain of --measurement or --smi; neither was given")
    if args.measurement and args.smi:
        raise KvgateError("give --measurement or --smi, not both")
    if args.measurement:
        return load_measurement_file(read_json(args.measurement, what="measurement"), domain=args.domain)[0]
    if args.smi:
        from kvgate.measure.smi_csv import load_smi_csv

        return load_measurement_file(load_smi_csv(args.smi), domain=args.domain)[0]
    return None


def _one(path: Path, args: argparse.Namespace, new_m) -> tuple[dict[str, Any], str]:
    rec = load_record(path)
    res = recheck(rec, new_measurement=new_m, **_what_if(args))
    stored = rec["verdicts"]
    recomputed = res["recorded"]["verdicts"]
    lines = [f"record  {path}"]
    if res["status"] == "different-basis":
        lines.append("different basis: re-measure (the recorded decision is not applied to this measurement)")
        show = lambda f, v: fmt_mib(v) if f == "total_bytes" and isinstance(v, int) else ("not available" if v is None else str(v))
        lines.append(table([[d["field"], show(d["field"], d["recorded"]), show(d["field"], d["new"])]
                            for d in res["basis_differences"]],
                           header=["basis field", "recorded", "new"], align="lll"))
        return res, "\n".join(lines)
    sc = rec["inputs"]["scenario"]
    lines.append(f"measured  total {fmt_mib(sc['total_bytes'])}, peak {fmt_mib(sc['peak_bytes'])} with "
                 f"{sc['slots_measured']} slots at max_seq {sc['max_seq_measured']:,}")
    if recomputed != stored:
        lines.append(f"WARNING: recomputing the record gives {recomputed}, but it stores {stored}: "
                     "the record was edited or made by another kvgate version")
    if res["what_if"] is None:
        lines.append("verdicts  " + ", ".join(f"{k}: {v}" for k, v in recomputed.items())
                     + ("  (recomputed: CHANGED from the stored verdicts)" if res["stale"] else "  (recomputed, unchanged)"))
        if res["recorded"]["status"] == "ok":
            lines.append(sensitivity_line(res["recorded"]))
            lines += ["flips with:"] + [f"  {s}" for s in boundary_lines(res["recorded"])]
            lines += [f"  {s}" for s in candidate_limit_lines(res["recorded"])]
        return res, "\n".join(lines)
    ch = ", ".join(_change(k, v) for k, v in res["changes"].items())
    lines.append(f"what-if   {ch}")
    rows = [[name, recomputed[name], res["what_if"]["verdicts"][name]] for name in recomputed]
    lines.append(table(rows, header=["candidate", "recorded (measured)", "what-if"], align="lll"))
    lines.append("verdict changes" if res["status"] == "changed" else "verdict unchanged")
    if res["what_if"]["status"] == "ok":
        lines.append(sensitivity_line(res["what_if"]))
        lines += ["what-if flips with:"] + [f"  {s}" for s in boundary_lines(res["what_if"])]
        lines += [f"  {s}" for s in candidate_limit_lines(res["what_if"])]
    return res, "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    new_m = _new_measurement(args)
    p = Path(args.record)
    skipped: list[str] = []
    if p.is_dir():
        paths = []
        for cand in sorted(p.glob("*.json")):  # measurements etc. may sit beside records
            try:
                doc = read_json(cand, what="file")
            except KvgateError:
                doc = None
            if isinstance(doc, dict) and doc.get("schema") == "kvgate.decision/1":
                paths.append(cand)
            else:
                skipped.append(cand.name)
        if not paths:
            raise KvgateError(f"no decision records (schema kvgate.decision/1) in {p} (subfolders are not searched)")
    else:
        paths = [p]
    results, texts = [], []
    if skipped:
        texts.append(f"skipped {len(skipped)} JSON file(s) that are not decision records: {', '.join(skipped)}")
    for path in paths:
        res, text = _one(path, args, new_m)
        results.append({"record": str(path), **res})
        texts.append(text)
    payload: Any = results[0] if len(results) == 1 else results
    emit(args, payload, "\n\n".join(texts))
    statuses = {r["status"] for r in results}
    if "different-basis" in statuses:
        return 3
    return 1 if "changed" in statuses else 0
