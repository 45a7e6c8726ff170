"""``kvgate load``: replay a trace against a local OpenAI-compatible server while
sampling its KV use, queue and preemptions."""

from __future__ import annotations

import argparse

from kvgate.atomicio import check_writable, write_json_atomic
from kvgate.commands._types import count, real
from kvgate.engines.loadgen import plot_load, run_load
from kvgate.output import emit

NAME = "load"
HELP = "replay a trace against a local vLLM / SGLang / llama-server and sample its KV use over time"
DESCRIPTION = """\
Send each request of a trace (the formats `kvgate replay` reads) to http://127.0.0.1:PORT
as POST /v1/completions at the trace's own arrival times (or --speed times faster), with
about prompt_tokens of prompt and max_tokens = output_tokens (ignore_eos), while reading
/metrics (and llama-server's /slots) every --interval: KV use, running and waiting
(deferred) requests, preemptions. Loopback only, whatever redirects, proxy variables or name
resolution say (no redirect is followed, no proxy is used, the peer address is checked after
connecting). Bounded by
--max-requests (at most 100,000), --max-seconds (at most 3,600) and 64 requests in flight;
--interval is 0.01 … 60 s. Every request sent is counted as ok, failed (any other status,
a malformed or oversized reply, a redirect) or abandoned (still running at the deadline).
Metric values outside their range (a usage above 1, a negative count) are not used and
are named in a WARNING. Writes the samples as JSON (--out) and a plot (--plot).
"""


def add_arguments(p: argparse.ArgumentParser) -> None:
    # --speed, --max-requests, --max-seconds, --interval: any number here; kvgate load's own caps
    # (loadgen.check_bounds: finite, in range) refuse the rest naming the flag, before any work
    p.add_argument("--url", required=True, help="the server, e.g. http://127.0.0.1:8080 (loopback only)")
    p.add_argument("--trace", required=True, help="trace file (CSV / JSONL, as kvgate replay)")
    p.add_argument("--rate", type=real(0.0, 1e6, open_min=True), default=None, help="Poisson arrivals at this rate (req/s) instead of the trace's times")
    p.add_argument("--speed", type=float, default=1.0, help="arrival-time divisor (2 = twice as fast)")
    p.add_argument("--max-requests", type=int, default=50, help="send at most this many requests (default 50)")
    p.add_argument("--max-seconds", type=float, default=120.0, help="stop after this many seconds (default 120)")
    p.add_argument("--interval", type=float, default=0.25, help="metrics sampling interval in seconds")
    p.add_argument("--max-prompt-tokens", type=count(1), default=None, help="cap each prompt at this many tokens")
    p.add_argument("--max-output-tokens", type=count(1), default=None, help="cap each output at this many tokens")
    p.add_argument("--served-model", default=None, help="the 'model' field of each request (vLLM needs it)")
    p.add_argument("--out", default=None, help="write the samples and requests as JSON here")
    p.add_argument("--plot", default=None, help="write a PNG of KV use / queue / preemptions here")
    p.add_argument("--force", action="store_true", help="overwrite --out / --plot")


def run(args: argparse.Namespace) -> int:
    from kvgate.engines.loadgen import MAX_INFLIGHT, check_bounds, check_url  # noqa: PLC0415
    from kvgate.replay.trace import load_trace  # noqa: PLC0415

    check_url(args.url)  # before any work
    check_bounds(speed=args.speed, max_requests=args.max_requests, max_seconds=args.max_seconds,
                 interval_s=args.interval, max_inflight=MAX_INFLIGHT)
    for p in (args.out, args.plot):
        if p:
            check_writable(p, force=args.force)
    trace = load_trace(args.trace, rate=args.rate)
    res = run_load(args.url, trace, speed=args.speed, max_requests=args.max_requests, max_seconds=args.max_seconds,
                   interval_s=args.interval, max_prompt_tokens=args.max_prompt_tokens,
                   max_output_tokens=args.max_output_tokens, model=args.served_model)
    doc = res.to_dict()
    if args.out:
        write_json_atomic(args.out, doc, force=args.force)
    if args.plot:
        plot_load(res, args.plot)
    s = doc["summary"]
    def f(v, pct=False):
        return "not reported" if v is None else (f"{100 * v:.1f}%" if pct else f"{v:g}")
    text = "\n".join([
        f"server      {res.url} ({res.engine})",
        f"requests    {s['requests_sent']} sent, {s['requests_ok']} ok, {s['requests_failed']} failed, "
        f"{s['requests_abandoned']} abandoned in {s['wall_s']} s",
        f"KV use      peak {f(s['kv_usage_peak'], True)}" + (f" ({f(s['kv_tokens_peak'])} tokens)"
                                                            if s['kv_tokens_peak'] is not None else ""),
        f"queue       running peak {f(s['running_peak'])}, waiting/deferred peak {f(s['waiting_peak'])}",
        f"preemptions {f(s['preemptions'])}",
        f"latency     p50 {f(s['latency_p50_s'])} s, p90 {f(s['latency_p90_s'])} s",
    ] + [f"WARNING: metric {w}" for w in s["flags"]]
      + ([f"wrote {args.out}"] if args.out else []) + ([f"wrote {args.plot}"] if args.plot else []))
    emit(args.json, doc, text)
    return 0
