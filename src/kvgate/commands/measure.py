"""``kvgate measure``: sample GPU (NVML) or host memory while a command runs."""

from __future__ import annotations

import argparse

from kvgate.commands._measure import add_measure_arguments, check_outputs, command_of, default_out, run_measured, save
from kvgate.errors import EXIT_INPUT, KvgateError
from kvgate.measure.select import select_domain
from kvgate.output import emit

NAME = "measure"
HELP = "run a command and measure its real memory peak (NVML, fast sampler) or host RAM"
DESCRIPTION = """\
Sample idle memory for --settle, start CMD in its own process group, and sample until it
exits. Records total T, idle U0, peak P (used = total − free, as an OOM counts it), the
time of the peak, headroom H = T − P, NVML v2 driver-reserved bytes, the largest gap
between samples, a bounded timeline and the basis (device, driver, CUDA, NVML, command,
exit code, times).

  kvgate measure --out run.json --plot run.png -- python serve.py --streams 4
  kvgate measure --interval 500ms -- ...     # the write-up's nvidia-smi -lms 500 method
  kvgate measure --domain host -- ./llama-server ...

A non-zero exit or a signal marks the measurement failed; Ctrl-C/SIGTERM stops CMD's
whole process group and saves the partial measurement as interrupted. Either way no
verdict should be based on it. Exit status: 0 when CMD succeeded; 5 when CMD failed or
was killed (its own exit code, 128 + N for signal N, is in the measurement and the
output); 128 + N only when kvgate itself was stopped by signal N; 127 when CMD is not
found; 2 when the measurement could not be written anywhere.
CMD runs in its own process group: it cannot read the terminal (stdin is /dev/null
then); pipe its input instead. A closed terminal (SIGHUP) is handled like SIGTERM; if
kvgate is killed outright CMD is killed too (Linux parent-death signal and a watchdog).
Processes CMD leaves running after it exits are reported; --kill-leftovers stops them.

Every output place is probed (a file created and removed there) before CMD starts. If
the measurement still cannot be written at the end, it goes to $XDG_STATE_HOME/kvgate/
(default ~/.local/state/kvgate/), else <tmp>/kvgate-<uid>/, with a WARNING saying where;
as a last resort to standard error (exit status 2). The default name,
kvgate-records/kvgate-measure-<UTC date>-<time>.<µs>-p<pid>.json (the folder the
decision records go to), never collides between runs.

With --json, kvgate's standard output is one JSON document: CMD's own standard output
goes to kvgate's standard error. With several GPUs (--gpu all) every GPU is shown and
the one with the least headroom is named; a gate on this file uses that one by default.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_measure_arguments(p)


def run(args: argparse.Namespace) -> int:
    cmd = command_of(args)
    out = args.out or default_out("kvgate-measure")
    check_outputs([("--out", out), ("--plot", args.plot)], force=args.force)  # probed before the workload
    outcome = run_measured(args, cmd)
    path = save(outcome.document, out, force=args.force, notes=outcome.notes)
    sel = select_domain(outcome.measurements)
    plot_path = None
    if args.plot:
        from kvgate.measure.plot import plot_measurement

        try:
            plot_path = plot_measurement(sel.measurement, args.plot, force=args.force,
                                         title=f"kvgate measure: {' '.join(cmd)}"[:90])
        except KvgateError as exc:  # the measurement is saved; a lost chart is only a warning
            outcome.notes.append(f"plot not written: {exc.message}")
    from kvgate.measure.report import render_outcome

    payload = {**outcome.document, "measurement_path": path, "plot_path": plot_path, "notes": outcome.notes,
               "least_headroom_domain": sel.domain}
    emit(args.json, payload, render_outcome(outcome, out_path=path, plot_path=plot_path))
    if path is None and not outcome.stopped_by:
        return EXIT_INPUT  # no file could be written anywhere; the document went to stderr
    return outcome.kvgate_exit_code
