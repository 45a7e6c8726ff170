"""Options and steps shared by ``kvgate measure`` and ``kvgate run`` (thin glue, no logic)."""

from __future__ import annotations

import argparse
import os
import sys
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.measure.fallback import probe_writable
from kvgate.measure.runner import DEFAULT_SETTLE_S, RunOutcome, measure_command


def add_measure_arguments(p: argparse.ArgumentParser, *, with_out: bool = True) -> None:
    """``--gpu --domain --interval --settle --kill-leftovers [--out --plot --force]`` and
    ``-- CMD ARGS...``: :func:`kvgate.commands._args.add_measure_flags` (each flag spelled once)."""
    from kvgate.commands._args import add_measure_flags

    add_measure_flags(p, with_out=with_out)


def command_of(args: argparse.Namespace) -> list[str]:
    """The command after ``--`` (:func:`kvgate.commands._args.measure_options_from_args`).

    Raises:
        KvgateError: none given, or a bad ``--interval`` / ``--settle``.
    """
    from kvgate.commands._args import measure_options_from_args

    return list(measure_options_from_args(args).command)


def default_out(prefix: str) -> str:
    """A default output name that two runs started at once never share, in the records
    folder (``./kvgate-records/``, :data:`kvgate.gate.record.DEFAULT_DIR`, where the
    decision records go too; created when first written):
    ``kvgate-records/<prefix>-<UTC date>-<time>.<microseconds>-p<pid>.json``, e.g.
    ``kvgate-records/kvgate-measure-20261201-001502.123456-p4242.json`` (sorts by time; the
    pid separates runs started in the same microsecond; a name still taken when the file
    is written gets a random suffix, :mod:`kvgate.measure.fallback`)."""
    from kvgate.gate.record import DEFAULT_DIR

    stamp = datetime.now(timezone.utc).strftime('%Y%m%d-%H%M%S.%f')
    name = os.path.join(DEFAULT_DIR, f"{prefix}-{stamp}-p{os.getpid()}.json")
    if os.path.lexists(name):  # a clock stepped back, or a frozen one: never refuse a default name
        from kvgate.measure.fallback import unique_name

        name = str(unique_name(Path(name)))
    return name


def run_measured(args: argparse.Namespace, cmd: list[str]) -> RunOutcome:
    """Run ``cmd`` under the sampler with the measurement flags
    (:func:`kvgate.commands._args.measure_options_from_args`); a status line only on a
    TTY and without ``--json``.

    With ``--json`` CMD's standard output goes to kvgate's standard error, so kvgate's
    standard output holds only its JSON document whatever CMD prints.
    """
    from kvgate.commands._args import measure_options_from_args
    from kvgate.measure.report import status_printer

    opts = measure_options_from_args(args)
    as_json = bool(getattr(args, "json", False))
    live = _isatty(sys.stderr) and not as_json
    show = status_printer() if live else None
    try:
        return measure_command(cmd, domain=opts.domain, gpus=opts.gpus, interval_s=opts.interval_s,
                               settle_s=DEFAULT_SETTLE_S if opts.settle_s is None else opts.settle_s, on_status=show, stdout_to_stderr=as_json,
                               kill_leftovers=opts.kill_leftovers)
    finally:
        if show is not None:
            show(None)


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (ValueError, OSError, AttributeError):
        return False


def save(doc: dict[str, Any], out: str, *, force: bool, notes: list[str] | None = None) -> str | None:
    """Write the measurement document atomically; if that fails, to a fallback place
    (:func:`kvgate.measure.fallback.save_json`), with a WARNING on stderr and in
    ``notes``. Returns the path written (``None``: printed to stderr only)."""
    from kvgate.measure.fallback import save_json

    saved = save_json(out, doc, force=force, what="measurement")
    if saved.warning:
        _warn(saved.warning)
        if notes is not None:
            notes.append(saved.warning)
    return saved.path


def _warn(text: str) -> None:
    try:
        print(f"WARNING: {text}", file=sys.stderr)
    except OSError:  # the terminal went away (SIGHUP): the file is what matters
        pass


def check_outputs(named: list[tuple[str, str | None]], *, force: bool,
                  directories: list[tuple[str, str]] = ()) -> None:
    """Check every output file before the workload runs (not after an hour of it).

    ``named`` pairs an option with its file (``None`` skipped); ``directories`` pairs an
    option with a directory that outputs go into (a record directory).

    Each place is probed by creating and removing a file there
    (:func:`kvgate.measure.fallback.probe_writable`): a read-only, missing-permission or
    full directory is refused before the workload runs.

    Raises:
        KvgateError: a file path that is an existing directory; two outputs that are the
            same file (after resolving), or a file that is also an output directory; a
            place that cannot be written.
        OutputExistsError: a file exists and ``force`` is false.
    """
    seen: dict[Path, str] = {}
    for opt, path in named:
        if not path:
            continue
        p = Path(path)
        if p.is_dir():
            raise KvgateError(f"{opt} {path} is a directory, not a file",
                              hint=f"give a file name, e.g. {p / ('plot.png' if opt == '--plot' else 'out.json')}")
        key = p.resolve()
        if key in seen:
            raise KvgateError(f"{seen[key]} and {opt} are the same file: {path}",
                              hint="give each output its own file name")
        seen[key] = opt
        probe_writable(p, option=opt, force=force)
    for opt, path in directories:
        key = Path(path).resolve()
        if key in seen:
            raise KvgateError(f"{seen[key]} {path} is also the {opt} directory",
                              hint="give each output its own name (a record file for --out ends in .json)")
        probe_writable(Path(path) / ".kvgate-probe", option=opt, force=True)
