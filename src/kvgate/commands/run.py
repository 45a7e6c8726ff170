"""``kvgate run``: measure a workload (at one or more concurrency levels), gate, record."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from kvgate.commands._args import decision_options_from_args, pct
from kvgate.commands._measure import add_measure_arguments, check_outputs, command_of, default_out, run_measured, save
from kvgate.commands.gate import add_gate_arguments, emit_decision
from kvgate.errors import KvgateError
from kvgate.measure.measurement import Measurement
from kvgate.measure.runner import RunOutcome
from kvgate.measure.select import select_domain
from kvgate.options import GateOptions

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.session import Decision

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
                   help="measurement JSON (default kvgate-records/kvgate-run-<UTC time>.<µs>-p<pid>.json; "
                        "-n<level> added per level)")
    r.add_argument("--plot", default=None, help="PNG of the gated run with the projected peaks at --slots")
    add_measure_arguments(p, with_out=False)


def levels_of(concurrency: str | None, cmd: list[str]) -> list[int] | None:
    """The ``--concurrency`` levels (sorted, distinct), or ``None`` for one plain run.

    Raises:
        KvgateError: a level that is not a positive integer, or CMD without ``{n}``.
    """
    if not concurrency:
        return None
    from kvgate.commands._types import count_list  # noqa: PLC0415

    levels = sorted(set(count_list(concurrency, "--concurrency", minimum=0, example="1,2,4")))  # 1,,2 and 1,000 refused
    if not levels or levels[0] <= 0:
        raise KvgateError(f"--concurrency levels must be positive, got {concurrency!r}")
    if not any("{n}" in a for a in cmd):
        raise KvgateError("--concurrency needs {n} in the command, where the level goes",
                          hint="e.g. -- python serve.py --streams {n}")
    return levels


def _out_paths(measurement_out: str | None, levels: list[int] | None) -> list[str]:
    base = measurement_out or default_out("kvgate-run")
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


def check_run_outputs(outs: list[str], plot: str | None, gate: GateOptions) -> None:
    """Refuse, before the workload, outputs that exist (without --force), are
    directories, or collide: a measurement, the plot and the record must be different files.

    Raises:
        KvgateError: see :func:`kvgate.commands._measure.check_outputs`; an --out that
            is an existing file not ending in .json.
    """
    named: list[tuple[str, str | None]] = [("--measurement-out", o) for o in outs] + [("--plot", plot)]
    dirs: list[tuple[str, str]] = []
    if not gate.no_record:
        if gate.out and gate.out.endswith(".json"):
            named += [("--out", gate.out), ("--out (its Markdown)", str(Path(gate.out).with_suffix(".md")))]
        else:
            from kvgate.gate.record import DEFAULT_DIR

            d = gate.out or DEFAULT_DIR
            if Path(d).exists() and not Path(d).is_dir():
                raise KvgateError(f"--out {d} is an existing file, not a directory or a .json record",
                                  hint="give a directory, or a file name ending in .json")
            dirs.append(("--out record", d))
    check_outputs(named, force=gate.force, directories=dirs)


def run(args: argparse.Namespace) -> int:
    from kvgate.session import GatePlan

    cmd = command_of(args)
    levels = levels_of(args.concurrency, cmd)
    engine, gate, replay = decision_options_from_args(args)
    plan = GatePlan(engine, gate, replay)
    plan.check()  # every option checked before the workload, not after it
    outs = _out_paths(args.measurement_out, levels)
    check_run_outputs(outs, args.plot, gate)  # every output place probed by writing a file there
    outcomes: list[tuple[int, RunOutcome]] = []
    notes: list[str] = []
    for i, n in enumerate(levels or [gate.slots_measured]):
        this = [a.replace("{n}", str(n)) for a in cmd]
        _say(f"[kvgate] measuring: {' '.join(this)}")
        o = run_measured(args, this)
        path = save(o.document, outs[i], force=gate.force, notes=notes)
        outcomes.append((n, o))
        where = path or "standard error (no file could be written)"
        notes.append(f"measurement at {n} sequence(s): {where} ({o.status}, exit code {o.exit_code})")
        if o.status != "ok":
            break
    n, o = _gated(outcomes, gate.slots_measured)
    if levels and n != gate.slots_measured:
        notes.append(f"--slots-measured {gate.slots_measured} is not a measured level: gating the run at {n}")
        plan = plan.for_gate(replace(gate, slots_measured=n))
    sel = select_domain(o.measurements, tp=engine.tp)
    m = sel.measurement
    notes += sel.notes(measurement_warnings=False)  # the run's own warnings are in o.notes
    fit_points = None
    if levels and len(levels) > 1 and all(x.status == "ok" for _, x in outcomes):
        fit_points = [(k, _fit_peak(_same_domain(x, m.domain), m)) for k, x in outcomes]
        if any(p != _same_domain(x, m.domain).peak_used_bytes for (_, p), (_, x) in zip(fit_points, outcomes)):
            notes.append("host sweep fitted on each level's process-tree peak over the gated run's idle U0 "
                         "(the host's idle moves between runs with everything else on it)")
    d = plan.decide(m, fit_points=fit_points, measurement_doc=o.document, notes=notes + o.notes)
    if args.plot:
        d.record["notes"].append(f"plot: {_plot(args.plot, m, d, plan.gate, engine.model)}")
    rc = emit_decision(args, d.record, plan.gate, fallback=True)
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


def _plot(path: str, m: Measurement, d: Decision, gate: GateOptions, model: str | None) -> str:
    """The gated run's chart, with the record's projected peaks at the target when there
    is a verdict. Returns the path written."""
    from kvgate.measure.plot import plot_measurement

    proj = d.record.get("projection") or {}
    sc = d.inputs.scenario
    projections = []
    if proj.get("kv_only_bytes") is not None:
        projections.append((int(proj["kv_only_bytes"]), f"projected peak at {sc.slots_target} slots, KV only"))
    if proj.get("fit_bytes") is not None:
        projections.append((int(proj["fit_bytes"]), f"projected peak at {sc.slots_target} slots, concurrency fit"))
    if proj.get("limit_bytes") is not None:
        projections.append((int(proj["limit_bytes"]), f"gate limit (1 − margin {pct(sc.margin)})·T"))
    return plot_measurement(m, path, force=gate.force, projections=projections,
                            title=f"kvgate run: {model}, max_seq {sc.max_seq}, {sc.slots_measured} → "
                                  f"{sc.slots_target} slots")
