"""``kvgate gate --engine-log FILE --slots N --max-seq L``: the gate for a pool an engine
logged. Kept here so ``commands/gate.py`` needs only a flag and a call:
:func:`add_engine_log_arguments` and :func:`run_engine_gate`.

Every engine flag reaches this gate through the same typed options as the other commands
(:func:`kvgate.commands._args.engine_options_from_args`): ``-tp 2`` is ``--tp 2``,
``--kv-cache-dtype fp8`` is ``--kv-format fp8``, ``--max-num-seqs``/``-np`` are ``--slots``,
``--max-model-len``/``-c`` give ``--max-seq``. A KV format or TP the user did not give is
the log's (:attr:`kvgate.options.EngineOptions.explicit`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace

from kvgate.commands._args import engine_options_from_args, gate_options_from_args, replay_options_from_args
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
    add_startup_flags(p)


def add_startup_flags(p: argparse.ArgumentParser) -> None:
    """``--startup N`` and ``--service NAME``: which startup of which ``docker compose``
    service of a log is read (:func:`kvgate.engines.startups.select_startup`)."""
    p.add_argument("--startup", type=int, default=None, metavar="N",
                   help="read the N-th startup in the log (1-based; default: the last one that built its pool)")
    p.add_argument("--service", default=None, metavar="NAME",
                   help="read this docker compose service of the log (default: the only one with a pool)")


def run_engine_gate(args: argparse.Namespace) -> int:
    """Run the engine-log gate: the engine flags as :class:`kvgate.options.EngineOptions`,
    ``--trace`` as :class:`kvgate.options.ReplayOptions`, the record flags as
    :class:`kvgate.options.GateOptions`, and ``--engine-log``, ``--host-bytes``.

    Raises:
        EngineLogError: no model to size the slots with, or no targets.
    """
    from kvgate.gate.record import write_record
    from kvgate.output import emit
    from kvgate.session import load_replay_trace

    engine = engine_options_from_args(args)
    replay = replay_options_from_args(args, engine)
    given_tp = engine.tp if "tp" in engine.explicit else None
    given_k = engine.kv_format if "kv_format" in engine.explicit else None
    pool = read_engine_log(args.engine_log, startup=args.startup, service=args.service)
    model = model_from_log(pool, engine.model)
    if model is None:
        raise EngineLogError("the engine-log gate needs the model to size one sequence",
                             hint="pass --model (config.json, model directory, .gguf or preset)")
    kv_format = engine.formats_for(model)[0] if given_k else None  # vLLM's auto: the model's dtype
    pool = apply_overrides(pool, kv_format=kv_format, tp=given_tp)
    given_pp = engine.layout_options.get("pipeline_parallel_size")  # vLLM -pp
    if given_pp is not None:
        pool = replace(pool, pp=given_pp)
    slots, max_seq = engine.slots, engine.max_seq_for(model)
    if not slots or not max_seq:
        raise EngineLogError("--engine-log needs --slots N and --max-seq L (the target)")
    record = gate_options_from_args(args, engine)  # where the record goes
    check = crosscheck(pool, model, kv_format=kv_format, tp=given_tp,
                       block_size=engine.layout_options.get("block_size"), pp=given_pp)
    trace = load_replay_trace(replay) if replay is not None else None
    res = gate_from_engine_log(pool, model, slots=slots, max_seq=max_seq, kv_format=kv_format, tp=given_tp,
                               pool_bytes=check.get("pool_bytes"), trace=trace,
                               host_bytes=parse_bytes(args.host_bytes) if args.host_bytes else None)
    path = None
    if not record.no_record:
        path = str(write_record(res["record"], record.out, force=record.force))
    res["record_path"] = path
    text = "\n".join([render_pool(pool), render_check(check), "", *res["lines"]]
                     + ([f"record: {path}"] if path else []))
    emit(args.json, {"pool": pool.to_dict(), "crosscheck": check, **res}, text)
    return 0
