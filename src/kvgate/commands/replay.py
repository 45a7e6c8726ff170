"""``kvgate replay``: measured paging benefit from a real request trace."""

from __future__ import annotations

import argparse
from typing import TYPE_CHECKING, Any

from kvgate.commands._args import add_engine_flags, add_replay_flags, engine_options_from_args, replay_options_from_args
from kvgate.commands._types import positive_int
from kvgate.errors import KvgateError
from kvgate.options import EngineOptions
from kvgate.output import emit, table
from kvgate.units import fmt_bytes, fmt_human, fmt_pct, parse_bytes

if TYPE_CHECKING:  # pragma: no cover
    from kvgate.replay.simulate import ReplayResult

NAME = "replay"
HELP = "replay a request trace through contiguous slots and paged blocks: the paging reclaim, measured"
DESCRIPTION = """\
Replay a request trace (arrival time, prompt tokens, output tokens) through two KV
allocators under one memory budget and measure how much of the contiguous mirror is
really unwritten when memory peaks — the write-up bounds it by the whole mirror, N·S.

  kvgate replay --model qwen3-30b-a3b --max-seq 8192 --kv-format int8-f32scale \\
      --trace AzureLLMInferenceTrace_conv.csv --slots 8 --plot replay.png
  kvgate replay --model ./config.json --max-seq 32768 --trace reqs.jsonl \\
      --total 80GiB --peak 61GiB --decode-rate 30 --speed 2

contiguous: each admitted sequence reserves a slot S(L) until it finishes; at most N
slots (--slots, default budget // S); a request that finds no free slot waits, one
longer than L (prompt + output) is rejected. paged: blocks of --page-size positions,
taken as positions are written, freed at finish; admission reserves the whole
request's blocks against the budget (no preemption).
Service model: every live sequence decodes --decode-rate tokens/s on a common step
clock, prefill is instant, admission is FIFO (see `python -c "import kvgate.replay.simulate;
help(kvgate.replay.simulate)"`).

The trace is CSV or JSONL with columns such as timestamp/arrival_time,
prompt_tokens/input_tokens/ContextTokens, output_tokens/completion_tokens/
GeneratedTokens; timestamps in seconds or date-times. Without timestamps, --rate R draws
Poisson arrivals at R requests/s.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model="optional", max_seq_help="max_seq L: positions per contiguous slot",
                     slots_help="contiguous slot cap N (default budget // S; vLLM --max-num-seqs; llama.cpp -np)")
    m = p.add_argument_group("geometry without a model")
    m.add_argument("--slot-bytes", default=None, help="S(L) in bytes instead of --model (e.g. 396MiB)")
    m.add_argument("--block-bytes", default=None, help="bytes of one page instead of --model")
    add_replay_flags(p, trace_required=True)
    b = p.add_argument_group("budget (one of; default --slots × S)")
    b.add_argument("--budget", default=None, help="memory both allocators may use, e.g. 12982MiB")
    b.add_argument("--total", default=None, help="with --peak: budget = total − peak (the measured headroom)")
    b.add_argument("--peak", default=None, help="peak used of the measurement, e.g. 19625MiB")
    b.add_argument("--measurement", default=None, help="a kvgate measurement JSON: budget = its headroom")
    b.add_argument("--domain", default=None, help="which domain of --measurement (e.g. gpu:1)")
    o = p.add_argument_group("output")
    o.add_argument("--plot", default=None, help="write a PNG: memory and concurrency over time")
    o.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    o.add_argument("--points", type=positive_int, default=400, help="timeline points in --json (default 400)")


def budget_from_args(args: argparse.Namespace) -> tuple[int | None, str | None]:
    """(budget bytes, where it came from) or (None, None) when none was given.

    Raises:
        KvgateError: conflicting sources, --total without --peak, peak ≥ total.
    """
    given = [n for n, v in (("--budget", args.budget), ("--total/--peak", args.total or args.peak),
                            ("--measurement", args.measurement)) if v]
    if len(given) > 1:
        raise KvgateError(f"give one budget source, not {' and '.join(given)}")
    if args.budget:
        return parse_bytes(args.budget), "--budget"
    if args.total or args.peak:
        if not (args.total and args.peak):
            raise KvgateError("--total and --peak go together (budget = total − peak)")
        total, peak = parse_bytes(args.total), parse_bytes(args.peak, allow_zero=True)
        if peak >= total:
            raise KvgateError(f"peak ({fmt_bytes(peak)}) is not below total ({fmt_bytes(total)}): no headroom")
        return total - peak, f"headroom = total {fmt_human(total)} − peak {fmt_human(peak)}"
    if args.measurement:
        from kvgate.atomicio import read_json
        from kvgate.measure.select import select_measurement

        m = select_measurement(read_json(args.measurement, what="measurement"), domain=args.domain).measurement
        if m.headroom_bytes <= 0:
            raise KvgateError(f"measurement {args.measurement} has no headroom (peak ≥ total)")
        return m.headroom_bytes, f"headroom of {args.measurement} ({m.domain})"
    return None, None


def _positive_bytes(flag: str, text: str) -> int:
    """``text`` as a positive whole number of bytes, or a :class:`KvgateError` naming ``flag``.

    A value that parses to 0 bytes (``0``, ``0MiB``, ``0.4``) is refused: a slot or block of
    no bytes is not a geometry.
    """
    try:
        value = parse_bytes(text)
    except KvgateError as exc:
        raise KvgateError(f"{flag} {text!r}: {exc.message}",
                          hint=exc.hint or f"{flag} must be a positive byte quantity, e.g. 396MiB") from exc
    if value <= 0:  # parse_bytes refuses 0 already; kept so the rule does not depend on it
        raise KvgateError(f"{flag} must be positive, got {text!r}", hint=f"e.g. {flag} 396MiB")
    return value


def geometry_from_args(args: argparse.Namespace, engine: EngineOptions, page_size: int) -> tuple[dict[str, Any], int]:
    """(S(L) and page bytes, max_seq L) from --model (via :mod:`kvgate.replay.reclaim`) or given directly.

    Raises:
        KvgateError: neither or both of --model and --slot-bytes/--block-bytes, or a
            --slot-bytes/--block-bytes that is not a positive byte quantity (names the flag).
    """
    explicit = args.slot_bytes is not None or args.block_bytes is not None
    if explicit and engine.model:
        raise KvgateError("give --model or --slot-bytes/--block-bytes, not both")
    if explicit:
        if args.slot_bytes is None or args.block_bytes is None:
            raise KvgateError("--slot-bytes and --block-bytes go together")
        slot = _positive_bytes("--slot-bytes", args.slot_bytes)
        block = _positive_bytes("--block-bytes", args.block_bytes)
        return {"slot_bytes": slot, "block_bytes": block, "geometry": {"model": None, "explicit": True}}, _max_seq(engine)
    if not engine.model:
        raise KvgateError("no geometry: give --model M", hint="or --slot-bytes S --block-bytes B")
    from kvgate.model import load_model
    from kvgate.replay.reclaim import replay_geometry, sliding_full_of

    model = load_model(engine.model)
    k, v = engine.formats_for(model)
    max_seq = _max_seq(engine, model)
    return replay_geometry(model, max_seq=max_seq, kv_format=k, kv_format_v=v, tp=engine.tp,
                           block_size=page_size, sliding_full=sliding_full_of(engine)), max_seq


def _max_seq(engine: EngineOptions, model: Any = None) -> int:
    L = engine.max_seq_for(model) if model is not None or engine.ctx_size != 0 else None
    if L is None:
        raise KvgateError("no max_seq", hint="give --max-seq L (vLLM --max-model-len, llama.cpp -c)")
    return L


def _s(v: float | None) -> str:
    return "not available" if v is None else f"{v:,.2f} s"


def render_text(res: ReplayResult, trace_info: dict, budget_note: str | None, plot_path: str | None) -> str:
    """The human-readable report."""
    i, c, p, s = res.inputs, res.contiguous, res.paged, res.summary
    budget = i["budget_bytes"]
    lines = [
        f"Trace: {i['trace']}",
        f"  {i['requests']:,} requests, arrivals from {i['arrivals']}, over {trace_info['duration_s']:,.1f} s; "
        f"mean written positions {trace_info['mean_written_positions']:,.1f}, max {trace_info['max_written_positions']:,}",
        f"Geometry: S(L) = {fmt_bytes(res.slot_bytes)} ({fmt_human(res.slot_bytes)}) at max_seq {i['max_seq']:,}; "
        f"block of {res.block_size} positions = {fmt_bytes(res.block_bytes)}"
        + (f"; fixed per sequence {fmt_bytes(res.fixed_bytes)}" if res.fixed_bytes else ""),
        f"Budget: {fmt_bytes(budget)} ({fmt_human(budget)})" + (f", {budget_note}" if budget_note else "")
        + f"; contiguous slots N = {i['slots']}",
        f"Service model: {i['decode_rate_tokens_per_s']:g} tokens/s per sequence, speed {i['speed']:g}, "
        "prefill at admission, FIFO admission",
        "",
    ]
    rows = [
        ("peak reserved", fmt_human(c.peak_reserved_bytes), fmt_human(p.peak_reserved_bytes)),
        ("written at the peak", fmt_human(c.written_at_peak_bytes), fmt_human(p.written_at_peak_bytes)),
        ("reclaim at the peak (reserved − written)", fmt_human(c.reclaim_at_peak_bytes), fmt_human(p.reclaim_at_peak_bytes)),
        ("  share of peak reserved", fmt_pct(c.reclaim_at_peak_bytes, c.peak_reserved_bytes),
         fmt_pct(p.reclaim_at_peak_bytes, p.peak_reserved_bytes) + " (internal fragmentation)"),
        ("peak written", fmt_human(c.peak_written_bytes), fmt_human(p.peak_written_bytes)),
        ("mean reserved / written (over time)", f"{fmt_human(c.mean_reserved_bytes)} / {fmt_human(c.mean_written_bytes)}",
         f"{fmt_human(p.mean_reserved_bytes)} / {fmt_human(p.mean_written_bytes)}"),
        ("sequences live at most", f"{c.max_concurrency:,}", f"{p.max_concurrency:,}"),
        ("queueing delay p50 / p99", f"{_s(c.queue_delay_p50_s)} / {_s(c.queue_delay_p99_s)}",
         f"{_s(p.queue_delay_p50_s)} / {_s(p.queue_delay_p99_s)}"),
        ("admitted / rejected", f"{c.admitted:,} / {c.rejected:,}", f"{p.admitted:,} / {p.rejected:,}"),
        ("last request done", _s(c.end_time_s), _s(p.end_time_s)),
    ]
    lines.append(table(rows, header=("", "contiguous", "paged"), align="lrr"))
    summary_rows = [
        (f"write-up's bound N·S ({i['slots']} × S)", fmt_bytes(s["bound_bytes"]), fmt_human(s["bound_bytes"])),
        ("measured reclaim at the peak", *((fmt_bytes(s["measured_reclaim_bytes"]), fmt_human(s["measured_reclaim_bytes"]))
                                           if s["measured_reclaim_bytes"] is not None else ("not available", ""))),
        ("ratio measured / bound", fmt_pct(s["measured_reclaim_bytes"], s["bound_bytes"])
         if s["measured_reclaim_bytes"] is not None else "not available", ""),
    ]
    lines += [
        "",
        "Summary (paging's reclaim):",
        table(summary_rows, align="lrr"),
        f"(contiguous peak {fmt_human(s['contiguous_peak_reserved_bytes'])} − the same sequences in blocks at "
        f"their peak {fmt_human(s['paged_footprint_peak_bytes'])}; unwritten at the peak: "
        f"{fmt_human(s['unwritten_at_peak_bytes']) if s['unwritten_at_peak_bytes'] is not None else 'not available'})",
    ]
    if res.warnings:
        lines.append("")
        lines += [f"WARNING: {w}" for w in res.warnings]
    if plot_path:
        lines.append(f"\nPlot: {plot_path}")
    if res.attribution:
        lines.append(f"\nData: {res.attribution}.")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from kvgate.replay.simulate import replay, series

    engine = engine_options_from_args(args)
    opts = replay_options_from_args(args, engine)
    if opts is None:
        raise KvgateError("no --trace given", hint="kvgate replay --trace FILE ...")
    if engine.slots is not None and engine.slots < 1:
        raise KvgateError(f"--slots must be positive, got {engine.slots}")
    geo, max_seq = geometry_from_args(args, engine, opts.page_size)  # first: bad --slot-bytes named before budget errors
    budget, budget_note = budget_from_args(args)
    if budget is None and engine.slots is None:
        raise KvgateError("no memory budget", hint="give --budget, --total/--peak, --measurement, or --slots N")
    if budget is None:
        budget_note = f"--slots {engine.slots} × S"
    if args.plot:
        from kvgate.atomicio import check_writable

        check_writable(args.plot, force=args.force)  # fail before the work
    from kvgate.session import load_replay_trace

    trace = load_replay_trace(opts)
    res = replay(
        trace,
        slot_bytes=geo["slot_bytes"],
        block_bytes=geo["block_bytes"],
        max_seq=max_seq,
        budget_bytes=budget,
        slots=engine.slots,
        block_size=opts.page_size,
        speed=opts.speed,
        decode_rate=opts.decode_rate,
    )
    plot_path = None
    if args.plot:
        from kvgate.replay.plot import write_replay_plot

        plot_path = str(write_replay_plot(res, args.plot, force=args.force))
    info = trace.describe()
    payload = res.to_dict()
    payload["geometry"] = {k: v for k, v in geo.items()}
    payload["trace"] = info
    payload["budget_source"] = budget_note
    if args.json:  # the timeline is only printed in the JSON: the text answer does not build it
        payload["timeline"] = {name: series(res, name, max_points=args.points) for name in ("contiguous", "paged")}
    payload["plot"] = plot_path
    emit(args.json, payload, render_text(res, info, budget_note, plot_path))
    return 0
