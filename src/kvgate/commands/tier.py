"""``kvgate tier``: does a host KV tier (prefix cache in host memory) pay for this traffic?"""

from __future__ import annotations

import argparse
from fractions import Fraction
from typing import Any

from kvgate.commands._args import add_engine_flags, engine_options_from_args
from kvgate.commands._flag_table import add_engine_table_flags
from kvgate.commands._types import count, count_list, nonneg_int, positive_int, real, share
from kvgate.errors import KvgateError
from kvgate.output import emit, table
from kvgate.units import MAX_BYTES, fmt_bytes, fmt_human, parse_bytes

NAME = "tier"
HELP = "does a host KV tier pay? prefix-cache hits for every capacity from a hashed trace (Mooncake, Qwen-Bailian)"
DESCRIPTION = """\
Replay a hashed request trace (one prompt-block hash list per request: Mooncake's
hash_ids of 512-token blocks, Qwen-Bailian's of 16) through a prefix cache and say what a
host tier adds to the device pool: the hit share for every cache capacity (one pass, stack
distances), the hits of the device pool alone and with the host tier, and the gate:
prefill saved by the host tier's hits against the bytes they load.

  kvgate tier --trace mooncake_conversation_trace.jsonl --model llama-3.1-8b \\
      --device-capacity 64GiB --host-capacity 1TiB \\
      --prefill-tokens-per-s 9500 --prefill-source "vllm bench, H200" \\
      --h2d-bandwidth 50GB --h2d-source "nvbandwidth host_to_device, H200"
  kvgate tier --trace t.jsonl --model m.gguf --cache-model llama.cpp -np 4 -c 65536 --cache-ram 8192
  kvgate tier --trace t.jsonl --model llama-3.1-8b --at-capacity-blocks 256,1024,16384 --json
  kvgate tier --trace t.jsonl --model llama-3.1-8b --device-capacity 64GiB --host-capacity 1TiB \\
      --plot curve.png

Cache models: lru (the plain reference: requests in file order; a request's hit is the
longest leading run of its hash ids in the cache, min(run x block, input_length) tokens;
then each id is touched in order, the least recent evicted while over capacity; a host
tier below the device pool is the same LRU with both capacities), vllm (block pool,
reverse-order freeing, native CPU offload: --kv-offloading-size GiB), sglang (radix tree,
HiCache host pool: --hicache-ratio or --hicache-size GB per rank), llama.cpp
(llama-server's slots and its --cache-ram prompt cache per server, at the pinned commit).
Unknown speeds are "not available" and the verdict is pays-if with its condition.
--plot writes a PNG of the curve; a run over 2 s shows a progress bar on a terminal.
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_engine_flags(p, model="required")
    t = p.add_argument_group("trace")
    t.add_argument("--trace", required=True, help="hashed trace: JSONL with input_length and hash_ids per line")
    t.add_argument("--trace-block-tokens", type=count(1, 2**32), default=None,
                   help="tokens per hash block (default: the format's, Mooncake 512, Qwen-Bailian 16, or the data's)")
    t.add_argument("--time-unit", default=None, help="unit of a numeric time column: s, ms, us, ns")
    t.add_argument("--limit", type=positive_int, default=None, help="only the first N requests")
    t.add_argument("--sample-rate", type=real(0.0, 1.0, open_min=True), default=1.0,
                   help="SHARDS spatial sampling rate for the curve (default 1: exact)")
    c = p.add_argument_group("cache")
    c.add_argument("--cache-model", default="lru", choices=("lru", "vllm", "sglang", "llama.cpp"),
                   help="cache model (default lru)")
    c.add_argument("--device-capacity", default=None, help="device prefix-cache pool in bytes (e.g. 64GiB)")
    c.add_argument("--device-blocks", type=nonneg_int, default=None, help="device pool in trace blocks")
    c.add_argument("--host-capacity", default=None, help="host tier in bytes (e.g. 1TiB)")
    add_engine_table_flags(c, "tier")
    c.add_argument("--at-capacity-blocks", default=None, help="report the curve at exactly these, e.g. 256,1024")
    o = p.add_argument_group("output")
    o.add_argument("--plot", default=None, metavar="PNG",
                   help="write a PNG: hit share against capacity, the device pool and host tier marked")
    o.add_argument("--force", action="store_true", help="overwrite an existing --plot file")
    g = p.add_argument_group("gate (measured speeds, with their source)")
    g.add_argument("--prefill-tokens-per-s", type=real(0.0, 1e12, open_min=True), default=None, help="measured prefill speed")
    g.add_argument("--prefill-source", default=None, help="where the prefill speed was measured")
    g.add_argument("--h2d-bandwidth", default=None, help="measured host->device bytes per second, e.g. 50GB")
    g.add_argument("--h2d-source", default=None, help="where the bandwidth was measured")
    g.add_argument("--min-gain", type=share(0, 1, open_max=True), default=Fraction(1, 100),
                   help="least host-tier gain worth having, share of prompt tokens (default 1%%)")


def _capacities(text: str | None) -> list[int] | None:
    """``--at-capacity-blocks 256,1024`` (:func:`kvgate.commands._types.count_list`: ``1,,2``
    and ``1,000`` refused, never read as ``[1, 2]`` or ``[1, 0]``)."""
    if text is None:
        return None
    return count_list(text, "--at-capacity-blocks", minimum=0, maximum=2**40, example="256,1024,16384")


def _pct(x: float | None) -> str:
    return "not available" if x is None else f"{100 * x:.2f}%"



def _flag_bytes(flag: str, text: str, *, allow_zero: bool = False) -> int:
    """``parse_bytes`` with the flag named in its error (exit 2)."""
    try:
        return parse_bytes(text, allow_zero=allow_zero)
    except KvgateError as exc:
        raise KvgateError(f"{flag}: {exc.message}", hint=exc.hint) from None


def run(args: argparse.Namespace) -> int:
    from kvgate.tier.progress import run_progress

    with run_progress(quiet=args.json):
        return _run(args)


def _run(args: argparse.Namespace) -> int:
    from kvgate.model import load_model
    from kvgate.session import engine_geometry
    from kvgate.tier import progress
    from kvgate.tier.analysis import LlamaCppSettings, analyze
    from kvgate.tier.gate import Speed
    from kvgate.tier.run import host_share, read_trace

    engine = engine_options_from_args(args)
    for src, val, flag in ((args.prefill_source, args.prefill_tokens_per_s, "--prefill-tokens-per-s"),
                           (args.h2d_source, args.h2d_bandwidth, "--h2d-bandwidth")):
        if val is not None and not src:
            raise KvgateError(f"{flag} given without its source",
                              hint=f"say where it was measured: {flag.replace('tokens-per-s', 'source').replace('bandwidth', 'source')} TEXT")  # noqa: E501
    if args.sample_rate > 1:
        raise KvgateError(f"--sample-rate must be in (0, 1], got {args.sample_rate}")
    if args.device_capacity is not None and args.device_blocks is not None:
        raise KvgateError("--device-capacity and --device-blocks both given", hint="give one")
    at = _capacities(args.at_capacity_blocks)
    if args.plot:
        from kvgate.atomicio import check_writable

        check_writable(args.plot, force=args.force)  # fail before the work
    progress.stage(f"loading {args.model}")
    model = load_model(args.model)
    geo = engine_geometry(engine, model)
    if args.cache_model != "lru":  # tokens of the engine's own pool (SGLang's: DSA rows and indexer keys)
        from kvgate.engines.registry import get_engine

        geo = get_engine(args.cache_model).cache_geometry(geo)
    bpt = geo.bytes_per_token()
    trace, curve = read_trace(args.trace, block_tokens=args.trace_block_tokens, time_unit=args.time_unit,
                              limit=args.limit, sample_rate=args.sample_rate, keep_ids=args.cache_model != "lru")
    block_bytes = trace.block_tokens * bpt
    device_blocks = args.device_blocks
    if args.device_capacity is not None:
        device_blocks = _flag_bytes('--device-capacity', args.device_capacity, allow_zero=True) // block_bytes
    device_bytes = _flag_bytes('--device-capacity', args.device_capacity, allow_zero=True) if args.device_capacity is not None else None
    host: int | None = None
    given = [f for f, v in (("--host-capacity", args.host_capacity), ("--cache-ram", args.cache_ram),
                            ("--kv-offloading-size", args.kv_offloading_size),
                            ("--hicache-ratio", args.hicache_ratio), ("--hicache-size", args.hicache_size))
             if v is not None]
    if given == ["--hicache-ratio", "--hicache-size"]:
        given = ["--hicache-size"]  # SGLang: --hicache-size overrides --hicache-ratio
    if len(given) > 1:
        raise KvgateError(f"the host tier given twice: {', '.join(given)}", hint="give one")
    for flag, model_name in (("--kv-offloading-size", "vllm"), ("--hicache-ratio", "sglang"),
                             ("--hicache-size", "sglang")):
        if flag in given and args.cache_model != model_name:
            raise KvgateError(f"{flag} is {model_name}'s", hint=f"use --cache-model {model_name}, or --host-capacity")
    if args.host_capacity is not None:
        host = _flag_bytes('--host-capacity', args.host_capacity, allow_zero=True)
    elif args.kv_offloading_size is not None:
        host = round(args.kv_offloading_size * 2**30)  # vLLM's: summed across the TP ranks (kvgate/tier/run.py)
    elif args.hicache_ratio is not None or args.hicache_size is not None:
        from kvgate.engines.registry import get_engine

        host_pool_tokens = get_engine(args.cache_model).host_pool_tokens  # SGLang's HiCache host pool
        if device_blocks is None:
            raise KvgateError(f"{given[0]} needs the device pool", hint="give --device-capacity BYTES")
        dev_tokens = device_bytes // bpt if device_bytes is not None else device_blocks * trace.block_tokens
        host = bpt * host_pool_tokens(dev_tokens, bpt, ratio=args.hicache_ratio, size_gb=args.hicache_size or 0)
        if host > MAX_BYTES:
            raise KvgateError(f"--hicache-ratio {args.hicache_ratio:g}: a host pool of {host:,} bytes is more than "
                              "2**64 − 1 (16 EiB)", hint="check the ratio and the device pool")
    elif args.cache_ram is not None:
        if args.cache_model != "llama.cpp":
            raise KvgateError("--cache-ram is llama.cpp's", hint="use --cache-model llama.cpp, or --host-capacity")
        host = -1 if args.cache_ram < 0 else args.cache_ram * 2**20
    lcpp = None
    if args.cache_model == "llama.cpp":
        slots = engine.slots or 1
        ctx = engine.ctx_size or (engine.max_seq_for(model) or 0) * slots
        lcpp = LlamaCppSettings(n_slots=slots, n_ctx=ctx, n_layer=len(model.layers),
                                kv_unified=bool(engine.layout_options.get("unified")),
                                slot_prompt_similarity=args.slot_prompt_similarity)
    elif args.cache_model != "lru" and device_blocks is None:
        raise KvgateError(f"the {args.cache_model} model needs the device pool",
                          hint="give --device-capacity BYTES (the KV pool from `kvgate fit` or the engine's log) "
                               "or --device-blocks N")
    elif host is not None and device_blocks is None:
        raise KvgateError("a host tier needs the device pool it backs",
                          hint="give --device-capacity BYTES (the KV pool from `kvgate fit` or the engine's log) "
                               "or --device-blocks N")
    bw = _flag_bytes('--h2d-bandwidth', args.h2d_bandwidth) if args.h2d_bandwidth is not None else None
    host_node = host
    # a node's or the TP ranks' total is shared by the ranks; SGLang's pools are per rank already
    ranks = max(engine.tp, 1) if args.host_capacity is not None or args.kv_offloading_size is not None else 1
    if host is not None and host > 0 and ranks > 1:
        host = host // ranks  # the share of one GPU: the replay is of one rank's pool (kvgate/tier/run.py)
    if curve is None and args.plot:  # the plot draws the curve itself: build it once, here
        from kvgate.tier.stack import lru_curve

        progress.stage("LRU curve (stack distances)")
        curve = lru_curve(trace, sample_rate=args.sample_rate)
    rep = analyze(trace, bytes_per_token=bpt, cache_model=args.cache_model, device_blocks=device_blocks,
                  device_bytes=device_bytes, engine_block_size=args.block_size or 16, host_bytes=host, llamacpp=lcpp, at_capacity_blocks=at,
                  prefill=Speed(args.prefill_tokens_per_s, args.prefill_source),
                  bandwidth=Speed(None if bw is None else float(bw), args.h2d_source),
                  min_gain=args.min_gain, sample_rate=args.sample_rate, curve=curve)
    rep["model"] = model.name
    rep["kv_format"] = geo.fmt_k.name
    if "host" in rep and host_node is not None and args.cache_model != "llama.cpp":
        rep["host"].update(host_share(host_node, ranks, "--kv-offloading-size" if args.kv_offloading_size is not None
                                      else given[0] if given and given[0].startswith("--hicache") else "--host-capacity",
                                      size_gb=args.hicache_size))
    elif "host" in rep and args.cache_model == "llama.cpp":
        rep["host"]["capacity_basis"] = ("llama-server's --cache-ram: MiB (2^20 B) per server process, shared by its "
                                         "slots (common/arg.cpp: 'set the maximum cache size in MiB')")
    rep["plot"] = None
    if args.plot:
        from kvgate.tier.plot import write_tier_plot

        assert curve is not None
        progress.stage("drawing the plot")
        rep["plot"] = str(write_tier_plot(rep, curve, args.plot, force=args.force))
    emit(args.json, rep, _text(rep))
    return 0


def _text(r: dict[str, Any]) -> str:
    lines = [f"trace   {r['trace']} ({r['format']}): {r['requests']:,} requests, {r['prompt_tokens']:,} prompt tokens, "
             f"blocks of {r['block_tokens']} tokens ({r['block_reason']})",
             f"model   {r['model']}, {r['kv_format']}: {fmt_bytes(r['bytes_per_token'])} per token, "
             f"{fmt_human(r['block_bytes'])} per trace block",
             f"reuse   an unbounded cache serves {r['unbounded_hit_tokens']:,} tokens ({_pct(r['unbounded_hit_share'])}); "
             f"saturates at {r['saturation_blocks']:,} blocks = {fmt_human(r['saturation_bytes'])}"]
    if r["attribution"]:
        lines.append(f"source  {r['attribution']}")
    rows = [[f"{p['capacity_blocks']:,}", fmt_human(p["capacity_bytes"]), f"{p['hit_tokens']:,}",
             _pct(p["hit_tokens"] / r["prompt_tokens"] if r["prompt_tokens"] else None)] for p in _few(r["curve"])]
    lines += ["", f"LRU hit curve ({r['curve_points']}{'' if r['curve_exact'] else ', SHARDS sample'}):",
              table(rows, header=["blocks", "capacity", "hit tokens", "share"], align="rrrr")]
    if "device" in r:
        d = r["device"]
        where = (f"{d['capacity_blocks']:,} blocks = {fmt_human(d['capacity_bytes'])}" if "capacity_blocks" in d
                 else f"{d['slots']} slot(s), n_ctx {d['n_ctx']:,}")
        lines += ["", f"device  ({r['cache_model']}) {where}: {d['hit_tokens']:,} hit tokens ({_pct(d['hit_share'])})"]
        if r["cache_model"] != "lru" and d.get("basis"):
            lines.append(f"        replayed through {d['basis']}" + (
                f"; {d['too_long_requests']:,} requests need more blocks than the pool (not admitted)"
                if d.get("too_long_requests") else ""))
    if "host" in r:
        h = r["host"]
        cap = "no limit" if h["capacity_bytes"] is None else fmt_human(h["capacity_bytes"])
        lines.append(f"+ host  {cap}: {h['hit_tokens']:,} ({_pct(h['hit_share'])}); the host tier adds "
                     f"{h['added_hit_tokens']:,} ({_pct(h['added_hit_share'])})")
        if h.get("capacity_basis"):
            lines.append(f"        {h['capacity_basis']}")
        pf, bw = r["prefill_tokens_per_s"], r["h2d_bandwidth_bytes_per_s"]
        lines += [("prefill " + (f"{pf['value']:,.6g} tokens/s ({pf['source']})" if pf["value"] is not None
                                 else "speed not available") + "; host->device "
                   + (f"{bw['value'] / 1e9:,.6g} GB/s ({bw['source']})" if bw["value"] is not None
                      else "bandwidth not available")),
                  "", f"verdict {r['verdict']}: {r['reason']}"]
        if r.get("condition"):
            lines.append(f"        pays if {r['condition']}")
        b = r["boundaries"]
        hb = b["host_capacity_bytes_from_which_it_pays"]
        w = b["bandwidth_below_which_a_hit_is_slower_bytes_per_s"]
        lines += ["boundaries (each with the others held):",
                  f"  host tier from            {'none' if hb is None else fmt_human(hb)} gains >= "
                  f"{100 * r['min_gain_share']:.3g}% of prompt tokens"
                  + ("" if r.get("cache_model", "lru") == "lru" else " on the plain LRU curve"),
                  f"  host->device bandwidth    {'not available' if w is None else f'{w / 1e9:.4g} GB/s'}: below it a "
                  "hit is slower than recomputing",
                  f"  trace reuse share         {_pct(b['reuse_share_below_which_it_never_pays'])}: below it no host "
                  "tier pays"]
        if b["device_pool_bytes_from_which_the_tier_adds_under_min_gain"] is not None:
            lines.append(f"  device pool from          "
                         f"{fmt_human(b['device_pool_bytes_from_which_the_tier_adds_under_min_gain'])}: the tier adds "
                         "less than the least gain")
    for w in r["warnings"]:
        lines.append(f"warning: {w}")
    if r.get("plot"):
        lines.append(f"plot    {r['plot']}")
    return "\n".join(lines)


def _few(points: list[dict[str, int]], n: int = 16) -> list[dict[str, int]]:
    if len(points) <= n:
        return points
    step = (len(points) - 1) / (n - 1)
    return [points[round(i * step)] for i in range(n)]
