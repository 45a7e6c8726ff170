"""``kvgate gate --engine-log FILE --slots N --max-seq L``: the gate for a pool an engine
logged. Kept here so ``commands/gate.py`` needs only a flag and a call:
:func:`add_engine_log_arguments` and :func:`run_engine_gate`.

Every engine flag reaches this gate through the same typed options as the other commands
(:func:`kvgate.commands._args.engine_options_from_args`): ``-tp 2`` is ``--tp 2``,
``--kv-cache-dtype fp8`` is ``--kv-format fp8``, ``--max-num-seqs``/``-np`` are ``--slots``,
``--max-model-len``/``-c`` give ``--max-seq``. A KV format or TP the user did not give is
the log's (:attr:`kvgate.options.EngineOptions.explicit`) — unless the log states its own
and the flag differs: then it is a what-if.

What-ifs (:func:`add_whatif_flags`, :func:`whatif_from_args`, :func:`answer_whatif`): another
GPU (``--gpu``/``--total``), ``--gpu-memory-utilization`` / ``--mem-fraction-static``,
``--max-model-len`` / ``--context-length`` / ``-c``, ``-tp``, ``--kv-cache-dtype`` / ``-ctk``
``-ctv``: the engine's own answer (``kvgate fit``'s shape) with the log's non-KV terms carried
over (:mod:`kvgate.fit.whatif`).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from kvgate.commands._args import engine_options_from_args, gate_options_from_args, replay_options_from_args
from kvgate.engines.candidates import gate_from_engine_log
from kvgate.engines.crosscheck import crosscheck
from kvgate.engines.pool import EngineLogError, EnginePool, read_engine_log
from kvgate.engines.report import apply_overrides, model_from_log, render_check, render_pool
from kvgate.units import parse_bytes

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.fit.whatif import WhatIf, WhatIfAnswer


def add_engine_log_arguments(p: argparse.ArgumentParser) -> None:
    """``--engine-log`` and the options only it uses (names not used by ``gate``)."""
    p.add_argument("--engine-log", default=None, metavar="FILE",
                   help="gate the KV pool a vLLM / SGLang / llama.cpp startup log shows (with --slots, --max-seq)")
    p.add_argument("--host-bytes", default=None,
                   help="with --engine-log: host memory KV offload may use (e.g. 64GiB; vLLM's kv_offloading_size "
                        "when logged)")
    add_startup_flags(p)
    add_whatif_flags(p, gate=True)


def _fraction(text: str) -> float:
    from kvgate.commands._fit_args import _fraction as parse  # noqa: PLC0415

    return parse(text)


def add_whatif_flags(p: argparse.ArgumentParser, *, gate: bool = False) -> None:
    """The what-if flags. ``gate``: ``kvgate gate`` already spells ``--total`` (the
    measurement's, the what-if GPU's with ``--engine-log``), ``--max-model-len``, ``-c``,
    ``-tp``, ``--kv-cache-dtype``, ``-ctk``/``-ctv``, ``-np`` and ``--vllm-version``."""
    from kvgate.commands._fit_args import _human_int  # noqa: PLC0415
    from kvgate.commands._types import nonneg_int, positive_int  # noqa: PLC0415

    g = p.add_argument_group("what if (the engine's answer for other settings; the log's non-KV terms carried)")
    g.add_argument("--gpu", dest="whatif_gpu", metavar="NAME", default=None,
                   help="another GPU by name (H100, H200, A100-80GB, L40S, RTX-4090, ...)")
    if not gate:
        g.add_argument("--total", dest="total", metavar="BYTES", default=None,
                       help="another GPU by its nvidia-smi memory.total, e.g. 81559MiB")
    g.add_argument("--gpu-memory-utilization", dest="whatif_util", metavar="U", type=_fraction, default=None,
                   help="vLLM's share of the GPU")
    g.add_argument("--mem-fraction-static", dest="whatif_mfs", metavar="F", type=_fraction, default=None,
                   help="SGLang's share of free memory")
    g.add_argument("--context-length", dest="whatif_context_length", metavar="L", type=positive_int, default=None,
                   help="SGLang's tokens per request")
    if gate:
        g.description = ("with --engine-log; --total then names another GPU too, and -tp, --kv-cache-dtype or -ctk/-ctv\n"
                         "that differ from what the log states are what-ifs as well")
        return
    g.add_argument("--max-model-len", dest="vllm_max_model_len", metavar="L", type=_human_int("--max-model-len"),
                   default=None, help="vLLM's tokens per request (32k = 32,000, 32K = 32,768)")
    g.add_argument("-c", "--ctx-size", dest="lcpp_ctx_size", metavar="N", type=nonneg_int, default=None,
                   help="llama.cpp's whole context")
    g.add_argument("-np", "--parallel", dest="lcpp_parallel", metavar="N", type=positive_int, default=None,
                   help="llama.cpp's parallel sequences")
    g.add_argument("-tp", "--tensor-parallel-size", "--tp-size", dest="vllm_tp", metavar="N", type=positive_int,
                   default=None, help="another tensor parallel size (--tp: the log's own, when it does not say)")
    g.add_argument("--kv-cache-dtype", dest="vllm_kv_cache_dtype", metavar="DTYPE", default=None,
                   help="another KV dtype (vLLM/SGLang: fp8, auto, ...)")
    g.add_argument("-ctk", "--cache-type-k", dest="lcpp_cache_type_k", metavar="TYPE", default=None,
                   help="llama.cpp's K type (q8_0, q4_0, f16, ...)")
    g.add_argument("-ctv", "--cache-type-v", dest="lcpp_cache_type_v", metavar="TYPE", default=None,
                   help="llama.cpp's V type")
    g.add_argument("--vllm-version", "--release", dest="vllm_version", metavar="X.Y.Z", default=None,
                   help="the engine release when the log does not print it")


def _stated_tp(pool: EnginePool) -> int | None:
    """The log's TP when the log states it (not a lower bound from process tags)."""
    src = str((pool.parallel.get("tp") or {}).get("source") or "")
    return pool.tp if pool.tp is not None and "at least" not in src else None


def whatif_from_args(args: argparse.Namespace, pool: EnginePool, *, kv_format: str | None = None,
                     tp: int | None = None, gate: bool = False) -> WhatIf:
    """The what-if settings of the command line (:class:`kvgate.fit.whatif.WhatIf`).

    ``kv_format`` / ``tp`` (gate): the engine options' values; they are what-ifs only when
    the log states its own and they differ. ``gate``: the length and sequences are the
    gate's target, not a what-if by themselves; they join one that another GPU, share, TP
    or KV dtype starts.

    Raises:
        KvgateError: ``--gpu`` and ``--total`` together; an unknown GPU.
    """
    from kvgate.errors import KvgateError  # noqa: PLC0415
    from kvgate.fit.gpus import gpu_from_total, lookup_gpu  # noqa: PLC0415
    from kvgate.fit.whatif import WhatIf  # noqa: PLC0415

    name, total = getattr(args, "whatif_gpu", None), getattr(args, "total", None)
    if name and total:
        raise KvgateError("--gpu and --total name the GPU twice", hint="give one of them")
    gpu = lookup_gpu(name) if name else (gpu_from_total(parse_bytes(total)) if total else None)
    util = getattr(args, "whatif_util", None) if pool.engine == "vllm" else getattr(args, "whatif_mfs", None)
    other = getattr(args, "whatif_mfs", None) if pool.engine == "vllm" else getattr(args, "whatif_util", None)
    if other is not None:
        raise KvgateError(f"{'--mem-fraction-static' if pool.engine == 'vllm' else '--gpu-memory-utilization'} is "
                          f"not a {pool.engine} flag", hint="vLLM: --gpu-memory-utilization; SGLang: --mem-fraction-static")
    L = {"vllm": getattr(args, "vllm_max_model_len", None), "sglang": getattr(args, "whatif_context_length", None),
         "llama.cpp": getattr(args, "lcpp_ctx_size", None)}[pool.engine]
    log_L = pool.flags.get("n_ctx") if pool.engine == "llama.cpp" else pool.max_model_len
    if L is not None and L == log_L:
        L = None  # the log's own
    np_ = getattr(args, "lcpp_parallel", None) if pool.engine == "llama.cpp" else None
    if np_ is not None and np_ == pool.flags.get("n_seq_max"):
        np_ = None
    if tp is None:
        tp = getattr(args, "vllm_tp", None)
    elif tp == _stated_tp(pool) or _stated_tp(pool) is None:
        tp = None  # the log's own TP (given because the log does not say it), not a what-if
    kv = kv_format if kv_format is not None else (getattr(args, "vllm_kv_cache_dtype", None)
                                                  or getattr(args, "lcpp_cache_type_k", None))
    if kv_format is not None and (pool.kv_format is None or kv_format == pool.kv_format):
        kv = None
    ctv = getattr(args, "lcpp_cache_type_v", None) if pool.engine == "llama.cpp" else None
    if gate and gpu is None and util is None and tp is None and kv is None and ctv is None:
        L = np_ = None  # the target alone: the gate answers it on the logged pool
    return WhatIf(gpu=gpu, utilization=util, max_model_len=L, tp=tp, kv_cache_dtype=kv, cache_type_v=ctv,
                  parallel=np_, release=getattr(args, "vllm_version", None))


def answer_whatif(path: str, pool: EnginePool, model: Any, w: WhatIf, *, startup: int | None,
                  service: str | None, weights_ref: str | None) -> WhatIfAnswer:
    """The what-if answer for the startup of ``path`` that ``pool`` was read from."""
    from pathlib import Path  # noqa: PLC0415

    from kvgate.engines.logtext import logical_lines  # noqa: PLC0415
    from kvgate.engines.startups import select_startup  # noqa: PLC0415
    from kvgate.fit.whatif import whatif_from_log  # noqa: PLC0415

    text = Path(path).read_text(encoding="utf-8", errors="replace")
    lines, _ = select_startup(logical_lines(text), pool.engine, startup=startup, service=service)
    if weights_ref is None and pool.model and Path(pool.model).expanduser().exists():
        weights_ref = str(Path(pool.model).expanduser())
    return whatif_from_log(pool, lines, model, w, weights_ref=weights_ref)


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
    w = whatif_from_args(args, pool, kv_format=kv_format or pool.kv_format, tp=given_tp or _stated_tp(pool), gate=True)
    if w.tp is not None:
        given_tp = None  # a what-if TP, not the log's
    if w.kv_cache_dtype is not None:
        kv_format = None  # a what-if KV dtype, not the log's
    pool = apply_overrides(pool, kv_format=kv_format, tp=given_tp)
    given_pp = engine.layout_options.get("pipeline_parallel_size")  # vLLM -pp
    for flag, key in (("-pp", "pipeline_parallel_size"), ("-dcp", "decode_context_parallel_size")):
        val = engine.layout_options.get(key)
        if val is not None and val != 1 and pool.engine != "vllm":  # vLLM's flags: would go unused
            raise EngineLogError(f"{flag} {val}: a vLLM flag, and this is a {pool.engine} log", hint=f"leave {flag} out")
    given_dcp = engine.layout_options.get("decode_context_parallel_size")
    log_dcp = int(pool.parsed.get("decode_context_parallel_size") or 1) if pool.engine == "vllm" else 1
    if given_dcp is not None and given_dcp != log_dcp:  # the gate sizes a rank from the log's cp, never -dcp's
        raise EngineLogError(f"-dcp {given_dcp}: the log's decode context parallel size is {log_dcp} (its "
                             "'Multiplying the GPU KV cache size' line), and the engine-log gate sizes the log's pool",
                             hint="leave -dcp out; size another split with kvgate fit -dcp")
    if given_pp is not None:
        if given_pp > model.num_layers:  # as kvgate fit refuses it (kvgate.fit.vllm_fit.check_parallel)
            raise EngineLogError(f"-pp {given_pp}: more pipeline stages than the model's {model.num_layers} layers",
                                 hint="the log's pipeline-parallel size, at most one stage per layer")
        pool = replace(pool, pp=given_pp)
    slots, max_seq = engine.slots, engine.max_seq_for(model)
    if not slots or not max_seq:
        raise EngineLogError("--engine-log needs --slots N and --max-seq L (the target)")
    mpe = model.max_position_embeddings
    if pool.engine in ("vllm", "sglang") and mpe and max_seq > mpe:
        # vLLM: ModelConfig get_and_verify_max_len ("User-specified max_model_len ... is greater than the
        # derived max_model_len"); SGLang: ModelConfig context_len check; both unless an env override is set
        raise EngineLogError(f"--max-seq {max_seq:,}: {pool.engine} refuses a length past the model's "
                             f"max_position_embeddings {mpe:,} (VLLM_ALLOW_LONG_MAX_MODEL_LEN / "
                             "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN override it)",
                             hint=f"a target length of at most {mpe:,}")
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
    from kvgate.gate.render import render_engine_log_gate  # noqa: PLC0415

    lines = render_engine_log_gate(res, pool.engine, slots=slots, max_seq=max_seq)
    text = "\n".join([render_pool(pool), render_check(check), "", *lines] + ([f"record: {path}"] if path else []))
    payload = {"pool": pool.to_dict(), "crosscheck": check, **res}
    if w.asked():
        from kvgate.fit.whatif import render_whatif  # noqa: PLC0415

        if pool.engine == "vllm" and w.max_model_len is None and max_seq != pool.max_model_len:
            w = replace(w, max_model_len=max_seq)  # the target length is the what-if's --max-model-len
        wa = answer_whatif(args.engine_log, pool, model, w, startup=args.startup, service=args.service,
                           weights_ref=engine.model)
        payload["what_if"] = wa.to_dict()
        text += "\n\n" + render_whatif(wa)
    emit(args.json, payload, text)
    return 0
