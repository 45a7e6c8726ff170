"""``kvgate gate``: geometry + a measurement + a target → verdicts, table, boundaries, record."""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any

from kvgate.argtypes import nonneg_int, parse_fraction, positive_float, positive_int
from kvgate.atomicio import read_json
from kvgate.gate.decision import DecisionInputs, decide
from kvgate.errors import KvgateError
from kvgate.gate.verdict import CANDIDATES, Scenario
from kvgate.geometry import LAYOUTS
from kvgate.measure.measurement import Basis, Measurement, load_measurement_file
from kvgate.model import load_model
from kvgate.output import emit
from kvgate.gate.record import write_record
from kvgate.gate.render import render_text
from kvgate.units import parse_bytes
from kvgate.gate.weights_policy import POLICIES, policy_from_env

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
"""


def add_model_arguments(p: argparse.ArgumentParser, *, model_positional: bool = False) -> None:
    """Model and geometry options shared by ``geometry``, ``gate``, ``run``, ``replay``."""
    if model_positional:
        p.add_argument("model", metavar="MODEL", help="config.json, model directory, GGUF file, or preset name")
    else:
        p.add_argument("--model", required=True, help="config.json, model directory, GGUF file, or preset name")
    p.add_argument("--kv-format", "--kv-format-k", dest="kv_format", default="bf16", help="KV format of K (and V): bf16, fp16, fp32, fp8, "
                   "fp8-f32scale, int8-f32scale, q8_0, q4_0, ... (default bf16)")
    p.add_argument("--kv-format-v", default=None, help="KV format of V when it differs from K")
    p.add_argument("--tp", type=positive_int, default=1, help="tensor-parallel size; figures are per rank (default 1)")
    p.add_argument("--layout", default="contiguous", help=f"engine layout: {', '.join(LAYOUTS)} (default contiguous)")
    p.add_argument("--sliding-full", action="store_true",
                   help="allocate sliding-window layers at full length (vLLM: --disable-hybrid-kv-cache-manager; "
                        "llama.cpp: --swa-full)")
    e = p.add_argument_group("engine layout options")
    e.add_argument("--block-size", type=positive_int, default=None, help="vllm: positions per block (default 16)")
    e.add_argument("--max-num-batched-tokens", type=positive_int, default=None,
                   help="vllm: the scheduler's token budget (sliding-window blocks; default 2048)")
    e.add_argument("--disable-hybrid-kv-cache-manager", action="store_true",
                   help="vllm: sliding layers allocated at full length")
    e.add_argument("--n-seq", type=positive_int, default=None, help="llama.cpp: parallel sequences (-np)")
    e.add_argument("--kv-unified", action="store_true", help="llama.cpp: one unified KV cache (--kv-unified)")
    e.add_argument("--swa-full", action="store_true", help="llama.cpp: full-size SWA cache (--swa-full)")
    e.add_argument("--n-ubatch", type=positive_int, default=None, help="llama.cpp: physical batch size (-ub)")


def layout_options(args: argparse.Namespace) -> dict[str, Any]:
    """The ``layout`` dict for :class:`DecisionInputs` from CLI options (every option
    spelled out, so a record rebuilds the layout exactly).

    Raises:
        GeometryError: an option the chosen layout does not take.
    """
    from kvgate.geometry import layout_options_from_args

    return {"name": args.layout, **layout_options_from_args(args)}


def add_gate_arguments(p: argparse.ArgumentParser, *, measurement_required: bool = True) -> None:
    """All ``gate`` options; ``run`` reuses them (it supplies the measurement itself)."""
    add_model_arguments(p)
    p.add_argument("--max-seq", type=positive_int, required=True, help="target max_seq L (positions per slot)")
    p.add_argument("--max-seq-measured", type=positive_int, default=None,
                   help="max_seq L0 when the peak was measured (default: --max-seq)")
    p.add_argument("--slots-measured", type=nonneg_int, default=1,
                   help="slots n allocated at the measured peak (default 1)")
    p.add_argument("--slots", type=nonneg_int, required=True, help="target concurrent slots N")
    if measurement_required:
        src = p.add_argument_group("measurement (one of)")
        src.add_argument("--measurement", help="a kvgate measurement JSON (from `kvgate measure`)")
        src.add_argument("--domain", default=None, help="which domain of a multi-GPU measurement (e.g. gpu:1)")
        src.add_argument("--smi", help="an `nvidia-smi --query-gpu=... --format=csv` log")
        src.add_argument("--total", help="memory.total, e.g. 32607MiB, 24GiB, 32.6GB")
        src.add_argument("--idle", help="idle used before the workload, e.g. 936MiB")
        src.add_argument("--peak", help="peak used while the workload ran, e.g. 19625MiB")
        src.add_argument("--device-name", default=None, help="device name for the basis of --total/--peak")
    g = p.add_argument_group("gate")
    g.add_argument("--candidates", default="paging,tiering",
                   help=f"comma list of {', '.join(CANDIDATES)} (default paging,tiering)")
    g.add_argument("--quant-to", default="fp8", help="target KV format for kv-quant (default fp8)")
    g.add_argument("--margin", default="10%", help="safety margin as a share of total (default 10%%)")
    g.add_argument("--sensitivity", default="10%", help="flag when N·S / headroom exceeds this (default 10%%)")
    g.add_argument("--weights-policy", choices=POLICIES, default="fixed",
                   help="fixed: weights don't move with card size; half-free: the write-up engine's "
                        "wcache rule (half of free, cap 24 GiB, floor 256 MiB, VLLM_CUDA_WCACHE_MB)")
    g.add_argument("--weights-max", default=None, help="half-free: weights that can be resident at most")
    g.add_argument("--weights-delta", default=None, help="what-if: resident weights heavier by this much")
    g.add_argument("--trace", default=None,
                   help="a request trace (CSV/JSONL): paging's reclaim measured by replaying it (kvgate replay) "
                        "instead of the bound N·S")
    g.add_argument("--decode-rate", type=positive_float, default=None, help="--trace: tokens/s per sequence (default 50)")
    g.add_argument("--speed", type=positive_float, default=None, help="--trace: arrival-time speed-up (default 1.0)")
    g.add_argument("--rate", type=positive_float, default=None, help="--trace without timestamps: Poisson arrivals per second")
    out = p.add_argument_group("record")
    out.add_argument("--out", default=None, help="record file (.json) or directory (default ./kvgate-records)")
    out.add_argument("--no-record", action="store_true", help="don't write a record")
    out.add_argument("--force", action="store_true", help="overwrite an existing record")


def measurement_from_args(args: argparse.Namespace) -> tuple[Measurement, dict[str, Any] | None]:
    """The measurement named by --measurement, --smi or --total/--idle/--peak.

    Raises:
        KvgateError: none or several sources, missing --total/--peak, bad units, peak > total.
    """
    given = [n for n in ("measurement", "smi") if getattr(args, n, None)]
    manual = any(getattr(args, n, None) for n in ("total", "peak", "idle"))
    if manual:
        given.append("total/peak")
    if len(given) != 1:
        raise KvgateError(
            "give exactly one measurement: --measurement FILE, --smi LOG.csv, or --total/--peak"
            + (f" (got {', '.join(given)})" if given else ""),
        )
    if args.measurement:
        return load_measurement_file(read_json(args.measurement, what="measurement"), domain=args.domain)
    if args.smi:
        from kvgate.measure.smi_csv import load_smi_csv

        doc = load_smi_csv(args.smi)
        return load_measurement_file(doc, domain=args.domain)
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
    return m, None


def inputs_from_args(args: argparse.Namespace, m: Measurement, *, fit_points=None) -> DecisionInputs:
    """Build :class:`DecisionInputs` from parsed options and a measurement."""
    model = load_model(args.model)
    if model.max_position_embeddings and args.max_seq > model.max_position_embeddings:
        model.notes.append(
            f"max_seq {args.max_seq:,} is beyond the model's max_position_embeddings "
            f"{model.max_position_embeddings:,}"
        )
    margin = parse_fraction(args.margin)
    sens = parse_fraction(args.sensitivity)
    if not (0 <= margin < 1):
        raise KvgateError(f"--margin must be at least 0% and below 100%, got {args.margin}")
    if sens <= 0:
        raise KvgateError(f"--sensitivity must be positive, got {args.sensitivity}")
    sc = Scenario(
        total_bytes=m.total_bytes,
        peak_bytes=m.peak_used_bytes,
        idle_bytes=m.idle_used_bytes,
        slots_measured=args.slots_measured,
        slots_target=args.slots,
        max_seq_measured=args.max_seq_measured or args.max_seq,
        max_seq=args.max_seq,
        weights_delta_bytes=parse_bytes(args.weights_delta, allow_zero=True) if args.weights_delta else 0,
        margin=margin,
        total_measured_bytes=m.total_bytes,
    )
    if args.weights_policy == "half-free" and m.idle_used_bytes is None:
        raise KvgateError("--weights-policy half-free needs the idle used memory U0 (free = T − U0 at engine start)",
                          hint="give --idle, or a measurement that has it")
    if args.weights_max and args.weights_policy != "half-free":
        raise KvgateError("--weights-max applies to --weights-policy half-free only")
    if not getattr(args, "trace", None):
        extra = [f for f in ("decode_rate", "speed", "rate") if getattr(args, f, None) is not None]
        if extra:
            raise KvgateError(f"--{extra[0].replace('_', '-')} applies to --trace only")
    cands = [c.strip() for c in args.candidates.split(",") if c.strip()]
    measured_reclaim = source = None
    if getattr(args, "trace", None):
        replay = trace_reclaim(args, model)
        measured_reclaim = int(replay["measured_reclaim_bytes"])
        model.notes.extend(replay_notes(replay, args.trace))
        source = {
            "trace": str(args.trace),
            "slots": args.slots,
            "block_size": args.block_size or 16,
            "decode_rate": args.decode_rate or 50.0,
            "speed": args.speed or 1.0,
            "rate": args.rate,
            "bound_bytes": replay.get("bound_bytes"),
            "unwritten_at_peak_bytes": replay.get("unwritten_at_peak_bytes"),
        }
    inputs = DecisionInputs(
        model=model,
        scenario=sc,
        kv_format=args.kv_format,
        kv_format_v=args.kv_format_v,
        tp=args.tp,
        layout=layout_options(args),
        candidates=cands,
        quant_to=args.quant_to,
        measured_reclaim_bytes=measured_reclaim,
        measured_reclaim_source=source,
        policy=policy_from_env(
            args.weights_policy,
            m.idle_used_bytes if m.idle_used_bytes is not None else 0,  # fixed ignores it
            parse_bytes(args.weights_max) if args.weights_max else None,
        ),
        fit_points=fit_points,
        sensitivity_threshold=sens,
    )
    inputs.build_gate(check_peak=m.status == "ok")  # validate before any output
    return inputs


def trace_reclaim(args: argparse.Namespace, model) -> dict[str, Any]:
    """Paging reclaim measured by replaying ``--trace`` (see :mod:`kvgate.replay.reclaim`)."""
    from kvgate.replay.reclaim import paging_reclaim_for_gate

    return paging_reclaim_for_gate(args, model)


def replay_notes(replay: dict[str, Any], trace: str) -> list[str]:
    """Notes for the record: bound vs measured reclaim, ratio, warnings, attribution."""
    from kvgate.units import fmt_mib

    bound, got = replay.get("bound_bytes"), replay.get("measured_reclaim_bytes")
    ratio = replay.get("ratio")
    notes = [
        f"paging reclaim measured by replaying {trace}: {fmt_mib(got)} "
        f"against the write-up's bound N·S = {fmt_mib(bound)}"
        + (f" ({ratio:.1%} of the bound)" if isinstance(ratio, (int, float)) else "")
    ]
    notes += [f"replay: {w}" for w in replay.get("warnings") or []]
    if replay.get("attribution"):
        notes.append(str(replay["attribution"]))
    return notes


def gate_from_args(args: argparse.Namespace, measurement: Measurement, *, fit_points=None,
                   measurement_doc: dict[str, Any] | None = None, notes: list[str] | None = None) -> int:
    """Compute, print and record a decision. Returns the exit status (0; 3 for no-verdict)."""
    inputs = inputs_from_args(args, measurement, fit_points=fit_points)
    rec = decide(inputs, measurement, notes=notes, measurement_doc=measurement_doc)
    path = None
    if not args.no_record:
        path = str(write_record(rec, args.out, force=args.force))
    payload = dict(rec)
    payload["record_path"] = path
    emit(args, payload, render_text(rec, record_path=path))
    return 0 if rec["status"] == "ok" else 3


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_gate_arguments(p, measurement_required=True)


def run(args: argparse.Namespace) -> int:
    m, doc = measurement_from_args(args)
    return gate_from_args(args, m, measurement_doc=doc)
