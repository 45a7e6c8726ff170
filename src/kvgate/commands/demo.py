"""``kvgate demo``: the write-up's case, end to end, with no arguments."""

from __future__ import annotations

import argparse

from kvgate.gate import source_case as case
from kvgate.commands.gate import add_gate_arguments, gate_from_args

NAME = "demo"
HELP = "the write-up's case: Qwen3-30B-A3B, int8 KV mirror, 8192, RTX 5090 — not-a-bottleneck"
DESCRIPTION = """\
Evaluate the source write-up's case with no arguments: Qwen3-30B-A3B (bundled preset),
KV format int8-f32scale, max_seq 8192, 4 slots at the measured peak, target 8 slots, on
an RTX 5090 measured by nvidia-smi every 500 ms (total 32,607 MiB, idle 936 MiB, peak
19,625 MiB). Prints the write-up's table in correct arithmetic, the verdicts for paging
and tiering, the sensitivity flag and the flip boundaries, and writes a decision record.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--out", default=None, help="record file (.json) or directory (default ./kvgate-records)")
    p.add_argument("--no-record", action="store_true", help="don't write a record")
    p.add_argument("--force", action="store_true", help="overwrite an existing record")


def _gate_args(args: argparse.Namespace) -> argparse.Namespace:
    """The write-up's case as ``kvgate gate`` options, parsed by gate's own parser so
    every other option keeps gate's default."""
    p = argparse.ArgumentParser(add_help=False)
    add_gate_arguments(p, measurement_required=False)
    ns = p.parse_args([
        "--model", case.MODEL, "--kv-format", case.KV_FORMAT, "--max-seq", str(case.MAX_SEQ),
        "--slots-measured", str(case.SLOTS_MEASURED), "--slots", str(case.SLOTS_TARGET),
    ])
    ns.out, ns.no_record, ns.force, ns.json = args.out, args.no_record, args.force, args.json
    return ns


def run(args: argparse.Namespace) -> int:
    return gate_from_args(_gate_args(args), case.measurement(), notes=list(case.ERRATA))
