"""``kvgate demo``: the write-up's case, end to end, with no arguments."""

from __future__ import annotations

import argparse
from dataclasses import replace

from kvgate.commands._args import add_record_flags, gate_options_from_args
from kvgate.gate import source_case as case
from kvgate.options import EngineOptions, GateOptions

NAME = "demo"
HELP = "the write-up's case: Qwen3-30B-A3B, int8 KV mirror, 8192, RTX 5090 — not-a-bottleneck"
DESCRIPTION = """\
Evaluate the source write-up's case with no arguments: Qwen3-30B-A3B (bundled preset),
KV format int8-f32scale, max_seq 8192, 4 slots at the measured peak, target 8 slots, on
an RTX 5090 measured by nvidia-smi every 500 ms (total 32,607 MiB, idle 936 MiB, peak
19,625 MiB). Prints the write-up's table in correct arithmetic, the verdicts for paging
and tiering, the sensitivity flag and the flip boundaries. It writes nothing unless asked:
--record writes the decision record (JSON + Markdown) under ./kvgate-records/, and
--out FILE.json or --out DIR writes it there.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_record_flags(p)
    p.add_argument("--record", action="store_true",
                   help="write the decision record under ./kvgate-records/ (the demo writes nothing by default)")


def options(args: argparse.Namespace) -> tuple[EngineOptions, GateOptions]:
    """The case of :mod:`kvgate.gate.source_case` as typed options, with the record flags
    given; everything not in the case keeps the options' own defaults. No record is
    written unless ``--record`` or ``--out`` asks for one."""
    engine = EngineOptions(model=case.MODEL, kv_format=case.KV_FORMAT, max_seq=case.MAX_SEQ, slots=case.SLOTS_TARGET)
    gate = gate_options_from_args(args, engine)
    asked = bool(getattr(args, "record", False) or getattr(args, "out", None))
    return engine, replace(gate, slots_measured=case.SLOTS_MEASURED, no_record=gate.no_record or not asked)


def run(args: argparse.Namespace) -> int:
    from kvgate.commands.gate import emit_decision
    from kvgate.session import decide_from_options

    engine, gate = options(args)
    d = decide_from_options(engine, gate, case.measurement(), notes=list(case.ERRATA))
    return emit_decision(args, d.record, gate)
