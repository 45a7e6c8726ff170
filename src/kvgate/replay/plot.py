"""PNG chart of a trace replay (matplotlib, Agg backend; imported lazily).

Three panels over the replay clock (trace time / speed):

1. contiguous: reserved (slots × S) and written bytes, with the budget line;
2. paged: reserved (blocks taken) and written bytes, with the budget line;
3. sequences live in each allocator (concurrency reached).

Short replays are drawn exactly (each epoch from its first to its last step); long ones
are binned (:func:`kvgate.replay.series`): each bin shows the largest value in it, so
peaks stay visible. The y axis is in GiB (2^30 B) when the budget is at least 4 GiB,
else MiB, KiB or B by the same rule, and says so. A caption carries the service model
and, for the Azure traces, the data set's attribution.
"""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path

from kvgate.atomicio import write_atomic
from kvgate.replay.simulate import ReplayResult, series
from kvgate.units import GiB, KiB, MiB, fmt_human


def _time_axis(t_end_s: float) -> tuple[float, str]:
    if t_end_s >= 3 * 3600:
        return 3600.0, "h"
    if t_end_s >= 180:
        return 60.0, "min"
    return 1.0, "s"


def _line(ax, t, y, step, **kw):
    if step:
        ax.step(t, y, where=step, **kw)
    else:
        ax.plot(t, y, **kw)


def render_replay_png(res: ReplayResult, *, title: str | None = None, max_points: int = 2000) -> bytes:
    """The chart as PNG bytes (see the module docstring)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    budget = int(res.inputs["budget_bytes"])
    scale, unit = next(
        (u, n) for u, n in ((GiB, "GiB"), (MiB, "MiB"), (KiB, "KiB"), (1, "B")) if budget >= 4 * u or u == 1
    )
    fmt = fmt_human
    sc = series(res, "contiguous", max_points=max_points)
    sp = series(res, "paged", max_points=max_points)
    t_end = max([0.0] + sc["t_s"][-1:] + sp["t_s"][-1:])
    tdiv, tunit = _time_axis(t_end)

    fig, axes = plt.subplots(3, 1, figsize=(13, 9.5), sharex=True, gridspec_kw={"height_ratios": [3, 3, 2]})
    colors = {"reserved": "#c0392b", "written": "#2471a3", "budget": "#333333"}
    for ax, name, s in ((axes[0], "contiguous", sc), (axes[1], "paged", sp)):
        t = [x / tdiv for x in s["t_s"]]
        step = "mid" if s.get("binned") else None  # exact points are joined by lines
        reserved = [v / scale for v in s["reserved_bytes"]]
        written = [v / scale for v in s["written_bytes"]]
        ax.fill_between(
            t,
            written,
            reserved,
            step=step,
            color=colors["reserved"],
            alpha=0.18,
            label="reserved − written (reclaimable)",
        )
        _line(ax, t, reserved, step, color=colors["reserved"], lw=1.0, label="reserved")
        _line(ax, t, written, step, color=colors["written"], lw=1.0, label="written")
        ax.axhline(budget / scale, color=colors["budget"], ls="--", lw=1.0, label=f"budget {fmt(budget)}")
        r = getattr(res, name)
        head = (
            f"{name}: peak reserved {fmt(r.peak_reserved_bytes)}, written at peak {fmt(r.written_at_peak_bytes)}, "
            f"reclaim at peak {fmt(r.reclaim_at_peak_bytes)}"
        )
        ax.set_title(head, fontsize=9.5, loc="left")
        ax.set_ylabel(unit)
        ax.set_ylim(0, budget / scale * 1.08)
        ax.grid(alpha=0.3)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)

    ax = axes[2]
    # paged first, contiguous on top: contiguous is capped, so it hides little of paged.
    for name, s, color in (("paged", sp, colors["written"]), ("contiguous", sc, colors["reserved"])):
        t = [x / tdiv for x in s["t_s"]]
        step = "mid" if s.get("binned") else None
        _line(ax, t, s["live"], step, color=color, lw=1.0, label=f"{name} (max {getattr(res, name).max_concurrency})")
    ax.axhline(res.inputs["slots"], color=colors["budget"], ls=":", lw=1.0, label=f"slot cap {res.inputs['slots']}")
    ax.set_ylabel("sequences live")
    ax.set_ylim(bottom=0)
    ax.set_xlabel(f"replay time ({tunit}; trace time / speed {res.inputs['speed']:g})")
    ax.grid(alpha=0.3)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize=8, framealpha=0.9)

    summ = res.summary
    ratio = summ["ratio"]
    fig.suptitle(
        title
        or (
            f"Trace replay: {os.path.basename(str(res.inputs['trace']))} — bound N·S {fmt(summ['bound_bytes'])}, "
            f"measured reclaim {fmt(summ['measured_reclaim_bytes']) if summ['measured_reclaim_bytes'] is not None else 'not available'}"
            + (f" ({ratio:.1%} of the bound)" if ratio is not None else "")
        ),
        fontsize=11,
    )
    caption = (
        f"Service model: decode {res.decode_rate:g} tokens/s per sequence, FIFO admission, prefill at admission; "
        f"slot S(L) = {res.slot_bytes:,} B at max_seq {res.inputs['max_seq']:,}, block of {res.block_size} = "
        f"{res.block_bytes:,} B. "
        + ("Binned: each point is the largest value in its bin. " if sc.get("binned") or sp.get("binned") else "")
    )
    if res.attribution:
        caption += f"Data: {res.attribution}."
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 200)), fontsize=7.5, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.05, 1, 0.97))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_replay_plot(
    res: ReplayResult, path: str | os.PathLike[str], *, force: bool = False, title: str | None = None
) -> Path:
    """Render and write the PNG atomically (see :func:`kvgate.atomicio.write_atomic`).

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
    """
    return write_atomic(path, render_replay_png(res, title=title), force=force)
