"""``kvgate gate``: geometry + a measurement + a target → verdicts, table, boundaries, record."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any

from kvgate.commands._args import add_engine_flags, add_gate_flags, add_replay_flags, decision_options_from_args
from kvgate.errors import KvgateError
from kvgate.options import GateOptions
from kvgate.output import emit

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.measure.measurement import Measurement

NAME = "gate"
HELP = "verdict for paging / tiering / kv-quant from a measurement and a target, with flip boundaries"
DESCRIPTION = """\
Decide whether a KV-cache optimization pays, from a measured peak.

  P_target = P + (N − n)·S(L)  [+ n·(S(L) − S(L0)) if max_seq changed]
  not-a-bottleneck  if P_target ≤ (1 − m)·T
  pays              if P_target − R ≤ (1 − m)·T   (R: the candidate's reclaim)
  insufficient      otherwise

The measurement comes from --measurement (a kvgate measurement JSON), --smi (an
`nvidia-smi --query-gpu=... --format=csv` log) or --total/--idle/--peak.

  kvgate gate --model qwen3-30b-a3b --max-seq 8192 --kv-format int8-f32scale \\
      --slots-measured 4 --slots 8 --total 32607MiB --idle 936MiB --peak 19625MiB

Engine flags work as the engine means them (one engine at a time), e.g. vLLM's
--max-model-len 8192 --max-num-seqs 8 --kv-cache-dtype fp8 --block-size 32, or
llama.cpp's -c 65536 -np 8 -ctk q8_0 -ctv q8_0 (-c is the whole context: 8,192 each).
"""

TARGET_SLOTS_HELP = "target concurrent slots N (vLLM --max-num-seqs; llama.cpp -np)"
TARGET_MAX_SEQ_HELP = "target max_seq L (vLLM --max-model-len; llama.cpp -c, whole context / -np)"


def add_measurement_flags(p: argparse.ArgumentParser) -> None:
    """``--measurement --domain --smi --total --idle --peak --device-name``."""
    src = p.add_argument_group("measurement (one of)")
    src.add_argument("--measurement", help="a kvgate measurement JSON (from `kvgate measure`)")
    src.add_argument("--domain", default=None, help="which domain of a multi-GPU measurement (e.g. gpu:1)")
    src.add_argument("--smi", help="an `nvidia-smi --query-gpu=... --format=csv` log")
    src.add_argument("--total", help="memory.total, e.g. 32607MiB, 24GiB, 32.6GB")
    src.add_argument("--idle", help="idle used before the workload, e.g. 936MiB")
    src.add_argument("--peak", help="peak used while the workload ran, e.g. 19625MiB")
    src.add_argument("--device-name", default=None, help="device name for the basis of --total/--peak")


def add_gate_arguments(p: argparse.ArgumentParser, *, measurement_required: bool = True) -> None:
    """All ``gate`` options; ``run`` and ``demo`` reuse them (without the measurement
    source, which they supply themselves)."""
    add_engine_flags(p, model="optional" if measurement_required else "required", slots_help=TARGET_SLOTS_HELP,
                     max_seq_help=TARGET_MAX_SEQ_HELP)
    if measurement_required:
        add_measurement_flags(p)
        from kvgate.commands._engine_log import add_engine_log_arguments

        add_engine_log_arguments(p)
    add_gate_flags(p)
    add_replay_flags(p)


def measurement_from_args(args: argparse.Namespace, *, tp: int = 1) -> tuple[Measurement, dict[str, Any] | None, list[str]]:
    """The measurement named by --measurement, --smi or --total/--idle/--peak, its
    document (``None`` for typed-in numbers) and the selection's notes (which GPU gates
    and why, every GPU's figures, the log's skipped lines).

    Raises:
        KvgateError: none or several sources, missing --total/--peak, bad units, peak > total.
    """
    from kvgate.measure.measurement import Basis, Measurement
    from kvgate.units import parse_bytes

    given = [n for n in ("measurement", "smi") if getattr(args, n, None)]
    manual = any(getattr(args, n, None) for n in ("total", "peak", "idle"))
    if manual:
        given.append("total/peak")
    if len(given) != 1:
        raise KvgateError(
            "give exactly one measurement: --measurement FILE, --smi LOG.csv, or --total/--peak"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    if args.measurement or args.smi:
        from kvgate.atomicio import read_json
        from kvgate.measure.select import select_measurement

        if args.measurement:
            doc = read_json(args.measurement, what="measurement")
        else:
            from kvgate.measure.smi_csv import load_smi_csv

            doc = load_smi_csv(args.smi)
        sel = select_measurement(doc, domain=args.domain, tp=tp)
        return sel.measurement, doc, sel.notes()
    if not args.total or not args.peak:
        raise KvgateError("--total and --peak are both needed for an explicit measurement")
    total = parse_bytes(args.total)
    peak = parse_bytes(args.peak, allow_zero=True)
    idle = parse_bytes(args.idle, allow_zero=True) if args.idle else None
    if idle is not None and idle > peak:
        raise KvgateError(f"idle used ({idle:,} B) is above the peak ({peak:,} B)",
                          hint="the peak is the largest used while the workload ran; check --idle and --peak")
    m = Measurement(
        total_bytes=total,
        peak_used_bytes=peak,
        idle_used_bytes=idle,
        # Typed-in numbers come from elsewhere: this machine's CPU is not their basis.
        basis=Basis(domain="gpu:0", device_name=args.device_name, total_bytes=total, sampler="manual",
                    source="command line"),
    )
    return m, None, []


def emit_decision(args: argparse.Namespace, rec: dict[str, Any], gate: GateOptions, *, fallback: bool = False) -> int:
    """Write the record (unless ``--no-record``), print it. Returns the exit status:
    :data:`~kvgate.errors.EXIT_OK`, or :data:`~kvgate.errors.EXIT_NO_VERDICT` when the
    measured workload failed.

    ``fallback`` (after a measured workload, ``run``): an unwritable ``--out`` never loses
    the decision, it goes to a fallback place said on stderr
    (:func:`kvgate.gate.record.save_record`); else (typed-in numbers) it is refused, exit 2.
    """
    from kvgate.errors import EXIT_NO_VERDICT, EXIT_OK
    from kvgate.gate.record import save_record, write_record
    from kvgate.gate.render import render_text

    path = None
    if not gate.no_record:
        if fallback:
            saved = save_record(rec, gate.out, force=gate.force)
            if saved.warning:
                print(f"WARNING: {saved.warning}", file=sys.stderr)
            path = saved.path
        else:
            path = str(write_record(rec, gate.out, force=gate.force))
    payload = dict(rec)
    payload["record_path"] = path
    emit(args.json, payload, render_text(rec, record_path=path))
    return EXIT_OK if rec["status"] == "ok" else EXIT_NO_VERDICT


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_gate_arguments(p, measurement_required=True)


def run(args: argparse.Namespace) -> int:
    if getattr(args, "engine_log", None):
        from kvgate.commands._engine_log import run_engine_gate

        given = [f for f, v in (("--measurement", args.measurement), ("--smi", args.smi),
                                ("--idle", args.idle), ("--peak", args.peak)) if v is not None]
        if given:  # the pool comes from the log: a measurement beside it would be silently unused
            raise KvgateError(f"--engine-log takes the KV pool from the log; {', '.join(given)} cannot be used with it",
                              hint="drop them, or gate a measurement without --engine-log (with it, --total "
                                   "names another GPU for a what-if)")
        return run_engine_gate(args)
    if not getattr(args, "model", None):
        raise KvgateError("the gate needs --model (config.json, model directory, GGUF file or preset)",
                          hint="or --engine-log FILE to gate the KV pool a vLLM / SGLang / llama.cpp log shows")
    from kvgate.session import GatePlan

    engine, gate, replay = decision_options_from_args(args)
    m, doc, notes = measurement_from_args(args, tp=engine.tp)
    d = GatePlan(engine, gate, replay).decide(m, notes=notes, measurement_doc=doc)
    return emit_decision(args, d.record, gate)
