"""``kvgate recheck RECORD``: recompute a record; "would the verdict change if ...?"."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from kvgate.atomicio import read_json
from kvgate.commands._types import nonneg_int, positive_int
from kvgate.errors import KvgateError
from kvgate.gate.engine_words import RECORD_ENGINE_WORDS, engine_of
from kvgate.output import emit, table
from kvgate.units import fmt_gib, fmt_mib, parse_bytes

_LABELS = {
    "total_bytes": "card memory",
    "peak_bytes": "peak used",
    "idle_bytes": "idle used",
    "max_seq": "max_seq",
    "slots_target": "target slots",
    "weights_delta_bytes": "resident weights heavier by",
}


def _labels(engine: str | None) -> dict[str, str]:
    """The what-if labels; an engine-log record's in the engine's words (its KV cache pool, its flags)."""
    if engine is None:
        return _LABELS
    seqs, length = RECORD_ENGINE_WORDS[engine]
    return {**_LABELS, "total_bytes": "KV cache pool", "peak_bytes": "KV cache pool used at start",
            "idle_bytes": "KV cache pool used at start", "max_seq": length, "slots_target": seqs}


def _change(key: str, value: Any, engine: str | None = None) -> str:
    label = _labels(engine).get(key, key)
    if value is None:
        return f"{label} not available"
    if key.endswith("_bytes"):
        return f"{label} {fmt_mib(value)} ({fmt_gib(value)})"
    return f"{label} {value:,}"

NAME = "recheck"
HELP = "recompute a decision record; what-ifs (--total 24GiB, --max-seq 40960, --slots 16) or a new measurement"
DESCRIPTION = """\
Recompute a decision record from its own inputs, and answer "would the verdict change
if ...?". Measured facts (from the record) and what-ifs (from these options) are shown
apart. A new measurement (--measurement / --smi) is applied only on the same basis
(device, total memory, driver, CUDA, CPU); otherwise: "different basis: re-measure".

  kvgate recheck kvgate-records/qwen3-30b-a3b-....json --total 24GiB
  kvgate recheck decisions/ --max-seq 40960          # every record in a directory

Exit status: 0 every record reproduced unchanged, 4 a verdict or recomputed figure
changed, 3 different basis, 2 a record that could not be read (the most urgent over all
files; `--json` prints a list, one result per file).
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
    from kvgate.measure.select import select_measurement  # noqa: PLC0415

    if args.domain and not (args.measurement or args.smi):
        raise KvgateError("--domain chooses a domain of --measurement or --smi; neither was given")
    if args.measurement and args.smi:
        raise KvgateError("give --measurement or --smi, not both")
    if args.measurement:
        return select_measurement(read_json(args.measurement, what="measurement"), domain=args.domain).measurement
    if args.smi:
        from kvgate.measure.smi_csv import load_smi_csv

        return select_measurement(load_smi_csv(args.smi), domain=args.domain).measurement
    return None


def _text(res: dict[str, Any]) -> str:
    """One recheck result (see :func:`kvgate.gate.record.recheck_path`) as text."""
    from kvgate.gate.render import boundary_lines, candidate_limit_lines, sensitivity_line  # noqa: PLC0415

    lines = [f"record  {res['record']}"]
    if res["status"] == "different-basis":
        lines.append("different basis: re-measure (the recorded decision is not applied to this measurement)")
        show = lambda f, v: fmt_mib(v) if f == "total_bytes" and isinstance(v, int) else ("not available" if v is None else str(v))
        lines.append(table([[d["field"], show(d["field"], d["recorded"]), show(d["field"], d["new"])]
                            for d in res["basis_differences"]],
                           header=["basis field", "recorded", "new"], align="lll"))
        return "\n".join(lines)
    stored = res["stored"]["verdicts"]
    recomputed = res["recorded"]["verdicts"]
    sc = res["inputs"]["scenario"]
    eng = engine_of(res["recorded"])
    if eng is None:
        lines.append(f"measured  total {fmt_mib(sc['total_bytes'])}, peak {fmt_mib(sc['peak_bytes'])} with "
                     f"{sc['slots_measured']} slots at max_seq {sc['max_seq_measured']:,}")
    else:
        seqs, length = RECORD_ENGINE_WORDS[eng]
        lines.append(f"from the {eng} log  KV cache pool {fmt_mib(sc['total_bytes'])} ({fmt_gib(sc['total_bytes'])}) "
                     f"per GPU, empty at start; {sc['slots_target']} sequences of {sc['max_seq']:,} tokens "
                     f"({seqs} {sc['slots_target']}, {length} {sc['max_seq']:,})")
    if recomputed != stored:
        lines.append(f"WARNING: recomputing the record gives {recomputed}, but it stores {stored}: "
                     "the record was edited or made by another kvgate version")
    if res["what_if"] is None:
        if not res["stale"]:
            how = "  (recomputed, unchanged)"
        elif recomputed != stored:
            how = "  (recomputed: CHANGED from the stored verdicts)"
        else:
            how = "  (recomputed: the verdicts hold, but the record differs from its recomputation)"
        lines.append("verdicts  " + ", ".join(f"{k}: {v}" for k, v in recomputed.items()) + how)
        lines += _stale_lines(res)
        if res["recorded"]["status"] == "ok":
            lines.append(sensitivity_line(res["recorded"]))
            lines += ["flips with:"] + [f"  {s}" for s in boundary_lines(res["recorded"])]
            lines += [f"  {s}" for s in candidate_limit_lines(res["recorded"])]
        return "\n".join(lines)
    lines += _stale_lines(res)
    ch = ", ".join(_change(k, v, eng) for k, v in res["changes"].items())
    lines.append(f"what-if   {ch}")
    rows = [[name, recomputed[name], res["what_if"]["verdicts"][name]] for name in recomputed]
    lines.append(table(rows, header=["candidate", "recorded (measured)" if eng is None else "recorded (from the log)",
                                     "what-if"], align="lll"))
    lines.append("verdict changes" if res["status"] == "changed" else "verdict unchanged")
    if res["what_if"]["status"] == "ok":
        lines.append(sensitivity_line(res["what_if"]))
        lines += ["what-if flips with:"] + [f"  {s}" for s in boundary_lines(res["what_if"])]
        lines += [f"  {s}" for s in candidate_limit_lines(res["what_if"])]
    return "\n".join(lines)


def _stale_lines(res: dict[str, Any]) -> list[str]:
    """What differs between the stored record and its recomputation: every derived
    figure by its path (stored vs recomputed), and a digest that no longer matches the
    stored inputs and measurement."""
    def show(v: Any) -> str:
        return "absent" if v is None else json.dumps(v, ensure_ascii=False)

    diffs = res["differences"]
    out = [f"differs   {len(diffs)} recomputed figure(s) (stored → recomputed):"] if diffs else []
    out += [f"  {d['field']}: {show(d['recorded'])} → {show(d['recomputed'])}" for d in diffs]
    dg = res["digest"]
    if dg["matches"] is None:
        out.append("digest    none stored: nothing shows whether the inputs or the measurement were edited")
    elif dg["matches"] is False:
        out.append(f"digest    stored {dg['recorded']} → recomputed {dg['recomputed']}: the inputs or the "
                   "measurement were edited after the record was written")
    return out


def run(args: argparse.Namespace) -> int:
    """Exit status: the most urgent over all files (2 > 3 > 4 > 0; :mod:`kvgate.errors`)."""
    import sys

    from kvgate.gate.record import recheck_exit_code, recheck_path  # noqa: PLC0415

    new_m = _new_measurement(args)
    results = recheck_path(args.record, new_measurement=new_m, **_what_if(args))
    if not Path(args.record).is_dir() and results[0]["status"] == "error":
        raise KvgateError(results[0]["error"])  # one file: one ERROR line, as for any bad input
    texts: list[str] = []
    skipped = [Path(r["record"]).name for r in results if r["status"] == "skipped"]
    if skipped:
        texts.append(f"skipped {len(skipped)} JSON file(s) that are not decision records: {', '.join(skipped)}")
    for r in results:
        if r["status"] == "error":
            print(f"ERROR: {r['record']}: {r['error']}", file=sys.stderr)
        elif r["status"] != "skipped":
            texts.append(_text(r))
    emit(args.json, results, "\n\n".join(texts))
    return recheck_exit_code(results)
