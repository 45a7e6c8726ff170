"""``kvgate demo``: the write-up's case, end to end, with no arguments."""

from __future__ import annotations

import argparse

from kvgate import source_case as case
from kvgate.commands.gate import gate_from_args

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


def run(args: argparse.Namespace) -> int:
    ns = argparse.Namespace(
        model=case.MODEL,
        kv_format=case.KV_FORMAT,
        kv_format_v=None,
        tp=1,
        layout="contiguous",
        block_size=None,
        sliding_full=False,
        max_seq=case.MAX_SEQ,
        max_seq_measured=None,
        slots_measured=case.SLOTS_MEASURED,
        slots=case.SLOTS_TARGET,
        candidates="paging,tiering",
        quant_to="fp8",
        margin="10%",
        sensitivity="10%",
        weights_policy="fixed",
        weights_max=None,
        weights_delta=None,
        trace=None,
        decode_rate=None,
        speed=None,
        rate=None,
        out=args.out,
        no_record=args.no_record,
        force=args.force,
        json=args.json,
    )
    return gate_from_args(ns, case.measurement(), notes=list(case.ERRATA))
