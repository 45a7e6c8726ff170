"""Benchmark figure (not CI): the Mooncake conversation trace's LRU hit share against cache
capacity (kvgate.tier.stack), the device pool and the host tier marked, the gate's boundary
drawn, the engine models' points; and, when ``benchmarks/results/tier_llama_server.json``
exists, llama-server's served cached tokens against the ``llama.cpp`` model's.

Writes ``benchmarks/tier_mooncake.png``. Run: ``python benchmarks/tier_plot.py``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from kvgate.geometry import KVGeometry  # noqa: E402
from kvgate.model import load_model  # noqa: E402
from kvgate.tier.analysis import analyze  # noqa: E402
from kvgate.tier.gate import Speed  # noqa: E402
from kvgate.tier.stack import lru_curve  # noqa: E402
from kvgate.tier.stream import load_hashed_trace  # noqa: E402

TRACE = ROOT.parent / "shared" / "traces" / "mooncake_conversation_trace.jsonl"
GIB, TIB = 2**30, 2**40


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    t = load_hashed_trace(TRACE)
    bpt = KVGeometry(load_model("llama-3.1-8b"), "bf16").bytes_per_token()
    block = t.block_tokens * bpt
    curve = lru_curve(t)
    caps = np.unique(np.round(np.geomspace(1, curve.saturation_blocks() * 2, 600)).astype(np.int64))
    share = curve.at(caps) / curve.prompt_tokens
    dev_b, host_b = 64 * GIB, 1 * TIB
    dev_blocks = dev_b // block
    rep = analyze(t, bytes_per_token=bpt, device_blocks=dev_blocks, host_bytes=host_b)
    live = ROOT / "benchmarks" / "results" / "tier_llama_server.json"
    ncols = 2 if live.exists() else 1
    fig, axes = plt.subplots(1, ncols, figsize=(6.5 * ncols, 4.6))
    ax = axes[0] if ncols == 2 else axes
    ax.plot(caps * block / GIB, 100 * share, color="C0", label="LRU, every capacity (one pass)")
    ax.axvline(dev_b / GIB, color="C2", ls="--", label=f"device pool 64 GiB: {100 * rep['device']['hit_share']:.2f}%")
    ax.axvline((dev_b + host_b) / GIB, color="C1", ls="--",
               label=f"+ host tier 1 TiB: {100 * rep['host']['hit_share']:.2f}%")
    hb = rep["boundaries"]["host_capacity_bytes_from_which_it_pays"]
    if hb is not None:
        ax.axvline((dev_b + hb) / GIB, color="C3", ls=":",
                   label=f"boundary: host tier from {hb / GIB:.1f} GiB gains >= 1% of tokens")
    ax.axhline(100 * rep["unbounded_hit_share"], color="grey", lw=0.8,
               label=f"unbounded: {100 * rep['unbounded_hit_share']:.2f}%")
    for model, marker, style in (("vllm", "s", dict(color="k", ms=5)),
                                 ("sglang", "^", dict(color="C3", ms=9, mfc="none"))):
        r = analyze(t, bytes_per_token=bpt, cache_model=model, device_blocks=dev_blocks, device_bytes=dev_b,
                    host_bytes=host_b, prefill=Speed(None), bandwidth=Speed(None))
        ax.plot([dev_b / GIB, (dev_b + host_b) / GIB], [100 * r["device"]["hit_share"], 100 * r["host"]["hit_share"]],
                marker, ls="none", label=f"{model} model: device, device + host", **style)
    ax.set_xscale("log")
    ax.set_xlabel("prefix-cache capacity (GiB, Llama-3.1-8B bf16: 64 MiB per 512-token block)")
    ax.set_ylabel("prompt tokens served from cache (%)")
    ax.set_title("Mooncake conversation trace (12,031 requests)")
    ax.legend(fontsize=7, loc="upper left")
    ax.grid(alpha=0.3)
    if ncols == 2:
        d = json.loads(live.read_text())
        ax2 = axes[1]
        runs = sorted(d["runs"].values(), key=lambda r: (r["cache_ram_mib"] < 0, r["cache_ram_mib"]))
        labels = [("no limit" if r["cache_ram_mib"] < 0 else f"{r['cache_ram_mib']} MiB") for r in runs]
        x = np.arange(len(runs))
        ax2.bar(x - 0.2, [100 * r["predicted_cache_n"] / d["prompt_tokens"] for r in runs], 0.4,
                label="kvgate llama.cpp model (predicted)")
        ax2.bar(x + 0.2, [100 * r["served_cache_n"] / d["prompt_tokens"] for r in runs], 0.4,
                label="llama-server timings.cache_n (served)")
        ax2.set_xticks(x, labels)
        ax2.set_xlabel("--cache-ram (host prompt cache), -np 1")
        ax2.set_ylabel("prompt tokens served from cache (%)")
        ax2.set_title(f"llama-server (CPU, {d['commit'][:12]}): {d['requests']} requests, "
                      f"{d['conversations']} conversations")
        ax2.legend(fontsize=7, loc="upper left")
        ax2.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    out = ROOT / "benchmarks" / "tier_mooncake.png"
    fig.savefig(out, dpi=110)
    print(out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
