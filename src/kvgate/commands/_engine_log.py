"""``kvgate gate --engine-log FILE --slots N --max-seq L``: the gate for a pool an engine
logged. Kept here so ``commands/gate.py`` needs only a flag and a call:
:func:`add_engine_log_arguments` and :func:`run_engine_gate`."""

from __future__ import annotations

import argparse
from typing import Any

from kvgate.engines.candidates import gate_from_engine_log
from kvgate.engines.crosscheck import crosscheck
from kvgate.engines.pool import EngineLogError, read_engine_log
from kvgate.engines.report import apply_overrides, model_from_log, render_check, render_pool
from kvgate.units import parse_bytes


def add_engine_log_arguments(p: argparse.ArgumentParser) -> None:
    """``--engine-log`` and the options only it uses (names not used by ``gate``)."""
    p.add_argument("--engine-log", default=None, metavar="FILE",
                   help="gate the KV pool a vLLM / SGLang / llama.cpp startup log shows (with --slots, --max-seq)")
    p.add_argument("--host-bytes", default=None,
                   help="with --engine-log: host memory KV offload may use (e.g. 64GiB; vLLM's kv_offloading_size "
                        "when logged)")


def run_engine_gate(args: Any) -> int:
    """Run the engine-log gate from parsed arguments: ``engine_log``, ``slots``,
    ``max_seq``, and when present ``model``, ``kv_format``, ``tp``, ``trace``, ``rate``,
    ``host_bytes``, ``out``, ``force``, ``json``.

    Raises:
        EngineLogError: no model to size the slots with, or no targets.
    """
    from kvgate.gate.record import write_record  # noqa: PLC0415
    from kvgate.output import emit  # noqa: PLC0415

    out = getattr(args, "out", None)
    pool = apply_overrides(read_engine_log(args.engine_log), kv_format=getattr(args, "kv_format", None),
                           tp=getattr(args, "tp", None))
    model = model_from_log(pool, getattr(args, "model", None))
    if model is None:
        raise EngineLogError("the engine-log gate needs the model to size one sequence",
                             hint="pass --model (config.json, model directory, .gguf or preset)")
    slots, max_seq = getattr(args, "slots", None), getattr(args, "max_seq", None)
    if not slots or not max_seq:
        raise EngineLogError("--engine-log needs --slots N and --max-seq L (the target)")
    kv_format = getattr(args, "kv_format", None)
    tp = getattr(args, "tp", None)
    check = crosscheck(pool, model, kv_format=kv_format, tp=tp)
    trace = None
    if getattr(args, "trace", None):
        from kvgate.replay.trace import load_trace  # noqa: PLC0415

        trace = load_trace(args.trace, rate=getattr(args, "rate", None), time_unit=getattr(args, "time_unit", None))
    hb = getattr(args, "host_bytes", None)
    res = gate_from_engine_log(pool, model, slots=int(slots), max_seq=int(max_seq), kv_format=kv_format, tp=tp,
                               pool_bytes=check.get("pool_bytes"), trace=trace,
                               host_bytes=parse_bytes(hb) if hb else None)
    path = None
    if not getattr(args, "no_record", False):
        path = str(write_record(res["record"], out, force=getattr(args, "force", False)))
    res["record_path"] = path
    text = "\n".join([render_pool(pool), render_check(check), "", *res["lines"]]
                     + ([f"record: {path}"] if path else []))
    emit(args, {"pool": pool.to_dict(), "crosscheck": check, **{k: v for k, v in res.items()}}, text)
    return 0
