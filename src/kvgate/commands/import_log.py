"""``kvgate import-log``: an engine startup log (vLLM, SGLang, llama.cpp) → the KV pool
it built, as a kvgate measurement, cross-checked against the model."""

from __future__ import annotations

import argparse

from kvgate.atomicio import check_writable, write_json_atomic
from kvgate.commands._engine_log import (
    RULE_HELP,
    add_startup_flags,
    add_whatif_flags,
    answer_whatif,
    apply_log_settings,
    resolve_log_settings,
    settle_by_crosscheck,
    whatif_from_args,
)
from kvgate.commands._types import positive_int
from kvgate.engines.registry import ENGINES, get_engine
from kvgate.errors import KvgateError
from kvgate.output import emit

NAME = "import-log"
HELP = "read a vLLM / SGLang / llama.cpp startup log into a KV pool measurement, cross-checked against the model"
DESCRIPTION = """\
Read the startup log an engine printed (pasted from a terminal, docker compose or an
issue: process tags, timestamps and terminal wraps are handled) and report the KV pool
it built, per tensor-parallel rank, in bytes with the interval its printed rounding
leaves. vLLM: "Available KV cache memory" (minimum over ranks), "GPU KV cache size",
"Maximum concurrency"; SGLang: "KV Cache is allocated. #tokens: N, K size: X GB" (SGLang's
GB is 2^30 bytes); llama.cpp: every "llama_kv_cache: size = … MiB (N cells, L layers,
S/S seqs)" line.

With --model (or when the log names a local model directory / GGUF), kvgate recomputes the
pool from the model under that engine's rules and says "agrees to the block/cell/token"
or shows the difference and its likely cause. --requested-kv-format names the cache type
you asked for (e.g. q4_0) so a request the engine silently did not apply is reported.

What if: another GPU (--gpu NAME / --total BYTES), --gpu-memory-utilization or
--mem-fraction-static, --max-model-len / --context-length / -c, -tp, --kv-cache-dtype or
-ctk/-ctv: the engine's own answer (kvgate fit's: fits / does not fit / can't tell, the KV
cache pool, tokens, concurrency, flip points) with the non-KV terms the log printed
(weights, non-torch memory, activation peak, CUDA graph pool) carried over, and a list of
which were carried, re-split or re-estimated.

{rule}

  kvgate import-log vllm.log --model qwen3-0.6b --gpu H200
  kvgate import-log vllm.log --model gpt-oss-20b --kv-cache-dtype fp8 --max-model-len 64k
""".replace("{rule}", RULE_HELP)


def add_arguments(p: argparse.ArgumentParser) -> None:
    from kvgate.commands._args import add_sources_flag  # noqa: PLC0415
    from kvgate.commands._flag_table import add_engine_table_flags  # noqa: PLC0415

    p.add_argument("log", help="the engine's startup log (text file)")
    add_sources_flag(p)
    p.add_argument("--engine", choices=ENGINES, default=None, help="the engine (default: detected)")
    p.add_argument("--model", default=None, help="config.json, model directory, .gguf or preset for the cross-check")
    p.add_argument("--kv-format", default=None, help="the log's KV format when it does not say (vLLM: bf16, fp8 …; "
                   "default vLLM's auto, the model's dtype)")
    p.add_argument("--tp", type=positive_int, default=None, help="the log's tensor-parallel size when it does not say it")
    p.add_argument("--pp", dest="pp", type=positive_int, default=None,
                   help="the log's vLLM pipeline-parallel size when it does not say it")
    add_engine_table_flags(p, "import_log")
    p.add_argument("--requested-kv-format", default=None, help="the KV cache type you asked the engine for")
    p.add_argument("--out", default=None, help="write the kvgate.measurement/1 JSON of the pool here")
    p.add_argument("--force", action="store_true", help="overwrite --out")
    add_startup_flags(p)
    add_whatif_flags(p)


def run(args: argparse.Namespace) -> int:
    from kvgate.engines import crosscheck, read_engine_log  # noqa: PLC0415
    from kvgate.engines.report import model_from_log, pool_payload, render_check, render_pool  # noqa: PLC0415
    from kvgate.geometry.formats import get_format  # noqa: PLC0415
    from kvgate.measure.measurement import measurement_file  # noqa: PLC0415

    if args.out:
        check_writable(args.out, force=args.force)
    for flag, fmt in (("--kv-format", args.kv_format), ("--requested-kv-format", args.requested_kv_format)):
        if fmt is not None:
            try:
                get_format(fmt)
            except KvgateError as exc:
                raise KvgateError(f"{flag}: {exc.message}", hint=exc.hint) from None
    pool = read_engine_log(args.log, engine=args.engine, startup=args.startup, service=args.service)
    if args.pp is not None and not get_engine(pool.engine).pipeline_stages:  # no pipeline stages kvgate models
        raise KvgateError(f"--pp {args.pp}: the pipeline-parallel size is vLLM's, and this is a {pool.engine} log",
                          hint="leave --pp out")
    model = model_from_log(pool, args.model)
    ls = resolve_log_settings(args, pool, model)
    settle_by_crosscheck(pool, model, ls, block_size=args.block_size)
    pool = apply_log_settings(pool, ls)
    w = whatif_from_args(args, pool, ls)
    if w.asked() and model is None:
        raise KvgateError("a what-if needs the model to size the KV cache",
                          hint="pass --model (config.json, model directory, .gguf or preset)")
    check = None
    if model is not None:
        check = crosscheck(pool, model, kv_format=ls.kv_format, tp=ls.tp, block_size=args.block_size,
                           requested_kv_format=args.requested_kv_format, pp=ls.pp)
    exact = check["pool_bytes"] if check and check.get("pool_bytes") else None
    doc = None
    if exact or pool.pool_bytes is not None:
        m = pool.measurement(total_bytes=exact)
        doc = measurement_file([m], command=None)
        if args.out:
            write_json_atomic(args.out, doc, force=args.force)
    elif args.out:
        raise KvgateError(f"--out {args.out}: the log states no pool bytes, so there is no measurement to write",
                          hint="pass --model so that kvgate computes the pool's bytes from the model")
    payload = {"pool": pool_payload(pool), "crosscheck": check, "measurement": doc, "out": args.out}
    text = render_pool(pool) + "\n" + render_check(check)
    if exact:
        text += f"\npool (exact, from the model): {exact:,} B " + ("per rank" if get_engine(pool.engine).pool_per_rank
                                                                   else "(all layers)")
    if args.out:
        text += f"\nwrote {args.out}"
    if w.asked():
        from kvgate.fit.whatif import render_whatif  # noqa: PLC0415

        wa = answer_whatif(args.log, pool, model, w, startup=args.startup, service=args.service,
                           weights_ref=args.model, check=check)
        payload["what_if"] = wa.to_dict()
        text += "\n\n" + render_whatif(wa, sources=getattr(args, "sources", False))
    emit(args.json, payload, text)
    from kvgate.errors import EXIT_CHANGED, EXIT_OK

    return EXIT_OK if check is None or check["status"] != "differs" else EXIT_CHANGED
