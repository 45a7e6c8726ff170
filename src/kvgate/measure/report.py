"""Text for measurements: the live status line and the summary ``kvgate measure`` prints."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Callable
from typing import Any, TextIO

from kvgate.measure.measurement import Measurement
from kvgate.measure.runner import RunOutcome, Status
from kvgate.output import table
from kvgate.units import GiB, fmt_gib, fmt_human, fmt_mib, fmt_pct


def _fmt_for(total_bytes: int) -> Callable[[int], str]:
    return fmt_gib if total_bytes >= 4 * GiB else fmt_mib


def na(v: Any, f: Callable[[Any], str] = str) -> str:
    """``f(v)``, or "not available" for ``None``."""
    return "not available" if v is None else f(v)


def status_printer(stream: TextIO | None = None) -> Callable[[Status | None], None]:
    """A callback drawing ``elapsed, current, peak, headroom`` on one line (``\\r``) of
    ``stream`` (default: ``sys.stderr`` at call time); called with ``None`` it clears the line."""
    stream = stream or sys.stderr

    def show(s: Status | None) -> None:
        try:
            _show(s)
        except OSError:  # the terminal went away (SIGHUP): the measurement goes on
            pass

    def _show(s: Status | None) -> None:
        if s is None:
            stream.write("\r\x1b[2K")
            stream.flush()
            return
        f = _fmt_for(s.total_bytes)
        cur = na(s.current_bytes, f)
        peak = na(s.peak_bytes, f)
        head = na(None if s.peak_bytes is None else s.total_bytes - s.peak_bytes, f)
        stream.write(f"\r\x1b[2K[kvgate] {s.elapsed_s:8.1f} s  used {cur}  peak {peak}  headroom {head}")
        stream.flush()

    return show


def measurement_rows(m: Measurement) -> list[list[str]]:
    """The figures of one domain, each with its exact bytes."""
    f = _fmt_for(m.total_bytes)
    T = m.total_bytes

    def row(name: str, v: int | None) -> list[str]:
        return [name, na(v, f), na(v, lambda x: f"{x:,} B"), na(v, lambda x: fmt_pct(x, T))]

    rows = [row("total T", T), row("idle used U0", m.idle_used_bytes), row("peak used P", m.peak_used_bytes),
            row("headroom H = T − P", m.headroom_bytes)]
    if m.domain.startswith("gpu"):
        rows.append(row("driver-reserved (NVML v2)", m.reserved_bytes))
    if "tree_rss_peak_bytes" in m.extra:  # host: shown even when unknown ("not available")
        rows.append(row("process-tree RSS peak", m.extra["tree_rss_peak_bytes"]))
    if m.extra.get("vmhwm_max_bytes") is not None:
        rows.append(row("largest VmHWM", m.extra["vmhwm_max_bytes"]))
    if m.extra.get("cgroup_peak_bytes") is not None:
        rows.append(row("cgroup memory.peak", m.extra["cgroup_peak_bytes"]))
    return rows


def _gap_when(m: Measurement) -> str:
    """`` at 10.736 s`` (the largest gap's start) and the count of long gaps, if recorded."""
    g = m.extra.get("gaps") or {}
    rows = g.get("largest") or []
    if not rows:
        return ""
    text = f" at {rows[0]['at_s']:.3f} s"
    n = g.get("over_10x_interval")
    if n is not None and g.get("long_gap_threshold_s"):
        text += f", {n} over {g['long_gap_threshold_s'] * 1e3:g} ms"
    return text


def render_measurement(m: Measurement) -> str:
    """A domain's table, timing and basis, as text."""
    b = m.basis
    lines = [f"{m.domain}: {b.device_name or 'device not available'}  status {m.status}"]
    lines.append(table(measurement_rows(m), header=["", "", "bytes", "of T"], align="lrrr"))
    t = []
    if m.peak_time_s is not None:
        t.append(f"peak at {m.peak_time_s:.3f} s")
    if b.interval_s is not None:
        t.append(f"interval {b.interval_s * 1e3:g} ms")
    if m.max_gap_s is not None:
        t.append(f"largest gap {m.max_gap_s * 1e3:.2f} ms{_gap_when(m)} (a spike shorter than that can be missed)")
    elif m.samples is not None and m.samples > 1 and m.extra.get("timing_untrusted"):
        t.append("largest gap not available")
    if m.samples is not None:
        t.append(f"{m.samples:,} samples")
    if m.extra.get("timing_untrusted"):
        t.append("timing figures cannot be trusted: " + "; ".join(m.extra["timing_untrusted"]))
    if t:
        lines.append("  " + "; ".join(t))
    lines.append("  basis: " + ", ".join([
        f"sampler {na(b.sampler)}", f"driver {na(b.driver_version)}", f"CUDA {na(b.cuda_version)}",
        f"NVML {na(b.nvml_version)}", f"cpu {na(b.cpu_arch)}", f"uuid {na(b.device_uuid)}"]))
    if m.processes is None:
        lines.append("  per-process memory: not available" +
                     (f" ({m.extra['processes_note']})" if m.extra.get("processes_note") else ""))
    else:
        for p in m.processes:
            v = p.get("peak_used_bytes", p.get("vmhwm_bytes"))
            what = "peak used" if "peak_used_bytes" in p else "VmHWM"
            lines.append(f"  pid {p['pid']} {p.get('name') or ''}: {what} {na(v, fmt_human)}")
    return "\n".join(lines)


def render_outcome(o: RunOutcome, *, out_path: str | None = None, plot_path: str | None = None) -> str:
    """What ``kvgate measure`` prints after the run."""
    head = f"command: {shlex.join(o.document.get('command') or [])}\n"
    head += f"status: {o.status}, exit code {na(o.exit_code)}"
    if o.signal_name:
        head += f" (killed by {o.signal_name})"
    if o.stopped_by:
        head += f" (stopped by {o.stopped_by}: partial measurement)"
    if o.error:
        head += f"\nsampler error: {o.error}"
    parts = [head] + [render_measurement(m) for m in o.measurements]
    if len(o.measurements) > 1:
        from kvgate.measure.select import select_domain

        parts.append("\n".join(select_domain(o.measurements).notes()))
    if o.notes:
        parts.append("\n".join(f"note: {n}" for n in o.notes))
    if o.status != "ok":
        parts.append("no-verdict: the workload did not finish cleanly; do not base a decision on this run")
    if out_path:
        parts.append(f"measurement written to {out_path}")
    else:
        parts.append("measurement NOT written to a file: its JSON is on standard error")
    if plot_path:
        parts.append(f"plot written to {plot_path}")
    return "\n\n".join(parts)
