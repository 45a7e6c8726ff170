"""Fuzz kvgate's readers with hypothesis, 10,000+ cases per target (issue 11 #10).

    .venv/bin/python benchmarks/fuzz.py [--cases 10000] [--only configs,records]
    .venv/bin/python benchmarks/fuzz.py --only safetensors,specconfig,jsonl-huge,metrics,replies
    .venv/bin/python benchmarks/fuzz.py --cases 2000 --only fit-flags,fit-configs,fit-gguf,engine-logs,request-csvs,tier-traces
    .venv/bin/python benchmarks/fuzz.py --cases 500 --only fit-every-flag,gate-flags,engine-log-flags,other-flags,tier-files

The properties are those of ``tests/test_fuzz.py`` (same strategies, more cases). Unlike
the test, a run does not stop at the first failure: every exception that is not a
``KvgateError`` is counted and grouped by type and the kvgate line that raised it, so
one run lists every distinct fault. Prints one line per target: cases run, answered,
refused with a KvgateError, other exceptions (must be 0), and seconds.
"""

from __future__ import annotations

import argparse
import sys
import time
import traceback
from collections import Counter
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import test_fuzz as tf  # noqa: E402
import test_properties_commands as tp  # noqa: E402
import test_properties_hostile as th  # noqa: E402
from kvgate.errors import KvgateError  # noqa: E402

TARGETS = {
    "configs": (tf.configs, lambda cfg: _call(tf.check_config, cfg)),
    "json": (tf.json_texts, lambda t: _call(tf.check_json_text, t)),
    "gguf": (tf.byte_ops, lambda ops: _call(tf.check_gguf, tf._mutate_bytes(tf.gguf_bytes(), ops))),
    "smi": (tf.byte_ops, lambda ops: _call(tf.check_smi, tf._mutate_bytes(tf.SMI_LOG, ops))),
    "records": (tf.records(), lambda doc: _call(tf.check_record, doc)),
    "traces": (st.tuples(tf.byte_ops, st.sampled_from([(tf.TRACE_CSV, ".csv"), (tf.TRACE_JSONL, ".jsonl")])),
               lambda a: _call(tf.check_trace, tf._mutate_bytes(a[1][0], a[0]), a[1][1])),
    # round 2: hostile pieces (4,301+ digit integers, 100,000-deep nesting, 1e999, NaN) spliced in
    "safetensors": (tf.safetensors_headers(), lambda d: _call(tf.check_safetensors, d)),
    "specconfig": (tf.hostile_json(), lambda t: _call(tf.check_speculative, t)),
    "jsonl-huge": (tf.jsonl_traces(), lambda d: _call(tf.check_trace, d, ".jsonl")),
    "metrics": (st.tuples(tf.metrics_pages(), tf.hostile_json()), lambda a: _call(tf.check_metrics, *a)),
    "replies": (tf.completion_replies(), lambda r: _call(tf.check_completion_reply, r)),
    # round 3 (issue 28): whole commands in-process (tests/test_properties_commands.py)
    "fit-flags": (tp.fit_argv(), lambda c: _call(tp.check_fit, *c)),
    "fit-configs": (st.tuples(tf.configs, st.sampled_from(sorted(tp.FLAGS))), lambda a: _call(tp.check_config_fit, *a)),
    "fit-gguf": (st.tuples(tf.gguf_meta(), tp._lcpp_flags), lambda a: _call(tp.check_gguf_fit, a[0][0], a[0][1], a[1])),
    "engine-logs": (st.tuples(tp.engine_logs(), st.sampled_from([None, "qwen3-30b-a3b"])),
                    lambda a: _call(tp.check_engine_log, *a)),
    "request-csvs": (tp.request_csvs(), lambda d: _call(tp.check_request_csv, d)),
    "tier-traces": (st.tuples(tp.hashed_traces(), tp._tier_flags), lambda a: _call(tp.check_tier_trace, *a)),
    # second break-it pass (issue 28): every option of the commands, read from their parsers, with
    # hostile values; trace files as the published formats allow or nearly allow (CSV, gzip, zstd)
    "fit-every-flag": (th.fit_every_flag(), lambda argv: _call(th.check_fit_argv, argv)),
    "gate-flags": (th.gate_argv(), lambda argv: _call(th.check_argv, argv)),
    "engine-log-flags": (th.engine_log_argv(), lambda argv: _call(th.check_argv, argv)),
    "other-flags": (st.one_of(th.other_argv(), th.tier_argv()), lambda argv: _call(th.check_argv, argv)),
    "tier-files": (st.tuples(th.tier_trace_file(), th.TIER_FLAGS), lambda a: _call(th.check_tier_file, *a[0], a[1])),
}

_stats: Counter = Counter()
_faults: Counter = Counter()


def _call(check, *args) -> None:
    _stats["cases"] += 1
    try:
        check(*args)
        _stats["answered"] += 1
    except KvgateError:  # pragma: no cover - the checks swallow these already
        _stats["refused"] += 1
    except Exception as exc:  # noqa: BLE001 - that is what we count
        cause = exc.__cause__ if isinstance(exc, AssertionError) and exc.__cause__ else exc  # a command's traceback
        tb = [f for f in traceback.extract_tb(cause.__traceback__) if "/kvgate/" in f.filename]
        exc = cause
        where = f"{Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else "?"
        _faults[f"{type(exc).__name__} at {where}: {str(exc)[:80]}"] += 1


def run(name: str, cases: int) -> dict:
    strategy, body = TARGETS[name]
    _stats.clear()
    _faults.clear()
    t0 = time.perf_counter()
    test = settings(settings.get_profile("kvgate-long"), max_examples=cases, deadline=None, database=None,
                    derandomize=True, suppress_health_check=list(HealthCheck))(given(strategy)(body))
    test()
    return {"target": name, "cases": _stats["cases"], "faults": sum(_faults.values()),
            "distinct": dict(_faults), "seconds": round(time.perf_counter() - t0, 1)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--cases", type=int, default=10_000)
    ap.add_argument("--only", default=",".join(TARGETS))
    args = ap.parse_args()
    bad = 0
    print(f"{'target':<11} {'cases':>7} {'non-KvgateError':>16} {'seconds':>8}")
    for name in args.only.split(","):
        r = run(name, args.cases)
        bad += r["faults"]
        print(f"{r['target']:<11} {r['cases']:>7,} {r['faults']:>16,} {r['seconds']:>8}", flush=True)
        for k, v in sorted(r["distinct"].items(), key=lambda kv: -kv[1]):
            print(f"    {v:>6,}  {k}", flush=True)
    if th.EXITS:  # the whole-command targets: how many answered (0, 4) and refused (2), by command
        print("exit codes by command: " + "; ".join(f"{c} {dict(sorted(e.items()))}" for c, e in sorted(th.EXITS.items())))
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
