"""``kvgate run``: measure a workload (at one or more concurrency levels), gate, record."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kvgate.commands._measure import add_measure_arguments, check_outputs, command_of, default_out, run_measured, save
from kvgate.commands.gate import add_gate_arguments, gate_from_args
from kvgate.errors import KvgateError
from kvgate.measure.measurement import Measurement
from kvgate.measure.runner import RunOutcome
from kvgate.measure.select import select_domain

NAME = "run"
HELP = "measure a workload on this machine, then gate and record the decision (the main job on a GPU)"
DESCRIPTION = """\
Run the workload under `kvgate measure`, then `kvgate gate` on what was measured, then
write the decision record.

  kvgate run --model qwen3-30b-a3b --max-seq 8192 --slots-measured 4 --slots 8 \\
      -- python serve.py --streams 4
  kvgate run --model qwen3-30b-a3b --max-seq 8192 --slots 8 --concurrency 2,4 \\
      -- python benchmarks/hf_static_workload.py --streams {n}

With --concurrency, CMD runs once per level with {n} replaced by the level; the peaks
give a fitted marginal bytes per sequence (KV plus per-sequence activations), shown
beside the KV-only slot bytes S, and the target is projected both ways. The gate uses
the run at --slots-measured if it is one of the levels, else the largest level.

With three or more levels the output shows the fit's residuals, the marginal per
sequence between levels and the projected interval at --slots (lowest to highest
marginal seen); the conservative end is compared with the gate limit, and when it fits
on the card the advice names the --concurrency list that measures the target itself.
A fit whose marginal per sequence is below the KV slot bytes S (a negative per-sequence
overhead: the figure does not see each sequence's KV) is refused: exit 2, no verdict,
the measurements kept. On the host each level is fitted on its process-tree peak.

Every GPU is measured by default (--gpu all) and shown; the one with the least headroom
among those the workload used gates (under --tp N all ranks are shown, the worst gates).

If a run fails (non-zero exit, a signal) or is interrupted (Ctrl-C, SIGTERM, SIGHUP), its
measurement is saved marked so, later levels are not run, and the record says no-verdict
with the exit code: never a verdict from partial data. If kvgate is killed outright the
workload is killed too. Every output place is probed before the first level runs; a
measurement that cannot be written at the end goes to $XDG_STATE_HOME/kvgate/ (or
<tmp>/kvgate-<uid>/) with a WARNING saying where. With --json the workload's standard
output goes to kvgate's standard error: standard output is one JSON document.
Exit status: 0, 2 for an error, 5 for no-verdict, 128 + signal when kvgate itself was
stopped.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_gate_arguments(p, measurement_required=False)
    r = p.add_argument_group("run")
    r.add_argument("--concurrency", default=None,
                   help="comma list of concurrency levels, e.g. 2,4; {n} in CMD is replaced by each")
    r.add_argument("--measurement-out", default=None,
                   help="measurement JSON (default kvgate-run-<UTC time>.<µs>-p<pid>.json; -n<level> added per level)")
    r.add_argument("--plot", default=None, help="PNG of the gated run with the projected peaks at --slots")
    add_measure_arguments(p, with_out=False)


def levels_of(args: argparse.Namespace, cmd: list[str]) -> list[int] | None:
    """The ``--concurrency`` levels (sorted, distinct), or ``None`` for one plain run.

    Raises:
        KvgateError: a level that is not a positive integer, or CMD without ``{n}``.
    """
    if not args.concurrency:
        return None
    try:
        levels = sorted({int(x) for x in args.concurrency.split(",") if x.strip()})
    except ValueError:
        raise KvgateError(f"--concurrency must be a comma list of integers, got {args.concurrency!r}") from None
    if not levels or levels[0] <= 0:
        raise KvgateError(f"--concurrency levels must be positive, got {args.concurrency!r}")
    if not any("{n}" in a for a in cmd):
        raise KvgateError("--concurrency needs {n} in the command, where the level goes",
                          hint="e.g. -- python serve.py --streams {n}")
    return levels


def _out_paths(args: argparse.Namespace, levels: list[int] | None) -> list[str]:
    base = args.measurement_out or default_out("kvgate-run")
    if not levels or len(levels) == 1:
        return [base]
    p = Path(base)
    return [str(p.with_name(f"{p.stem}-n{n}{p.suffix or '.json'}")) for n in levels]


def _gated(outcomes: list[tuple[int, RunOutcome]], slots_measured: int) -> tuple[int, RunOutcome]:
    for n, o in outcomes:
        if o.status != "ok":
            return n, o  # a failed run decides: no-verdict
    for n, o in outcomes:
        if n == slots_measured:
            return n, o
    return outcomes[-1]


def validate_gate_options(args: argparse.Namespace) -> None:
    """Check every gate option before the workload runs (model, formats, layout,
    candidates, margin, weights options, --trace), so a typo costs no run.

    Builds the gate's inputs against a placeholder measurement (1 PiB total, a 512 TiB
    peak, no idle: a peak of 0 would fail the "the peak must hold the measured slots"
    check, and no real device's peak reaches 512 TiB) with ``--trace`` left out (replaying it is the slow part), then loads the trace
    and converts its arrivals to decode steps, which catches every trace error.

    Raises:
        KvgateError: whatever :func:`kvgate.commands.gate.inputs_from_args`,
            :func:`kvgate.trace.load_trace` or :func:`kvgate.replay.arrival_steps` raise.
    """
    from kvgate.commands.gate import inputs_from_args

    placeholder = Measurement(total_bytes=1 << 50, peak_used_bytes=1 << 49, idle_used_bytes=0)
    trace = args.trace
    args.trace = None
    try:
        inputs_from_args(args, placeholder)
    finally:
        args.trace = trace
    if trace:
        from kvgate.replay.simulate import DEFAULT_DECODE_RATE, arrival_steps
        from kvgate.replay.trace import load_trace

        if args.slots < 1:
            raise KvgateError("--trace needs at least one target slot (--slots N ≥ 1)")
        t = load_trace(trace, rate=args.rate, seed=getattr(args, "seed", 0) or 0,
                       time_unit=getattr(args, "time_unit", None))
        arrival_steps(t.arrival_s, speed=args.speed or 1.0, decode_rate=args.decode_rate or DEFAULT_DECODE_RATE)


def check_run_outputs(args: argparse.Namespace, outs: list[str]) -> None:
    """Refuse, before the workload, outputs that exist (without --force), are
    directories, or collide: a measurement, the plot and the record must be different files.

    Raises:
        KvgateError: see :func:`kvgate.commands._measure.check_outputs`; an --out that
            is an existing file not ending in .json.
    """
    named: list[tuple[str, str | None]] = [("--measurement-out", o) for o in outs] + [("--plot", args.plot)]
    dirs: list[tuple[str, str]] = []
    if not args.no_record:
        if args.out and args.out.endswith(".json"):
            named += [("--out", args.out), ("--out (its Markdown)", str(Path(args.out).with_suffix(".md")))]
        else:
            from kvgate.gate.record import DEFAULT_DIR

            d = args.out or DEFAULT_DIR
            if Path(d).exists() and not Path(d).is_dir():
                raise KvgateError(f"--out {d} is an existing file, not a directory or a .json record",
                                  hint="give a directory, or a file name ending in .json")
            dirs.append(("--out record", d))
    check_outputs(named, force=args.force, directories=dirs)


def run(args: argparse.Namespace) -> int:
    cmd = command_of(args)
    levels = levels_of(args, cmd)
    validate_gate_options(args)  # all before the workload, not after it
    outs = _out_paths(args, levels)
    check_run_outputs(args, outs)  # every output place probed by writing a file there
    outcomes: list[tuple[int, RunOutcome]] = []
    notes: list[str] = []
    for i, n in enumerate(levels or [None]):
        this = [a.replace("{n}", str(n if n is not None else args.slots_measured)) for a in cmd]
        _say(f"[kvgate] measuring: {' '.join(this)}")
        o = run_measured(args, this)
        path = save(o.document, outs[i], force=args.force, notes=notes)
        outcomes.append((n if n is not None else args.slots_measured, o))
        where = path or "standard error (no file could be written)"
        notes.append(f"measurement at {outcomes[-1][0]} sequence(s): {where} ({o.status}, exit code {o.exit_code})")
        if o.status != "ok":
            break
    n, o = _gated(outcomes, args.slots_measured)
    if levels and n != args.slots_measured:
        notes.append(f"--slots-measured {args.slots_measured} is not a measured level: gating the run at {n}")
        args.slots_measured = n
    sel = select_domain(o.measurements, tp=args.tp)
    m = sel.measurement
    notes += sel.notes(measurement_warnings=False)  # the run's own warnings are in o.notes
    fit_points = None
    if levels and len(levels) > 1 and all(x.status == "ok" for _, x in outcomes):
        fit_points = [(k, _fit_peak(_same_domain(x, m.domain), m)) for k, x in outcomes]
        if any(_fit_peak(_same_domain(x, m.domain), m) != _same_domain(x, m.domain).peak_used_bytes
               for _, x in outcomes):
            notes.append("host sweep fitted on each level's process-tree peak over the gated run's idle U0 "
                         "(the host's idle moves between runs with everything else on it)")
        notes += _sweep_notes(args, m, fit_points)
    if args.plot:
        _plot(args, m, fit_points, notes)
    rc = gate_from_args(args, m, fit_points=fit_points, measurement_doc=o.document, notes=notes + o.notes,
                        fallback=True)
    return o.kvgate_exit_code if o.stopped_by else rc


def _say(text: str) -> None:
    """A progress line on stderr; a closed terminal (SIGHUP) does not stop the run."""
    try:
        print(text, file=sys.stderr)
    except OSError:
        pass


def _same_domain(o: RunOutcome, domain: str) -> Measurement:
    """The run's measurement of ``domain`` (each level is fitted on the gated domain)."""
    for x in o.measurements:
        if x.domain == domain:
            return x
    return select_domain(o.measurements).measurement


def _fit_peak(x: Measurement, gated: Measurement) -> int:
    """The peak of one level for the fit: its P, except on the host when P is the idle +
    process-tree figure (:func:`kvgate.measure.host.best_host_peak`), where the gated
    run's U0 replaces the level's own, so only the workload's own bytes differ."""
    rule = str(x.extra.get("peak_rule") or "")
    tree = x.extra.get("tree_peak_bytes")
    if rule.startswith("idle") and tree is not None and gated.idle_used_bytes is not None:
        return min(gated.idle_used_bytes + int(tree), gated.total_bytes)
    return x.peak_used_bytes


def _sweep_notes(args: argparse.Namespace, m: Measurement, fit_points: list[tuple[int, int]]) -> list[str]:
    """The sweep's residuals, interval and advice (:mod:`kvgate.measure.projection`);
    refuses a fit with a negative per-sequence overhead.

    Raises:
        NegativeOverheadError: the marginal per sequence is below the KV slot bytes.
    """
    from kvgate.commands.gate import inputs_from_args
    from kvgate.measure.projection import check_overhead, project_sweep

    inputs = inputs_from_args(args, m, fit_points=fit_points)
    gate, _ = inputs.build_gate(check_peak=False)
    sc = inputs.scenario
    s_l0, s_l = gate.slot_fn(sc.max_seq_measured), gate.slot_fn(sc.max_seq)
    kv_only = gate.kv_only_target(sc)  # = P + W + N·S(L) − n·S(L0), W the weights terms
    weights = kv_only - sc.peak_bytes - sc.slots_target * s_l + sc.slots_measured * s_l0
    proj = project_sweep(fit_points, from_level=sc.slots_measured, from_peak=sc.peak_bytes,
                         target=sc.slots_target, total_bytes=sc.total_bytes, limit_bytes=sc.limit,
                         kv_only_bytes=kv_only, fit_offset_bytes=weights + sc.slots_target * (s_l - s_l0))
    check_overhead(proj.slope, s_l0, where=f" (levels {', '.join(str(k) for k, _ in fit_points)}, {m.domain})")
    lines = proj.lines()
    if proj.has_interval and proj.conservative_bytes > sc.limit >= gate.target(sc):
        lines.append("WARNING: the fit fits under the limit but the interval's conservative end does not: "
                     "treat this verdict as not-a-bottleneck only if the workload's growth really flattens; "
                     "measure the target to be sure")
    return lines


def _plot(args: argparse.Namespace, m: Measurement, fit_points, notes: list[str]) -> None:
    """The gated run's chart, with the projected peaks at --slots when there is a verdict."""
    from kvgate.measure.plot import plot_measurement

    projections = []
    if m.status == "ok":
        from kvgate.commands.gate import inputs_from_args
        from kvgate.gate.decision import decide

        proj = decide(inputs_from_args(args, m, fit_points=fit_points), m).get("projection") or {}
        if proj.get("kv_only_bytes") is not None:
            projections.append((int(proj["kv_only_bytes"]), f"projected peak at {args.slots} slots, KV only"))
        if proj.get("fit_bytes") is not None:
            projections.append((int(proj["fit_bytes"]), f"projected peak at {args.slots} slots, concurrency fit"))
        if proj.get("limit_bytes") is not None:
            projections.append((int(proj["limit_bytes"]), f"gate limit (1 − margin {args.margin})·T"))
    path = plot_measurement(m, args.plot, force=args.force, projections=projections,
                            title=f"kvgate run: {args.model}, max_seq {args.max_seq}, {args.slots_measured} → {args.slots} slots")
    notes.append(f"plot: {path}")
