"""PNG charts of a measurement (matplotlib, Agg backend; imported lazily).

:func:`plot_measurement` draws used memory over time with the idle U0, peak P and total T
lines, the headroom band H = T − P, and optionally projected peaks (``kvgate run``: the
projections at the target slot count). The y axis is in GiB (2^30 B) when T ≥ 4 GiB, else
MiB (2^20 B), and says so.
"""

from __future__ import annotations

import io
import os

from kvgate.atomicio import write_atomic
from kvgate.measure.measurement import Measurement
from kvgate.units import GiB, MiB, fmt_gib, fmt_mib


def _unit(total_bytes: int) -> tuple[int, str, callable]:
    return (GiB, "GiB", fmt_gib) if total_bytes >= 4 * GiB else (MiB, "MiB", fmt_mib)


def render_measurement_png(m: Measurement, *, projections: list[tuple[int, str]] | None = None,
                           title: str | None = None) -> bytes:
    """The chart as PNG bytes (see the module docstring).

    Args:
        projections: ``[(bytes, label)]`` projected peaks to draw (``kvgate run``: at the
            target slot count, from the KV-only formula and from the concurrency fit).
    """
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    scale, unit, fmt = _unit(m.total_bytes)
    tl = m.timeline or {}
    xs = tl.get("t_s") or tl.get("sample") or []
    if "t_s" not in tl:
        xlabel = "sample number"
    elif m.basis.command:
        xlabel = "time since the command started (s)"
    else:
        xlabel = "time since the first sample (s)"
    ys = [v / scale for v in tl.get("used_bytes", [])]
    T, P = m.total_bytes / scale, m.peak_used_bytes / scale

    fig, ax = plt.subplots(figsize=(12, 5.2), dpi=110)
    try:
        ax.axhspan(P, T, color="tab:green", alpha=0.12,
                   label=f"headroom H = T − P = {fmt(m.headroom_bytes)}")
        if xs:
            rule = m.extra.get("used_rule") or "total − free"
            ax.plot(xs, ys, color="tab:blue", lw=1.2, label=f"used ({rule})"[:60])
            ax.set_xlim(min(xs), max(xs))
        if m.extra.get("tree_rss_timeline"):
            rt = m.extra["tree_rss_timeline"]
            ax.plot(rt["t_s"], [v / scale for v in rt["rss_bytes"]], color="tab:purple", lw=1,
                    alpha=0.8, label="RSS of the command's process tree")
        ax.axhline(T, color="black", lw=1.4, label=f"total T = {fmt(m.total_bytes)}")
        ax.axhline(P, color="tab:red", lw=1.2, ls="--", label=f"peak P = {fmt(m.peak_used_bytes)}")
        if m.peak_time_s is not None:
            ax.plot([m.peak_time_s], [P], "v", color="tab:red", ms=7)
        if m.idle_used_bytes is not None:
            ax.axhline(m.idle_used_bytes / scale, color="tab:gray", lw=1, ls=":",
                       label=f"idle U0 = {fmt(m.idle_used_bytes)}")
        for (pb, label), color in zip(projections or [], ("tab:orange", "tab:brown", "tab:olive", "tab:pink")):
            ax.axhline(pb / scale, color=color, lw=1.4, ls="-.", label=f"{label} = {fmt(pb)}")
        if xs and "t_s" in tl and min(xs) < 0:
            ax.axvspan(min(xs), 0, color="tab:gray", alpha=0.08, label="settle (idle baseline)")
        top = max([T] + [pb / scale for pb, _ in projections or []]) * 1.06
        ax.set_ylim(0, top)
        ax.set_xlabel(xlabel)
        ax.set_ylabel(f"{m.domain} memory ({unit}, 1 {unit} = 2^{30 if unit == 'GiB' else 20} B)")
        b = m.basis
        sub = ", ".join(x for x in [
            b.device_name, f"sampler {b.sampler}" if b.sampler else None,
            f"interval {b.interval_s * 1e3:g} ms" if b.interval_s else None,
            f"largest gap {m.max_gap_s * 1e3:.1f} ms" if m.max_gap_s is not None else None,
            f"status {m.status}" + (f" (exit {b.exit_code})" if b.exit_code not in (None, 0) else ""),
        ] if x)
        ax.set_title((title or "kvgate measurement") + "\n" + sub, fontsize=10)
        ax.grid(True, alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9, borderaxespad=0)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)


def plot_measurement(m: Measurement, path: str | os.PathLike[str], *, force: bool = False, **kw) -> str:
    """Write :func:`render_measurement_png` to ``path`` atomically; returns the path.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
    """
    write_atomic(path, render_measurement_png(m, **kw), force=force)
    return str(path)
