"""``kvgate gate --engine-log FILE --max-num-seqs N --max-model-len L``: the gate for a pool
an engine logged, and what ``import-log`` shares with it. Kept here so ``commands/gate.py``
needs only a flag and a call: :func:`add_engine_log_arguments` and :func:`run_engine_gate`.

One rule for both commands (:data:`RULE_HELP`, :func:`resolve_log_settings`): kvgate's
spellings ``--tp``, ``--kv-format``, ``--pp`` describe the log where it is silent; the
engine's spellings (``-tp``, ``--kv-cache-dtype``, ``-ctk``/``-ctv``, ``-pp``, ...) are
what-ifs where they differ from what the log states, and the log's own (with a note) where
it states nothing, unless the log's own numbers decide (:func:`settle_by_crosscheck`). A
vLLM/SGLang log silent on its KV dtype ran ``auto``: the model's dtype, noted by the
cross-check. A gate whose cross-check differs is refused (no verdict from a sizing that
does not rebuild the logged pool).

What-ifs (:func:`add_whatif_flags`, :func:`whatif_from_args`, :func:`answer_whatif`): another
GPU (``--gpu``/``--total``), ``--gpu-memory-utilization`` / ``--mem-fraction-static``,
``--max-model-len`` / ``--context-length`` / ``-c``, ``-tp``, ``--kv-cache-dtype`` / ``-ctk``
``-ctv``, ``-fa``: the engine's own answer (``kvgate fit``'s shape) with the log's non-KV
terms carried over (:mod:`kvgate.fit.whatif`); in the gate it judges the target sequences
and length.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Any

from kvgate.commands._args import engine_options_from_args, gate_options_from_args, replay_options_from_args
from kvgate.units import fmt_gib, parse_bytes

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.engines.pool import EnginePool
    from kvgate.fit.whatif import WhatIf, WhatIfAnswer
    from kvgate.options import EngineOptions


def add_engine_log_arguments(p: argparse.ArgumentParser) -> None:
    """``--engine-log`` and the options only it uses (names not used by ``gate``)."""
    p.add_argument("--engine-log", default=None, metavar="FILE",
                   help="gate the KV pool a vLLM / SGLang / llama.cpp startup log shows (with --slots, --max-seq)")
    p.add_argument("--host-bytes", default=None, metavar="B",
                   help="with --engine-log: host memory KV offload may use (e.g. 64GiB; vLLM's kv_offloading_size "
                        "when logged)")
    add_startup_flags(p)
    add_whatif_flags(p, gate=True)
    from kvgate.commands._args import add_sources_flag  # noqa: PLC0415

    add_sources_flag(p)


def add_whatif_flags(p: argparse.ArgumentParser, *, gate: bool = False) -> None:
    """The what-if flags. ``gate``: ``kvgate gate`` already spells ``--total`` (the
    measurement's, the what-if GPU's with ``--engine-log``), ``--max-model-len``, ``-c``,
    ``-tp``, ``--kv-cache-dtype``, ``-ctk``/``-ctv``, ``-np`` and ``--vllm-version``."""
    from kvgate.commands._flag_table import add_engine_table_flags  # noqa: PLC0415
    from kvgate.commands._types import positive_int  # noqa: PLC0415

    g = p.add_argument_group("what if (the engine's answer for other settings; the log's non-KV terms carried)",
                             None)
    g.add_argument("--gpu", dest="whatif_gpu", metavar="NAME", default=None,
                   help="another GPU by name (H100, H200, A100-80GB, L40S, RTX-4090, ...)")
    if not gate:
        g.add_argument("--total", dest="total", metavar="BYTES", default=None,
                       help="another GPU by its nvidia-smi memory.total, e.g. 81559MiB")
    add_engine_table_flags(g, "whatif_gate" if gate else "whatif")
    if gate:
        g.description = RULE_GATE
        p.add_argument("--pp", dest="pp", type=positive_int, default=None, help="the log's -pp, when it is silent")


def _stated_tp(pool: EnginePool) -> int | None:
    """The log's TP when the log states it (not a lower bound from process tags)."""
    src = str((pool.parallel.get("tp") or {}).get("source") or "")
    return pool.tp if pool.tp is not None and "at least" not in src else None


_ENGINE_NAME = {"vllm": "vLLM", "sglang": "SGLang", "llama.cpp": "llama.cpp"}


def _stated_pp(pool: EnginePool) -> tuple[int | None, bool]:
    """The log's pipeline parallel size and whether it is exact (``False``: a lower bound
    from ``Worker_PP…`` process tags); ``(None, False)`` when the log does not say."""
    src = str((pool.parallel.get("pp") or {}).get("source") or "")
    return pool.pp, pool.pp is not None and "at least" not in src


# -- the one rule for the log's settings and the what-ifs (import-log and gate --engine-log) --
RULE_HELP = (
    "The log's settings and the what-ifs (one rule for import-log and gate --engine-log):\n"
    "  kvgate's spellings --tp, --kv-format, --pp describe the LOG when it does not say;\n"
    "  the engine's spellings (-tp/--tensor-parallel-size, --kv-cache-dtype, -ctk/-ctv, -pp,\n"
    "  --gpu-memory-utilization, --max-model-len, -c, ...) are the WHAT-IF when they differ from\n"
    "  what the log states; when the log does not state the value, an engine spelling is taken\n"
    "  as the log's own, with a note (so pasting your launch flags works). vLLM/SGLang logs that\n"
    "  do not state their KV dtype ran --kv-cache-dtype auto: the model's dtype, with a note.")

RULE_GATE = ("with --engine-log (--total: another GPU too): --tp/--kv-format/--pp describe the LOG where it\n"
             "is silent; -tp, --kv-cache-dtype, -ctk/-ctv, -ngl ... are what-ifs where they differ (else the\n"
             "log's own, noted), for --max-num-seqs/--max-running-requests N --max-model-len/--context-length L")


@dataclass
class LogSettings:
    """The log's settings kvgate must be told, and the engine-spelled what-ifs, by the
    rule of :data:`RULE_HELP`.

    Attributes:
        kv_format: the log's KV format when the log does not state it (``--kv-format``, or
            an engine spelling taken as the log's own); ``None``: the log's own.
        tp, pp: likewise for the tensor / pipeline parallel size.
        whatif_kv, whatif_ctv, whatif_tp: engine-spelled values that differ from the log's.
        notes: one line per engine spelling taken as the log's own.
    """

    kv_format: str | None = None
    tp: int | None = None
    pp: int | None = None
    whatif_kv: str | None = None
    whatif_ctv: str | None = None
    whatif_tp: int | None = None
    notes: list[str] = field(default_factory=list)
    engine_kv: str | None = None  # the engine-spelled KV dtype taken as the log's own
    engine_tp: int | None = None  # the engine-spelled TP taken as the log's own
    inferred_tp: int | None = None  # the TP the logged weights imply (:func:`_tp_from_weights`)


def _fmt_name(fmt: str, model: Any, engine: str) -> str:
    """A KV format's kvgate name; ``auto`` is the log's ``engine``'s default for ``model``
    (:meth:`kvgate.engines.base.Engine.auto_kv_format`)."""
    from kvgate.engines.registry import get_engine  # noqa: PLC0415
    from kvgate.geometry.formats import get_format  # noqa: PLC0415

    if fmt.strip().lower() == "auto" and model is not None:
        return get_engine(engine).auto_kv_format(model)
    try:
        return get_format(fmt).name
    except Exception:  # noqa: BLE001  an engine-only name (llama.cpp's iq4_nl ...): kept as given
        return fmt


def resolve_log_settings(args: argparse.Namespace, pool: EnginePool, model: Any) -> LogSettings:
    """Apply the rule of :data:`RULE_HELP` to the command line (``args``) and the log
    (``pool``, as read, before any override): the tensor parallel size, the pipeline
    parallel size and the KV format, each by its own helper.

    A kvgate spelling that contradicts what the log states is passed on as before
    (:func:`kvgate.engines.report.apply_overrides` notes it and the cross-check uses it).

    Raises:
        KvgateError: ``-pp`` differing from the log's stated pipeline parallel size (not modelled);
            another engine's parallel or KV flag (:func:`check_kv_spellings`).
    """
    check_kv_spellings(args, pool)
    out = LogSettings()
    _check_parallel_flags(args, pool)
    _resolve_tp(args, pool, out)
    _resolve_pp(args, pool, out)
    if pool.engine == "llama.cpp":
        _resolve_llamacpp_kv(args, pool, model, out)
    else:
        _resolve_kv(args, pool, model, out)
    return out


def _check_parallel_flags(args: argparse.Namespace, pool: EnginePool) -> None:
    """Refuse a parallel size the log's engine has not, or a ``--pp`` the log contradicts."""
    from kvgate.errors import KvgateError  # noqa: PLC0415

    own_tp, own_pp, eng_pp = getattr(args, "tp", None), getattr(args, "pp", None), getattr(args, "vllm_pp", None)
    if pool.engine == "llama.cpp" and own_tp not in (None, 1):  # one process, its layers split by -ngl/-sm
        raise KvgateError(f"--tp {own_tp}: llama.cpp has no tensor parallel size, and this is a llama.cpp log",
                          hint="leave --tp out")
    if pool.engine != "vllm":
        for flag, val in (("--pp", own_pp), ("-pp", eng_pp)):
            if val not in (None, 1):  # vLLM's pipeline stages; kvgate models no other engine's
                raise KvgateError(f"{flag} {val}: the pipeline-parallel size is vLLM's, and this is a {pool.engine} log",
                                  hint=f"leave {flag} out")
    stated_pp, pp_exact = _stated_pp(pool)
    if own_pp is not None and stated_pp is not None and (own_pp != stated_pp if pp_exact else own_pp < stated_pp):
        src = (pool.parallel.get("pp") or {}).get("source") or "the log"
        raise KvgateError(f"--pp {own_pp}: the log states pipeline parallel size "
                          f"{'' if pp_exact else 'at least '}{stated_pp} ({src}); --pp names the log's own when it "
                          "does not say", hint="leave --pp out")


def _resolve_tp(args: argparse.Namespace, pool: EnginePool, out: LogSettings) -> None:
    own_tp, eng_tp = getattr(args, "tp", None), getattr(args, "vllm_tp", None)
    stated_tp = _stated_tp(pool)
    log_tp = stated_tp
    if own_tp is not None:  # the log's (one the log contradicts is noted by apply_overrides)
        out.tp = own_tp
        log_tp = stated_tp or own_tp
    if eng_tp is not None:
        if log_tp is None:
            out.tp = out.engine_tp = eng_tp
            out.notes.append(f"-tp {eng_tp}: the log does not state its tensor parallel size; taken as the log's own "
                             "(--tp names the log's; -tp is a what-if when it differs from the log's)")
        elif eng_tp != log_tp:
            out.whatif_tp = eng_tp
    if own_tp is None and eng_tp is None and pool.tp is None:
        inferred = _tp_from_weights(getattr(args, "model", None), pool)
        if inferred is not None:
            out.tp = out.inferred_tp = inferred[0]
            out.notes.append(inferred[1])


#: how far the logged weights of one rank × TP may be from the checkpoint's bytes for that TP to be taken
_TP_WEIGHTS_TOLERANCE = 0.03


def _tp_from_weights(model_ref: Any, pool: EnginePool) -> tuple[int, str] | None:
    """The tensor parallel size a log that does not state it implies: the one TP of 1, 2, 4, 8
    or 16 whose share of the checkpoint's exact bytes is within 3% of the weights one rank
    logged (vLLM's "Model loading took", SGLang's "Load weight end … mem usage"; tensor
    parallel layers, vocabulary-parallel embeddings and experts are split, norms are the only
    copies). ``None`` without logged weights, exact checkpoint bytes, a single match, or for an
    engine whose pool is not one rank's (llama.cpp: no TP); a log that names a quantization is left alone (the checkpoint given
    may not be the one loaded)."""
    from kvgate.engines.registry import get_engine  # noqa: PLC0415

    if not get_engine(pool.engine).pool_per_rank or pool.weights is None or not model_ref \
            or pool.flags.get("quantization"):
        return None
    from kvgate.errors import KvgateError  # noqa: PLC0415
    from kvgate.model.weights import weight_bytes  # noqa: PLC0415

    try:
        wb = weight_bytes(str(model_ref))
    except (KvgateError, OSError, ValueError):
        return None
    if not wb.exact or wb.bytes <= 0:
        return None
    lo, hi = pool.weights.low * (1 - _TP_WEIGHTS_TOLERANCE), pool.weights.high * (1 + _TP_WEIGHTS_TOLERANCE)
    fits = [tp for tp in (1, 2, 4, 8, 16) if lo <= wb.bytes / tp <= hi]
    if len(fits) != 1:
        return None
    tp = fits[0]
    return tp, (f"TP {tp} from the weights: the checkpoint's {fmt_gib(wb.bytes)} over the {pool.weights.text} "
                f"one rank logged (the log does not state its tensor parallel size; pass --tp N if not)")


def _resolve_pp(args: argparse.Namespace, pool: EnginePool, out: LogSettings) -> None:
    """vLLM's pipeline parallel size: no what-if modelled."""
    from kvgate.errors import KvgateError  # noqa: PLC0415

    own_pp, eng_pp = getattr(args, "pp", None), getattr(args, "vllm_pp", None)
    log_pp = pool.pp
    if own_pp is not None:
        out.pp = own_pp
        log_pp = log_pp or own_pp
    if eng_pp is not None:
        if log_pp is None:
            out.pp = eng_pp
            out.notes.append(f"-pp {eng_pp}: the log does not state its pipeline parallel size; taken as the log's own")
        elif eng_pp != log_pp:
            raise KvgateError(f"-pp {eng_pp}: the log states pipeline parallel size {log_pp}, and a what-if for "
                              "another -pp is not modelled", hint=f"drop -pp, or give the log's own (-pp {log_pp})")


def _log_kv(args: argparse.Namespace, pool: EnginePool, model: Any, out: LogSettings) -> str | None:
    """The log's KV format (an ``auto`` the log states is the model's dtype), or kvgate's
    ``--kv-format`` for it (kept in ``out``)."""
    own_kv = getattr(args, "kv_format", None)
    log_kv = pool.kv_format
    if log_kv is None and pool.engine != "llama.cpp" and str(pool.flags.get("kv_cache_dtype") or "") == "auto":
        log_kv = _fmt_name("auto", model, pool.engine)  # the log states auto: the engine's default
    if own_kv is not None:
        out.kv_format = own_kv
        log_kv = log_kv or own_kv
    return log_kv


def _resolve_llamacpp_kv(args: argparse.Namespace, pool: EnginePool, model: Any, out: LogSettings) -> None:
    """llama.cpp: ``-ctk``/``-ctv`` are what-ifs where they differ from the logged cache types."""
    from kvgate.errors import KvgateError  # noqa: PLC0415

    own_kv = getattr(args, "kv_format", None)
    ctk, ctv = getattr(args, "lcpp_cache_type_k", None), getattr(args, "lcpp_cache_type_v", None)
    log_kv = _log_kv(args, pool, model, out)
    name = partial(_fmt_name, model=model, engine=pool.engine)
    caches = pool.parsed.get("caches") or []
    stated_k = caches[0].get("k_type") if caches else None
    if own_kv is not None and stated_k is not None and name(own_kv) != name(str(stated_k)):
        raise KvgateError(f"--kv-format {own_kv}: the log states its cache types (K {stated_k}); --kv-format "
                          "names the log's own when it does not say", hint="ask the what-if with -ctk/-ctv")
    log_k = stated_k or log_kv
    log_v = (caches[0].get("v_type") if caches else None) or log_kv
    if ctk is not None and (log_k is None or name(ctk) != name(str(log_k))):
        out.whatif_kv = ctk
    if ctv is not None and (log_v is None or name(ctv) != name(str(log_v))):
        out.whatif_ctv = ctv


def _resolve_kv(args: argparse.Namespace, pool: EnginePool, model: Any, out: LogSettings) -> None:
    """vLLM / SGLang: ``--kv-cache-dtype`` (or ``-ctk``) is the log's own where the log is
    silent, else a what-if where it differs."""
    eng_kv = getattr(args, "vllm_kv_cache_dtype", None) or getattr(args, "lcpp_cache_type_k", None)
    log_kv = _log_kv(args, pool, model, out)
    if eng_kv is None:
        return
    if log_kv is None:
        out.kv_format = out.engine_kv = _fmt_name(eng_kv, model, pool.engine)
        spelled = "--kv-cache-dtype" if getattr(args, "vllm_kv_cache_dtype", None) else "-ctk"
        out.notes.append(f"{spelled} {eng_kv}: the log does not state its KV cache dtype; taken as the log's own "
                         "(--kv-format names the log's; --kv-cache-dtype is a what-if when it differs from the "
                         "log's)")
    elif _fmt_name(eng_kv, model, pool.engine) != _fmt_name(log_kv, model, pool.engine):
        out.whatif_kv = eng_kv


def check_kv_spellings(args: argparse.Namespace, pool: EnginePool) -> None:
    """Refuse a KV dtype the log's engine would not take, never drop it silently: vLLM's and
    SGLang's ``--kv-cache-dtype`` on a llama.cpp log (llama.cpp spells ``-ctk``/``-ctv``), and
    a value that is no KV format at all (``--kv-cache-dtype abc``; vLLM/SGLang also take
    ``auto``: the model's dtype).

    Raises:
        KvgateError: either case, naming the flag and its value.
    """
    from kvgate.errors import KvgateError  # noqa: PLC0415
    from kvgate.geometry.formats import FormatError, get_format  # noqa: PLC0415

    eng_kv = getattr(args, "vllm_kv_cache_dtype", None)
    if pool.engine == "llama.cpp" and eng_kv is not None:
        raise KvgateError(f"--kv-cache-dtype {eng_kv}: a vLLM / SGLang flag, and this is a llama.cpp log",
                          hint="llama.cpp: -ctk/--cache-type-k and -ctv/--cache-type-v (f16, q8_0, q4_0, ...)")
    for flag, dest in (("--kv-format", "kv_format"), ("--kv-cache-dtype", "vllm_kv_cache_dtype"),
                       ("-ctk", "lcpp_cache_type_k"), ("-ctv", "lcpp_cache_type_v")):
        val = getattr(args, dest, None)
        if val is None or (str(val).strip().lower() == "auto" and pool.engine != "llama.cpp"):
            continue
        try:
            get_format(str(val))
        except FormatError as exc:
            raise KvgateError(f"{flag} {val}: not a KV cache type kvgate knows", hint=exc.hint or
                              "vLLM/SGLang: auto, bfloat16, float16, fp8, fp8_e4m3, fp8_e5m2; llama.cpp: f16, "
                              "bf16, f32, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl") from exc


def apply_log_settings(pool: EnginePool, ls: LogSettings) -> EnginePool:
    """``pool`` with the log's settings of ``ls`` filled in (:func:`apply_overrides`), noted
    once, in the spelling the user gave."""
    from kvgate.engines.report import apply_overrides  # noqa: PLC0415

    pool = apply_overrides(pool, kv_format=ls.kv_format, tp=ls.tp)
    engine_said = {f"kv_format {ls.engine_kv} from --kv-format (not in the log)" if ls.engine_kv else "",
                   f"tp {ls.engine_tp or ls.inferred_tp} from --tp (not in the log)"
                   if ls.engine_tp or ls.inferred_tp else ""}
    pool.notes[:] = [n for n in pool.notes if n not in engine_said] + ls.notes
    if ls.pp is not None:
        pool = replace(pool, pp=ls.pp)
    return pool


def settle_by_crosscheck(pool: EnginePool, model: Any, ls: LogSettings, *, block_size: int | None = None) -> None:
    """An engine spelling taken as the log's own (:func:`resolve_log_settings`) is turned
    back into a what-if when the log's own numbers decide: the cross-check
    (:func:`kvgate.engines.crosscheck.crosscheck`) differs with it and agrees without it (the
    model's dtype, vLLM's ``auto``; TP 1). E.g. ``--kv-cache-dtype fp8`` on a vLLM log whose
    blocks are the model's bf16 ones: fp8 is what the user asks about, not what ran.
    Updates ``ls`` in place, replacing the note."""
    from kvgate.engines.crosscheck import crosscheck as check  # noqa: PLC0415

    if model is None or (ls.engine_kv is None and ls.engine_tp is None):
        return
    ok = ("agrees",)

    def status(kv: str | None, tp: int | None) -> str:
        return str(check(pool, model, kv_format=kv, tp=tp, block_size=block_size, pp=ls.pp).get("status"))

    if status(ls.kv_format, ls.tp) != "differs":
        return
    own_tp = ls.tp if ls.engine_tp is None else None
    own_kv = ls.kv_format if ls.engine_kv is None else None
    for drop_kv, drop_tp in ((True, False), (False, True), (True, True)):
        if (drop_kv and ls.engine_kv is None) or (drop_tp and ls.engine_tp is None):
            continue
        kv = own_kv if drop_kv else ls.kv_format
        tp = own_tp if drop_tp else ls.tp
        if status(kv, tp) in ok:
            if drop_kv:
                ls.whatif_kv, ls.kv_format = ls.engine_kv, kv
                ls.notes = [n for n in ls.notes if "KV cache dtype" not in n]
                ls.notes.append(f"the log does not state its KV cache dtype, but its pool agrees with the model's "
                                f"dtype (vLLM's auto) and not with {ls.engine_kv}: {ls.engine_kv} is taken as a what-if")
                ls.engine_kv = None
            if drop_tp:
                ls.whatif_tp, ls.tp = ls.engine_tp, tp
                ls.notes = [n for n in ls.notes if "tensor parallel size; taken" not in n]
                ls.notes.append(f"the log does not state its tensor parallel size, but its pool agrees with TP "
                                f"{tp or 1} and not with {ls.engine_tp}: -tp {ls.engine_tp} is taken as a what-if")
                ls.engine_tp = None
            return


def whatif_from_args(args: argparse.Namespace, pool: EnginePool, ls: LogSettings, *,
                     target: tuple[int, int] | None = None) -> WhatIf:
    """The what-if settings of the command line (:class:`kvgate.fit.whatif.WhatIf`);
    ``ls``: the log's settings and the engine-spelled what-ifs (:func:`resolve_log_settings`).

    ``target`` (gate): ``(sequences, length)``, the gate's target; not a what-if by itself,
    it joins one that another GPU, share, TP or KV dtype starts, as that answer's
    ``--max-num-seqs`` / ``--max-model-len`` (SGLang ``--max-running-requests`` /
    ``--context-length``; llama.cpp ``-np`` and ``-c``).

    Raises:
        KvgateError: ``--gpu`` and ``--total`` together; an unknown GPU.
    """
    from kvgate.errors import KvgateError  # noqa: PLC0415
    from kvgate.fit.gpus import gpu_from_total, lookup_gpu  # noqa: PLC0415
    from kvgate.fit.whatif import WhatIf  # noqa: PLC0415

    if target is None:  # import-log: another engine's flag would go unused
        for flag, dest, engines in (("--max-model-len", "vllm_max_model_len", ("vllm",)),
                                    ("--context-length", "whatif_context_length", ("sglang",)),
                                    ("-c", "lcpp_ctx_size", ("llama.cpp",)), ("-np", "lcpp_parallel", ("llama.cpp",)),
                                    ("-fa", "flash_attn", ("llama.cpp",)), ("-ctv", "lcpp_cache_type_v", ("llama.cpp",))):
            val = getattr(args, dest, None)
            if val is not None and pool.engine not in engines:
                raise KvgateError(f"{flag} {val}: a {_ENGINE_NAME[engines[0]]} flag, and this is a {_ENGINE_NAME[pool.engine]} log",
                                  hint={"vllm": "vLLM: --max-model-len, --max-num-seqs",
                                        "sglang": "SGLang: --context-length, --max-running-requests",
                                        "llama.cpp": "llama.cpp: -c, -np, -ctk/-ctv, -fa, -ngl"}[pool.engine])
    name, total = getattr(args, "whatif_gpu", None), getattr(args, "total", None)
    if name is not None and not name.strip():  # "" is no card: never the log's own GPU instead
        raise KvgateError("--gpu is empty", hint="name a card (H100, L40S, ...), or drop --gpu for the log's own")
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
    seqs = None
    fa = getattr(args, "flash_attn", None) if pool.engine == "llama.cpp" else None
    if fa is not None and str(fa) == str(_log_fa(pool)):
        fa = None
    ngl = getattr(args, "whatif_ngl", None)
    if ngl is not None and pool.engine != "llama.cpp":
        raise KvgateError(f"-ngl {ngl}: a llama.cpp flag, and this is a {pool.engine} log", hint="leave -ngl out")
    started = any(v is not None for v in (gpu, util, ls.whatif_tp, ls.whatif_kv, ls.whatif_ctv, fa, ngl))
    if target is not None:
        if not started:
            L = np_ = None  # the target alone: the gate answers it on the logged pool
        else:  # the target is what the what-if answer judges
            n, length = target
            if pool.engine == "llama.cpp":
                np_ = n
                L = L or n * length
            else:
                L, seqs = length, n
    return WhatIf(gpu=gpu, utilization=util, max_model_len=L, tp=ls.whatif_tp, kv_cache_dtype=ls.whatif_kv,
                  cache_type_v=ls.whatif_ctv, parallel=np_, max_num_seqs=seqs, flash_attn=fa, n_gpu_layers=ngl,
                  release=getattr(args, "vllm_version", None))


def _log_fa(pool: EnginePool) -> str | None:
    """llama.cpp's logged flash_attn as on/off/auto (``None``: not logged)."""
    fa = pool.flags.get("flash_attn")
    if fa is None:
        return None
    return fa if fa in ("on", "off", "auto") else ("on" if fa in (1, "1", True, "true") else
                                                   "off" if fa in (0, "0", False, "false") else "auto")


def answer_whatif(path: str, pool: EnginePool, model: Any, w: WhatIf, *, startup: int | None,
                  service: str | None, weights_ref: str | None,
                  check: dict[str, Any] | None = None) -> WhatIfAnswer:
    """The what-if answer for the startup of ``path`` that ``pool`` was read from; ``check``:
    the cross-check (:func:`kvgate.engines.crosscheck.crosscheck`), whose block count gives the
    budget of a log that prints its pool only in tokens."""
    from pathlib import Path  # noqa: PLC0415

    from kvgate.engines.logtext import logical_lines  # noqa: PLC0415
    from kvgate.engines.startups import select_startup  # noqa: PLC0415
    from kvgate.fit.whatif import whatif_from_log  # noqa: PLC0415
    from kvgate.guarded import MAX_LOG_BYTES, read_regular  # noqa: PLC0415

    text = read_regular(path, what="engine log", max_bytes=MAX_LOG_BYTES).decode("utf-8", errors="replace")
    lines, _ = select_startup(logical_lines(text), pool.engine, startup=startup, service=service)
    if weights_ref is None and pool.model and Path(pool.model).expanduser().exists():
        weights_ref = str(Path(pool.model).expanduser())
    budget = None
    exp = (check or {}).get("expected") if (check or {}).get("status") in ("agrees", "consistent") else None
    if isinstance(exp, dict) and exp.get("budget_low") is not None and exp.get("budget_high") is not None:
        from kvgate.fit.interval import Interval  # noqa: PLC0415

        budget = Interval(int(exp["budget_low"]), int(exp["budget_high"]))
    return whatif_from_log(pool, lines, model, w, weights_ref=weights_ref, budget=budget)


def add_startup_flags(p: argparse.ArgumentParser) -> None:
    """``--startup N`` and ``--service NAME``: which startup of which ``docker compose``
    service of a log is read (:func:`kvgate.engines.startups.select_startup`)."""
    from kvgate.commands._types import count  # noqa: PLC0415

    p.add_argument("--startup", type=count(1), default=None, metavar="N",
                   help="read the N-th startup in the log (1-based; default: the last one that built its pool)")
    p.add_argument("--service", default=None, metavar="NAME",
                   help="read this docker compose service of the log (default: the only one with a pool)")


def _sglang_target(args: argparse.Namespace, pool: EnginePool, slots: int | None,
                   max_seq: int | None) -> tuple[int | None, int | None]:
    """The gate's target in SGLang's spellings: ``--max-running-requests N`` (sequences) and
    ``--context-length L`` (tokens per request, SGLang ``server_args.py``), on an SGLang log.

    Raises:
        KvgateError: ``--max-running-requests`` or ``--context-length`` on another engine's
            log; a target given twice with different values.
    """
    from kvgate.errors import KvgateError  # noqa: PLC0415

    mrr = getattr(args, "sglang_max_running_requests", None)
    if mrr is not None and pool.engine != "sglang":
        raise KvgateError(f"--max-running-requests {mrr}: an SGLang flag, and this is a {pool.engine} log",
                          hint="vLLM: --max-num-seqs; llama.cpp: -np")
    ctx = getattr(args, "whatif_context_length", None)
    if ctx is not None and pool.engine != "sglang":  # SGLang's target length: never dropped silently
        raise KvgateError(f"--context-length {ctx}: an SGLang flag, and this is a {_ENGINE_NAME[pool.engine]} log",
                          hint="vLLM: --max-model-len L; llama.cpp: -c N (with -np)")
    if pool.engine != "sglang":
        return slots, max_seq
    for flag, mine, theirs, other in (("--max-running-requests", slots, mrr, "--max-num-seqs/--slots"),
                                      ("--context-length", max_seq, ctx, "--max-model-len/--max-seq")):
        if mine is not None and theirs is not None and mine != theirs:
            raise KvgateError(f"{flag} {theirs} and {other} {mine} name the target twice", hint="give one of them")
    return (slots if slots is not None else mrr), (max_seq if max_seq is not None else ctx)


def _refuse_parallel_flags(engine: EngineOptions, pool: EnginePool, model: Any) -> None:
    """The engine-log gate's ``-pp`` / ``-dcp``: vLLM's flags, for a vLLM log, at the log's
    own decode context parallel size and at most one stage per layer.

    Raises:
        EngineLogError: a flag the log's engine or the log's pool does not take.
    """
    from kvgate.engines.pool import EngineLogError  # noqa: PLC0415

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
    given_pp = engine.layout_options.get("pipeline_parallel_size")  # vLLM -pp / --pp
    if given_pp is not None and given_pp > model.num_layers:  # as kvgate fit refuses it (vllm_fit.check_parallel)
        raise EngineLogError(f"-pp {given_pp}: more pipeline stages than the model's {model.num_layers} layers",
                             hint="the log's pipeline-parallel size, at most one stage per layer")


def _gate_target(args: argparse.Namespace, pool: EnginePool, engine: EngineOptions,
                 model: Any) -> tuple[EngineOptions, int, int]:
    """``(engine, slots, max_seq)``: the engine-log gate's target, in any engine's spellings.

    Raises:
        EngineLogError: no target, or a length the log's engine refuses for the model.
    """
    from kvgate.engines.pool import EngineLogError  # noqa: PLC0415

    slots, max_seq = engine.slots, engine.max_seq_for(model)
    slots, max_seq = _sglang_target(args, pool, slots, max_seq)
    if (slots, max_seq) != (engine.slots, engine.max_seq_for(model)):  # given in SGLang's spellings
        engine = replace(engine, slots=slots, max_seq=max_seq)
    if not slots or not max_seq:
        raise EngineLogError("--engine-log needs the target: --max-num-seqs N and --max-model-len L "
                             "(llama.cpp -np N -c C; kvgate's --slots N --max-seq L)")
    mpe = model.max_position_embeddings
    if pool.engine in ("vllm", "sglang") and mpe and max_seq > mpe:
        # vLLM: ModelConfig get_and_verify_max_len ("User-specified max_model_len ... is greater than the
        # derived max_model_len"); SGLang: ModelConfig context_len check; both unless an env override is set
        raise EngineLogError(f"--max-model-len {max_seq:,}: {pool.engine} refuses a length past the model's "
                             f"max_position_embeddings {mpe:,} (VLLM_ALLOW_LONG_MAX_MODEL_LEN / "
                             "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN override it)",
                             hint=f"a target length of at most {mpe:,}")
    return engine, slots, max_seq


def run_engine_gate(args: argparse.Namespace) -> int:
    """Run the engine-log gate: the engine flags as :class:`kvgate.options.EngineOptions`,
    ``--trace`` as :class:`kvgate.options.ReplayOptions`, the record flags as
    :class:`kvgate.options.GateOptions`, and ``--engine-log``, ``--host-bytes``.

    Raises:
        EngineLogError: no model to size the slots with, or no targets.
    """
    from kvgate.engines.candidates import gate_from_engine_log
    from kvgate.engines.crosscheck import crosscheck
    from kvgate.engines.pool import EngineLogError, read_engine_log
    from kvgate.engines.report import model_from_log, pool_payload, render_check, render_pool
    from kvgate.gate.record import write_record
    from kvgate.output import emit
    from kvgate.session import load_replay_trace

    # kvgate's spelling names the log's value, the engine's a what-if (RULE_HELP): both may be
    # given with different values; resolve_log_settings tells them apart, from ``args``
    own = argparse.Namespace(**vars(args))
    for mine, theirs in (("kv_format", "vllm_kv_cache_dtype"), ("tp", "vllm_tp"), ("pp", "vllm_pp")):
        if getattr(args, mine, None) is not None and getattr(args, theirs, None) is not None:
            setattr(own, theirs, None)
    engine = engine_options_from_args(own)
    replay = replay_options_from_args(args, engine)
    pool = read_engine_log(args.engine_log, startup=args.startup, service=args.service)
    model = model_from_log(pool, engine.model)
    if model is None:
        raise EngineLogError("the engine-log gate needs the model to size one sequence",
                             hint="pass --model (config.json, model directory, .gguf or preset)")
    _refuse_parallel_flags(engine, pool, model)
    ls = resolve_log_settings(args, pool, model)
    settle_by_crosscheck(pool, model, ls, block_size=engine.layout_options.get("block_size"))
    engine, slots, max_seq = _gate_target(args, pool, engine, model)
    w = whatif_from_args(args, pool, ls, target=(slots, max_seq))
    kv_format = ls.kv_format
    pool = apply_log_settings(pool, ls)
    auto_kv = None
    if pool.kv_format is None and pool.engine != "llama.cpp":  # vLLM's / SGLang's --kv-cache-dtype auto
        auto_kv = _fmt_name("auto", model, pool.engine)
    record = gate_options_from_args(args, engine)  # where the record goes
    check = crosscheck(pool, model, kv_format=kv_format, tp=ls.tp,
                       block_size=engine.layout_options.get("block_size"), pp=ls.pp)
    if check.get("engine_error"):  # a log of settings the engine refuses: nothing to size from it
        raise EngineLogError(str(check["engine_error"]), hint="the log's own settings (--pp, --model)")
    if check.get("status") == "differs":
        # the gate's S(L) is the same geometry the cross-check just showed does not rebuild the
        # logged pool: a verdict on it would be one from data known to be wrong
        raise EngineLogError("the cross-check differs: kvgate's sizing of this model does not rebuild the pool the "
                             "log shows, so no verdict is given on it\n" + render_check(check)
                             + "".join(f"\nnote: {n}" for n in ls.notes),
                             hint="give the log's own settings when it does not state them (--tp, --kv-format, "
                                  "--pp, --block-size) until `kvgate import-log` agrees; ask what-ifs with -tp, "
                                  "--kv-cache-dtype, --gpu")
    trace = load_replay_trace(replay) if replay is not None else None
    res = gate_from_engine_log(pool, model, slots=slots, max_seq=max_seq, kv_format=kv_format or auto_kv, tp=ls.tp,
                               pool_bytes=check.get("pool_bytes"), trace=trace,
                               host_bytes=parse_bytes(args.host_bytes) if args.host_bytes else None)
    wa = None
    if w.asked():  # answered before the record is written: a refusal (exit 2) writes nothing
        wa = answer_whatif(args.engine_log, pool, model, w, startup=args.startup, service=args.service,
                           weights_ref=engine.model, check=check)
    path = None
    if not record.no_record:
        path = str(write_record(res["record"], record.out, force=record.force))
    res["record_path"] = path
    from kvgate.gate.render import render_engine_log_gate  # noqa: PLC0415

    lines = render_engine_log_gate(res, pool.engine, slots=slots, max_seq=max_seq)
    lines += [f"  {k['label']:<26} not possible: {k['reason']}" for k in res.get("skipped", [])]
    text = "\n".join([render_pool(pool), render_check(check), "", *lines] + ([f"record: {path}"] if path else []))
    payload = {"pool": pool_payload(pool), "crosscheck": check, **res}
    if wa is not None:
        from kvgate.fit.whatif import render_whatif  # noqa: PLC0415

        payload["what_if"] = wa.to_dict()
        text += "\n\n" + render_whatif(wa, sources=getattr(args, "sources", False))
    emit(args.json, payload, text)
    return 0
