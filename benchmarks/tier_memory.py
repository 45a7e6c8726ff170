"""Benchmark (not CI): where ``kvgate tier``'s resident memory goes, stage by stage, in one
process: the interpreter and numpy, the model preset (transformers' config classes),
pyarrow, the trace reader alone (batches read and dropped), then the reader with the curve
builder (exact or SHARDS), each stage's peak taken from ``VmHWM`` after resetting it
(``/proc/self/clear_refs``), so each line is that stage's own high-water mark.

Run: ``nice python benchmarks/tier_memory.py TRACE [--sample-rate 0.01]`` (Linux only).
"""

from __future__ import annotations

import argparse
import gc
import time

MIB = 1 << 20


def _status(key: str) -> int:
    with open("/proc/self/status") as fh:
        for line in fh:
            if line.startswith(key + ":"):
                return int(line.split()[1]) * 1024
    raise KeyError(key)


def _reset_peak() -> None:
    with open("/proc/self/clear_refs", "w") as fh:
        fh.write("5")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--sample-rate", type=float, default=1.0)
    ap.add_argument("--model", default="llama-3.1-8b")
    a = ap.parse_args()
    rows: list[tuple[str, int, int]] = []

    def mark(what: str) -> None:
        gc.collect()
        rows.append((what, _status("VmRSS"), _status("VmHWM")))
        _reset_peak()

    import numpy  # noqa: F401

    mark("interpreter, numpy")
    from kvgate.model import load_model

    load_model(a.model)
    mark(f"the model preset {a.model}")
    import pyarrow  # noqa: F401
    import pyarrow.json  # noqa: F401

    mark("pyarrow imported")
    from kvgate.tier.stack import curve_builder
    from kvgate.tier.stream import TraceStream

    t0 = time.perf_counter()
    TraceStream(a.trace).read(on_batch=lambda *x: None, keep_ids=False, lean=a.sample_rate < 1)
    t1 = time.perf_counter()
    mark(f"the reader alone ({t1 - t0:.1f} s)")
    st = TraceStream(a.trace)
    b = curve_builder(st.block_tokens, a.sample_rate)
    st.read(on_batch=b.add, keep_ids=False, lean=a.sample_rate < 1)
    curve = b.result()
    t2 = time.perf_counter()
    mark(f"reader + curve builder, rate {a.sample_rate:g} ({t2 - t1:.1f} s)")
    del b, curve
    mark("builder dropped")
    print(f"{'stage':58} {'RSS after':>10} {'peak':>10}")
    for what, rss, hwm in rows:
        print(f"{what:58} {rss / MIB:8.1f} M {hwm / MIB:8.1f} M")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
