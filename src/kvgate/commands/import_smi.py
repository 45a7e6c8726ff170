"""``kvgate import-smi``: an nvidia-smi CSV log → a kvgate measurement JSON."""

from __future__ import annotations

import argparse

from kvgate.atomicio import check_writable, write_json_atomic
from kvgate.measure.measurement import Measurement
from kvgate.measure.select import select_domain
from kvgate.measure.smi_csv import load_smi_csv
from kvgate.output import emit

NAME = "import-smi"
HELP = "read an `nvidia-smi --query-gpu=... --format=csv` log into a kvgate measurement"
DESCRIPTION = """\
Read a log such as

  nvidia-smi --query-gpu=timestamp,index,name,uuid,driver_version,memory.total,memory.free,\\
memory.used,memory.reserved --format=csv -lms 500 > smi.csv

(with or without nounits, several GPUs, columns in any order) into the same
kvgate.measurement/1 JSON that `kvgate measure` writes. Used = memory.total − memory.free
when logged, else memory.used + memory.reserved, else memory.used (noted). What the log
cannot say (CUDA/NVML versions, command, exit code) is "not available". The idle used is
the GPU's earliest sample. A 500 ms log misses spikes shorter than its largest gap.

Samples out of time order are sorted per GPU, with a WARNING. Lines that cannot be read
(an error nvidia-smi printed mid-log, a last line still being written) are skipped and
counted in a WARNING. A UTF-8 BOM and UTF-16 (a PowerShell redirect) are read. A GPU
whose uuid changes mid-log is an error. A memory.total that changes
for one GPU (the log mixes cards or configurations) and a cell in another unit than its
header (32 GiB under [MiB]) are errors naming the line. Rows where memory.used +
memory.reserved disagrees with memory.total − memory.free are counted in a WARNING.

The log is read line by line (16 bytes kept a sample, whatever its size). Timing figures
that cannot be trusted are flagged in a WARNING: samples with equal timestamps (all equal:
no interval, largest gap or peak time: "not available", never 0 ms), and a gap of more than
an hour and 1,000 median intervals (a clock change, a paused logger, a corrupt timestamp).
With several GPUs, a GPU the workload never touched (no memory added: P − U0 = 0) does not
gate.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("log", metavar="LOG.csv", help="the nvidia-smi CSV log")
    p.add_argument("--columns", default=None,
                   help="query names of a noheader log, e.g. timestamp,index,'memory.used [MiB]',memory.total [MiB]")
    p.add_argument("--out", default=None, help="write the measurement JSON here")
    p.add_argument("--plot", default=None, help="also write a PNG chart (of the domain with least headroom)")
    p.add_argument("--force", action="store_true", help="overwrite existing --out / --plot files")


def run(args: argparse.Namespace) -> int:
    for p in (args.out, args.plot):
        if p:
            check_writable(p, force=args.force)
    cols = [c.strip() for c in args.columns.split(",")] if args.columns else None
    doc = load_smi_csv(args.log, columns=cols)
    ms = [Measurement.from_dict(d) for d in doc["domains"]]
    path = str(write_json_atomic(args.out, doc, force=args.force)) if args.out else None
    plot_path = None
    if args.plot:
        from kvgate.measure.plot import plot_measurement

        plot_path = plot_measurement(select_domain(ms).measurement, args.plot, force=args.force,
                                     title=f"kvgate import-smi: {args.log}"[:90])
    from kvgate.measure.report import render_measurement

    warnings = list(dict.fromkeys(w for m in ms for w in m.extra.get("warnings") or []))  # skipped lines: once
    sel = select_domain(ms)
    text = "\n\n".join([render_measurement(m) for m in ms]
                       + (["\n".join(sel.notes()).replace("gated on", "a gate on this log uses", 1)]
                          if len(ms) > 1 else [])
                       + (["\n".join(f"WARNING: {w}" for w in warnings)] if warnings else [])
                       + ([f"measurement written to {path}"] if path else [])
                       + ([f"plot written to {plot_path}"] if plot_path else []))
    emit(args.json, {**doc, "warnings": warnings, "measurement_path": path, "plot_path": plot_path,
                "least_headroom_domain": sel.domain}, text)
    return 0
