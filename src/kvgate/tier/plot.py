"""PNG chart of ``kvgate tier --plot``: the LRU hit share against cache capacity, with the
device pool and the host tier marked (matplotlib, Agg backend; imported lazily, as
:mod:`kvgate.replay.plot`).

The curve is drawn from the one-pass curve itself (exact hits at ~600 log-spaced
capacities from one block to past saturation, plus every capacity it rises at when there
are few), x in bytes on a log axis (GiB, 2^30 B), y in percent of the prompt tokens. The
device pool and device + host tier are vertical lines labelled with the hit share of
the cache model replayed; an engine model's own figures (which differ from plain LRU)
are drawn as points on those lines. The unbounded reuse share is a horizontal line and
the capacity from which the host tier pays (the gate's boundary) a dotted line.
"""

from __future__ import annotations

import io
import os
import textwrap
from pathlib import Path
from typing import Any

import numpy as np

from kvgate.atomicio import write_atomic
from kvgate.tier.stack import LruCurve
from kvgate.units import GiB, fmt_human


def _engine(model: str) -> Any:
    """The engine whose cache model ``model`` is (``None`` for plain LRU)."""
    from kvgate.engines.registry import get_engine

    return None if model == "lru" else get_engine(model)


def _pct(x: float | None) -> str:
    return "not available" if x is None else f"{100 * x:.2f}%"


def render_tier_png(rep: dict[str, Any], curve: LruCurve) -> bytes:
    """The chart as PNG bytes (module docstring); ``rep`` is ``kvgate tier``'s answer."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    block = int(rep["block_bytes"])
    prompt = max(int(rep["prompt_tokens"]), 1)
    top = max(curve.saturation_blocks(), 1)
    caps = np.unique(np.round(np.geomspace(1, 4 * top, 600)).astype(np.int64))
    rises, _ = curve.changes()
    if len(rises) <= 2000:
        caps = np.unique(np.concatenate([caps, rises[rises >= 1], rises[rises > 1] - 1]))
    share = 100 * curve.at(caps) / prompt
    x = caps * block / GiB
    fig, ax = plt.subplots(figsize=(9, 5.4))
    ax.step(x, share, where="post", color="C0", lw=1.6,
            label="LRU, every capacity (one pass" + ("" if rep["curve_exact"] else
                                                     f", SHARDS sample R = {rep['sample_rate']:g}") + ")")
    ax.axhline(100 * (rep["unbounded_hit_share"] or 0), color="grey", lw=0.8, ls="-",
               label=f"unbounded: {_pct(rep['unbounded_hit_share'])} "
                     f"(saturates at {fmt_human(rep['saturation_bytes'])})")
    model = rep["cache_model"]
    engine = _engine(model)
    name = "LRU" if engine is None else f"{engine.display} model"
    own_curve = engine is not None and not engine.tier_on_lru_curve  # llama-server: slots, not a capacity
    d, h = rep.get("device"), rep.get("host")
    dev_x = d["capacity_bytes"] / GiB if d and d.get("capacity_bytes") else None
    if d is not None and dev_x:
        ax.axvline(dev_x, color="C2", ls="--", lw=1.2,
                   label=f"device pool {fmt_human(d['capacity_bytes'])}: {name} {_pct(d['hit_share'])}")
        if model != "lru":
            ax.plot([dev_x], [100 * (d["hit_share"] or 0)], "s", color="C2", ms=7)
    elif d is not None:  # llama.cpp: slots, no capacity in blocks
        ax.plot([], [], " ", label=f"device: {d.get('slots')} slot(s), {name} {_pct(d['hit_share'])}")
    if h is not None:
        if h.get("capacity_bytes") and dev_x:
            both_x = dev_x + h["capacity_bytes"] / GiB
            ax.axvline(both_x, color="C1", ls="--", lw=1.2,
                       label=f"+ host tier {fmt_human(h['capacity_bytes'])}: {name} {_pct(h['hit_share'])} "
                             f"(adds {_pct(h['added_hit_share'])})")
            if model != "lru":
                ax.plot([both_x], [100 * (h["hit_share"] or 0)], "o", color="C1", ms=7)
        else:
            cap = "no limit" if h.get("capacity_bytes") is None else fmt_human(h["capacity_bytes"])
            ax.plot([], [], " ", label=f"+ host tier {cap}: {name} {_pct(h['hit_share'])}")
        hb = rep.get("boundaries", {}).get("host_capacity_bytes_from_which_it_pays")
        if hb is not None and dev_x and not own_curve:
            ax.axvline(dev_x + hb / GiB, color="C3", ls=":", lw=1.2,
                       label=f"boundary: a host tier of {fmt_human(hb)} or more adds >= "
                             f"{100 * rep['min_gain_share']:.3g}% of tokens"
                             + ("" if model == "lru" else " (plain LRU curve)"))
    ax.set_xscale("log")
    ax.set_xlabel(f"prefix-cache capacity (GiB; one {rep['block_tokens']}-token block = {fmt_human(block)})")
    ax.set_ylabel("prompt tokens served from the cache (%)")
    ax.set_ylim(0, max(5.0, 100 * (rep["unbounded_hit_share"] or 0) * 1.15))
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8, loc="upper left", framealpha=0.92)
    ax.set_title(f"{os.path.basename(str(rep['trace']))}: {rep['requests']:,} requests, "
                 f"{rep['prompt_tokens']:,} prompt tokens — {rep['model']}, {rep['kv_format']}", fontsize=10)
    caption = f"kvgate tier, cache model {model}. "
    if own_curve:
        caption += ("llama-server's device tier is its slots (whole prompts, not a capacity on this axis) and "
                    "--cache-ram holds whole prompts: its figures are in the legend, the curve is plain LRU. ")
    elif model != "lru":
        caption += ("Points: the engine model's own replay (its host tier holds write-through copies of device "
                    "blocks, so it adds less than the LRU curve's exclusive pair at the same sizes). ")
    if rep.get("attribution"):
        caption += f"Data: {rep['attribution']}."
    fig.text(0.01, 0.005, "\n".join(textwrap.wrap(caption, 160)), fontsize=7, va="bottom", ha="left")
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110)
    plt.close(fig)
    return buf.getvalue()


def write_tier_plot(rep: dict[str, Any], curve: LruCurve, path: str | os.PathLike[str], *,
                    force: bool = False) -> Path:
    """Render and write the PNG atomically (:func:`kvgate.atomicio.write_atomic`).

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
    """
    return write_atomic(path, render_tier_png(rep, curve), force=force)
