"""Command-line flags, each spelled once, and the builders of :mod:`kvgate.options` types.

``add_*_flags(parser)`` adds one group of flags; ``*_options_from_args(args)`` builds the
typed options from the parsed Namespace. Only :mod:`kvgate.commands` calls these: the
library below takes the typed options.

Engine flags come in kvgate's words and in the engines' (a user pastes the flags of their
engine command); the engines' are declared in their packages (``engines/<name>/flag_table.py``)
and built here by :mod:`kvgate.commands._flag_table`. An engine-only flag without ``--layout`` selects that engine's layout;
flags of two engines together, or an engine flag under another ``--layout``, are an error.
"""

from __future__ import annotations

import argparse
from typing import Any

from kvgate.commands._flag_table import add_engine_groups, given_engine_flags
from kvgate.commands._types import count, nonneg_int, positive_float, positive_int
from kvgate.errors import KvgateError
from kvgate.options import (
    DEFAULT_DECODE_RATE,
    DEFAULT_KV_FORMAT,
    DEFAULT_MARGIN,
    DEFAULT_PAGE_SIZE,
    DEFAULT_SENSITIVITY,
    DEFAULT_SLOTS_MEASURED,
    EngineOptions,
    GateOptions,
    MeasureOptions,
    ReplayOptions,
    llamacpp_max_seq,
)

LAYOUT_NAMES = ("contiguous", "vllm", "llama.cpp")
VLLM, LLAMACPP = "vllm", "llama.cpp"
# = kvgate.measure.runner.DEFAULT_SETTLE_S (0.25 s: 250 idle samples at 1 ms), spelled here so
# that building a parser does not import the measurement stack.
DEFAULT_SETTLE = "0.25s"

def add_engine_flags(p: argparse.ArgumentParser, *, model: str = "required", slots_help: str | None = None,
                     max_seq_help: str | None = None) -> None:
    """Model, KV formats, TP, layout, max_seq, slots, and the engines' own spellings.

    ``model``: ``required`` (``--model``), ``positional`` (``MODEL``) or ``optional``.
    """
    if model == "positional":
        p.add_argument("model", metavar="MODEL", help="config.json, model directory, GGUF file, or preset name")
    else:
        p.add_argument("--model", required=model == "required", default=None,
                       help="config.json, model directory, GGUF file, or preset name")
    g = p.add_argument_group("engine (kvgate's names)")
    g.add_argument("--max-seq", type=positive_int, default=None,
                   help=max_seq_help or "max_seq L: positions per sequence (vLLM --max-model-len; llama.cpp -c / -np)")
    g.add_argument("--slots", type=nonneg_int, default=None,
                   help=slots_help or "concurrent sequences N (vLLM --max-num-seqs; llama.cpp -np)")
    g.add_argument("--kv-format", "--kv-format-k", dest="kv_format", default=None,
                   help="KV format of K (and V): bf16, fp16, fp32, fp8, fp8-f32scale, int8-f32scale, q8_0, q4_0, ... "
                        "(default bf16; fp16 under llama.cpp, its f16)")
    g.add_argument("--kv-format-v", default=None, help="KV format of V when it differs from K")
    g.add_argument("--tp", type=positive_int, default=None, help="tensor-parallel size; figures are per rank (default 1)")
    g.add_argument("--layout", default=None,
                   help=f"{', '.join(LAYOUT_NAMES)}: engine layout (default contiguous, or the engine whose flags are given)")
    g.add_argument("--sliding-full", action="store_true",
                   help="sliding-window layers at full length (vLLM: --disable-hybrid-kv-cache-manager; llama.cpp: "
                        "--swa-full)")
    add_engine_groups(p, "layout")


def _one(what: str, pairs: list[tuple[str, Any]]) -> Any:
    """The value given for ``what`` under one or more spellings; ``None`` if none.

    Raises:
        KvgateError: two spellings with different values.
    """
    got = [(f, v) for f, v in pairs if v is not None]
    if len({repr(v) for _, v in got}) > 1:
        raise KvgateError(f"{what} given twice with different values: "
                          + ", ".join(f"{f} {v}" for f, v in got), hint="give it once")
    return got[0][1] if got else None


def _kv_formats(a: dict[str, Any], layout: str) -> tuple[str, str | None, str | None, str | None]:
    """``(K, V, K as given, V as given)``: the KV formats in kvgate's, vLLM's or llama.cpp's
    spelling; a side not given takes llama.cpp's own default under its layout (-ctk/-ctv f16),
    else kvgate's; V the same as K is ``None``."""
    ctk, ctv = a.get("lcpp_cache_type_k"), a.get("lcpp_cache_type_v")
    k = _one("the K format", [("--kv-format", a.get("kv_format")), ("--kv-cache-dtype", a.get("vllm_kv_cache_dtype")),
                              ("-ctk", ctk)])
    v = given_v = _one("the V format", [("--kv-format-v", a.get("kv_format_v")), ("-ctv", ctv)])
    given_k = k
    if layout == LLAMACPP:
        from kvgate.engines.registry import get_engine  # noqa: PLC0415

        default = str(get_engine(LLAMACPP).kv_format(None, None))
        k = k or default
        if v is None and (ctk or ctv):
            v = default
    k = k or DEFAULT_KV_FORMAT
    if v is not None and _same_format(k, v):
        v = None
    return k, v, given_k, given_v


def engine_options_from_args(args: argparse.Namespace, *, check: bool = True) -> EngineOptions:
    """:class:`EngineOptions` from :func:`add_engine_flags`' flags (any of them may be
    absent from ``args``); ``check``: build the layout now, so a layout option it does not
    take is named before any work.

    Raises:
        KvgateError: flags of two engines, an engine flag under another ``--layout``,
            one quantity given twice with different values, a layout option the layout
            does not take (checked here, so errors come before any work).
    """
    a = vars(args)
    engines = {e: fs for e, fs in given_engine_flags(args, "layout", joined=True).items() if fs}
    if len(engines) > 1:
        raise KvgateError("flags of two engines mixed: " + "; ".join(f"{e}: {', '.join(fs)}" for e, fs in engines.items()),
                          hint="give the flags of one engine (the one whose numbers you want)")
    engine = next(iter(engines), None)
    layout = a.get("layout") or engine or "contiguous"
    if engine and layout != engine:
        raise KvgateError(f"{', '.join(engines[engine])} {'is' if len(engines[engine]) == 1 else 'are'} {engine}'s, "
                          f"and --layout is {layout}", hint=f"drop --layout, or use --layout {engine}")

    # layout options (None = the engine's default)
    lo: dict[str, Any] = {}
    n_seq = _one("the cache's sequences", [("-np", a.get("lcpp_parallel")), ("--n-seq", a.get("n_seq"))])
    for key, val in (("block_size", a.get("block_size")), ("max_num_batched_tokens", a.get("max_num_batched_tokens")),
                     ("disable_hybrid_kv_cache_manager", a.get("disable_hybrid_kv_cache_manager") or None),
                     ("enable_prefix_caching", a.get("enable_prefix_caching")),
                     ("speculative_config", a.get("speculative_config")), ("version", a.get("vllm_version")),
                     ("ssm_format", a.get("mamba_ssm_dtype")), ("conv_format", a.get("mamba_cache_dtype")),
                     ("pipeline_parallel_size", a.get("vllm_pp")), ("decode_context_parallel_size", a.get("vllm_dcp")),
                     ("n_seq", n_seq), ("n_ubatch", a.get("n_ubatch")), ("n_batch", a.get("n_batch")),
                     ("flash_attn", a.get("flash_attn")),
                     ("swa_full", a.get("swa_full") or None), ("unified", a.get("kv_unified") or None)):
        if val is not None:
            lo[key] = val
    if a.get("sliding_full"):
        key = {VLLM: "disable_hybrid_kv_cache_manager", LLAMACPP: "swa_full"}.get(layout, "sliding_full")
        lo[key] = True

    # max_seq: kvgate's, vLLM's, or llama.cpp's whole context
    ctx = a.get("lcpp_ctx_size")
    from_ctx = None
    if ctx:
        from_ctx = llamacpp_max_seq(ctx, n_seq or 1, bool(lo.get("unified")))
    max_seq = _one("max_seq", [("--max-seq", a.get("max_seq")), ("--max-model-len", a.get("vllm_max_model_len")),
                               (f"-c {ctx} (per sequence)", from_ctx)])
    if ctx == 0 and max_seq is not None:
        raise KvgateError("-c 0 (the model's context) and --max-seq both given", hint="give one")

    slots = _one("slots", [("--slots", a.get("slots")), ("--max-num-seqs", a.get("vllm_max_num_seqs")),
                           ("-np", a.get("lcpp_parallel"))])

    k, v, given_k, given_v = _kv_formats(a, layout)
    tp = _one("tensor-parallel size", [("--tp", a.get("tp")), ("--tensor-parallel-size", a.get("vllm_tp"))])
    given = {"model": a.get("model"), "kv_format": given_k, "kv_format_v": given_v, "tp": tp,
             "layout": a.get("layout") or engine, "max_seq": max_seq, "slots": slots}

    opts = EngineOptions(
        model=a.get("model"), kv_format=k, kv_format_v=v, tp=tp or 1, layout=layout, layout_options=lo,
        max_seq=max_seq, slots=slots, ctx_size=ctx, engine=engine,
        engine_flags=tuple(engines.get(engine, ())) if engine else (),
        explicit=frozenset(name for name, val in given.items() if val is not None) | ({"layout_options"} if lo else set()),
    )
    if check:
        from kvgate.session import build_layout

        build_layout(opts)  # an option the layout does not take: named now, before any work
    return opts


def _same_format(a: str, b: str) -> bool:
    from kvgate.geometry.formats import FormatError, get_format

    try:
        return get_format(a).name == get_format(b).name
    except FormatError:
        return a == b


# -- gate ------------------------------------------------------------------------------

def pct(x: Any) -> str:
    """Fraction(1, 10) → ``10%`` (a flag's default, shown in --help and in labels)."""
    return f"{float(x * 100):g}%"


def add_gate_flags(p: argparse.ArgumentParser) -> None:
    """``--max-seq-measured --slots-measured --candidates --quant-to --margin
    --sensitivity --weights-*`` and the record's ``--out --no-record --force``."""
    p.add_argument("--max-seq-measured", type=positive_int, default=None,
                   help="max_seq L0 when the peak was measured (default: --max-seq)")
    p.add_argument("--slots-measured", type=nonneg_int, default=DEFAULT_SLOTS_MEASURED,
                   help=f"slots n allocated at the measured peak (default {DEFAULT_SLOTS_MEASURED})")
    from kvgate.gate.verdict import CANDIDATES
    from kvgate.gate.weights_policy import POLICIES

    g = p.add_argument_group("gate")
    cand = g.add_argument("--candidates", default=None,
                          help=f"comma list of {', '.join(CANDIDATES)} (default paging,tiering)")
    cand.empty_refused_later = True  # "" and "," are refused as "no candidates to judge" (kvgate.gate.decision)
    g.add_argument("--quant-to", default=None, help="target KV format for kv-quant (default fp8)")
    g.add_argument("--margin", default=pct(DEFAULT_MARGIN), help="safety margin as a share of total (default %(default)s)")
    g.add_argument("--sensitivity", default=pct(DEFAULT_SENSITIVITY), help="flag when N·S / headroom exceeds this (default %(default)s)")
    g.add_argument("--weights-policy", choices=POLICIES, default=None,
                   help="fixed (default): weights don't move with card size; half-free: the write-up engine's "
                        "wcache rule (half of free, cap 24 GiB, floor 256 MiB, VLLM_CUDA_WCACHE_MB)")
    g.add_argument("--weights-max", default=None, help="half-free: weights that can be resident at most")
    g.add_argument("--weights-delta", default=None, help="what-if: resident weights heavier by this much")
    add_record_flags(p)


def add_record_flags(p: argparse.ArgumentParser) -> None:
    """``--out --no-record --force`` of a decision record."""
    out = p.add_argument_group("record")
    out.add_argument("--out", default=None, help="record file (.json) or directory (default ./kvgate-records)")
    out.add_argument("--no-record", action="store_true", help="don't write a record")
    out.add_argument("--force", action="store_true", help="overwrite an existing record")


def gate_options_from_args(args: argparse.Namespace, engine: EngineOptions) -> GateOptions:
    """:class:`GateOptions` from :func:`add_gate_flags`; N is the engine's slots.

    Raises:
        KvgateError: no target slots, bad margin/sensitivity/byte values, a weights
            option that does not apply.
    """
    from kvgate.units import parse_bytes, parse_share

    if engine.slots is None:
        raise KvgateError("no target slots", hint="give --slots N (vLLM --max-num-seqs, llama.cpp -np)")
    a = vars(args)
    kw: dict[str, Any] = {}  # only what was given: every default lives in GateOptions
    if a.get("slots_measured") is not None:
        kw["slots_measured"] = a["slots_measured"]
    if a.get("max_seq_measured") is not None:
        kw["max_seq_measured"] = a["max_seq_measured"]
    for name in ("margin", "sensitivity"):  # ranges checked by GateOptions
        if a.get(name) is not None:
            kw[name] = parse_share(a[name], what=f"--{name}", minimum=-(10**60), maximum=10**60)
    if a.get("candidates") is not None:
        kw["candidates"] = tuple(c.strip() for c in a["candidates"].split(",") if c.strip())
    if a.get("quant_to") is not None:
        kw["quant_to"] = a["quant_to"]
    if a.get("weights_policy") is not None:
        kw["weights_policy"] = a["weights_policy"]
    if a.get("weights_max"):
        kw["weights_max_bytes"] = parse_bytes(a["weights_max"])
    if a.get("weights_delta"):
        kw["weights_delta_bytes"] = parse_bytes(a["weights_delta"], allow_zero=True)
    return GateOptions(slots_target=engine.slots, out=a.get("out"), no_record=bool(a.get("no_record")),
                       force=bool(a.get("force")), **kw)


# -- replay ----------------------------------------------------------------------------

def add_replay_flags(p: argparse.ArgumentParser, *, trace_required: bool = False, title: str = "trace replay") -> None:
    """``--trace --page-size --decode-rate --speed --rate --seed``."""
    t = p.add_argument_group(title)
    t.add_argument("--trace", required=trace_required, default=None,
                   help="request trace (CSV/JSONL)" + ("" if trace_required else
                        ": paging's reclaim measured by replaying it instead of the bound N·S"))
    t.add_argument("--page-size", type=positive_int, default=None,
                   help=f"positions per paged block of the replay (default: vLLM --block-size if given, "
                        f"else {DEFAULT_PAGE_SIZE})")
    t.add_argument("--decode-rate", type=positive_float, default=None,
                   help=f"tokens/s each live sequence generates (default {DEFAULT_DECODE_RATE:g})")
    t.add_argument("--speed", type=positive_float, default=None, help="arrival-time speed-up (default 1)")
    t.add_argument("--rate", type=positive_float, default=None,
                   help="Poisson arrivals per second instead of the trace's timestamps")
    t.add_argument("--seed", type=count(0, 2**64 - 1), default=None, help="seed of --rate arrivals (default 0)")
    t.add_argument("--time-unit", choices=("s", "ms", "us", "ns"), default=None,
                   help="unit of the trace's timestamps (default: the format's, or detected from the data; "
                        "ambiguous data is refused)")


def replay_options_from_args(args: argparse.Namespace, engine: EngineOptions | None = None) -> ReplayOptions | None:
    """:class:`ReplayOptions`, or ``None`` when no ``--trace`` was given.

    Raises:
        KvgateError: replay flags without ``--trace``.
    """
    a = vars(args)
    if not a.get("trace"):
        extra = [f for f in ("page_size", "decode_rate", "speed", "rate", "seed", "time_unit") if a.get(f) is not None]
        if extra:
            raise KvgateError(f"--{extra[0].replace('_', '-')} applies to --trace only")
        return None
    page = a.get("page_size")
    if page is None and engine is not None:
        page = engine.layout_options.get("block_size")
    return ReplayOptions(
        trace=str(a["trace"]),
        page_size=page or DEFAULT_PAGE_SIZE,
        decode_rate=a.get("decode_rate") or DEFAULT_DECODE_RATE,
        speed=a.get("speed") or 1.0,
        rate=a.get("rate"),
        seed=a.get("seed") or 0,
        time_unit=a.get("time_unit"),
    )


def decision_options_from_args(args: argparse.Namespace) -> tuple[EngineOptions, GateOptions, ReplayOptions | None]:
    """The three typed option sets of a decision (``gate``, ``run``), built once.

    Raises:
        KvgateError: see :func:`engine_options_from_args`, :func:`gate_options_from_args`,
            :func:`replay_options_from_args`; no target max_seq.
    """
    engine = engine_options_from_args(args)
    if engine.max_seq is None and engine.ctx_size is None:
        raise KvgateError("no target max_seq", hint="give --max-seq L (vLLM --max-model-len, llama.cpp -c)")
    return engine, gate_options_from_args(args, engine), replay_options_from_args(args, engine)


# -- measure ---------------------------------------------------------------------------

def add_measure_flags(p: argparse.ArgumentParser, *, with_out: bool = True) -> None:
    """``--gpu --domain --interval --settle --kill-leftovers [--out --plot --force]`` and
    ``-- CMD ARGS...``."""
    g = p.add_argument_group("measurement")
    g.add_argument("--gpu", default="all",
                   help="GPU index, list (0,1) or all (default all: every GPU is shown; the one with the least "
                        "headroom among those the command used gates)")
    g.add_argument("--domain", choices=("gpu", "host"), default="gpu",
                   help="gpu: NVML total − free; host: system RAM and the command's RSS (default gpu)")
    g.add_argument("--interval", default=None,
                   help="sampling interval, e.g. 1ms (default: 1ms gpu, 10ms host); 500ms = nvidia-smi -lms 500")
    g.add_argument("--settle", default=DEFAULT_SETTLE, help=f"idle sampling before the command starts (default {DEFAULT_SETTLE})")
    g.add_argument("--kill-leftovers", action="store_true",
                   help="stop processes the command leaves running after it exits (default: report them)")
    if with_out:
        g.add_argument("--out", default=None, help="measurement JSON (default kvgate-records/kvgate-measure-<UTC time>.<µs>-p<pid>.json)")
        g.add_argument("--plot", default=None, help="also write a PNG chart here")
        g.add_argument("--force", action="store_true", help="overwrite existing --out / --plot files")
    p.add_argument("cmd", nargs=argparse.REMAINDER, metavar="-- CMD ARGS...", help="the workload to run")


def measure_options_from_args(args: argparse.Namespace) -> MeasureOptions:
    """:class:`MeasureOptions` from :func:`add_measure_flags`.

    Raises:
        KvgateError: no command after ``--``, an unparsable or non-positive interval,
            a negative settle.
    """
    from kvgate.units import parse_duration_s

    a = vars(args)
    cmd = list(a.get("cmd") or [])
    if cmd and cmd[0] == "--":
        cmd = cmd[1:]
    if not cmd:
        raise KvgateError("no command given", hint="put the workload after --, e.g. kvgate measure -- python serve.py")
    interval = None
    if a.get("interval") is not None:
        interval = parse_duration_s(a["interval"])
        if interval <= 0:
            raise KvgateError(f"--interval must be positive, got {a['interval']}")
    settle = parse_duration_s(a["settle"]) if a.get("settle") is not None else None
    if settle is not None and settle < 0:
        raise KvgateError(f"--settle must not be negative, got {a['settle']}")
    return MeasureOptions(command=tuple(cmd), gpus=str(a.get("gpu") or "all"), domain=a.get("domain") or "gpu",
                          interval_s=interval, settle_s=settle, kill_leftovers=bool(a.get("kill_leftovers")),
                          out=a.get("out"), plot=a.get("plot"), force=bool(a.get("force")))


def add_sources_flag(p: argparse.ArgumentParser) -> None:
    """``-v`` / ``--sources``: where each term of a budget table comes from, beneath its row
    (the default text leaves them out to fit 100 columns; ``--json`` always has them)."""
    p.add_argument("-v", "--sources", action="store_true", help="each term's source, beneath its row")
