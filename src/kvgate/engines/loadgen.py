"""A bounded loopback load generator: replay a trace against an OpenAI-compatible server
while sampling its metrics.

Each trace request becomes one ``POST /v1/completions`` sent at its arrival time divided
by ``speed``, with a prompt of about ``prompt_tokens`` tokens (``"hi"`` repeated; a
server's tokenizer may count a few more or fewer: the server's own ``usage`` figures are
recorded per request) and ``max_tokens = output_tokens`` with ``ignore_eos`` set, so the
KV the request holds follows the trace. Prompt and output lengths can be capped (a tiny
CPU model cannot serve the trace's 8k prompts in a benchmark's minutes).

Bounds: loopback addresses only (``127.0.0.1``, ``::1``, ``localhost``), at most
``max_requests`` requests, at most ``max_seconds`` of wall time (requests still running
then are abandoned and counted), one thread per in-flight request (at most
``max_inflight``).

A sampler thread reads ``/metrics`` (and llama-server's ``/slots``) every ``interval_s``
into :func:`kvgate.engines.metrics.engine_sample` rows: KV use, running, waiting
(queued / deferred), preemptions over time.
"""

from __future__ import annotations

import json
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kvgate.engines.metrics import MetricsError, engine_sample, parse_prometheus
from kvgate.errors import KvgateError

LOOPBACK = ("127.0.0.1", "::1", "localhost")


class LoadError(KvgateError):
    """Bad load-generator settings (a non-loopback URL, no bounds)."""


def check_url(url: str) -> str:
    """The base URL (``http://127.0.0.1:8080``) when it is loopback http.

    Raises:
        LoadError: another scheme or a host that is not loopback.
    """
    u = urlparse(url)
    if u.scheme != "http" or u.hostname not in LOOPBACK:
        raise LoadError(f"load URL {url!r} is not a loopback http address",
                        hint="kvgate load only talks to a server on this machine: http://127.0.0.1:PORT")
    return f"{u.scheme}://{u.netloc}"


@dataclass
class LoadResult:
    """What a load run saw. ``samples``: rows of ``{t_s, kv_usage, kv_tokens, running,
    waiting, preemptions}`` (``None`` = not reported); ``requests``: one row per request
    sent ``{i, t_sent_s, prompt_tokens, max_tokens, status, latency_s, usage}``."""

    url: str
    engine: str | None
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    abandoned: int = 0
    settings: dict[str, Any] = field(default_factory=dict)

    def summary(self) -> dict[str, Any]:
        """Peaks and totals: ``kv_usage_peak``, ``kv_tokens_peak``, ``waiting_peak``,
        ``running_peak``, ``preemptions`` (last − first counter), request counts and
        latency percentiles (p50/p90, seconds)."""
        def peak(k: str) -> float | None:
            vals = [s[k] for s in self.samples if s.get(k) is not None]
            return max(vals) if vals else None

        pre = [s["preemptions"] for s in self.samples if s.get("preemptions") is not None]
        ok = sorted(r["latency_s"] for r in self.requests if r["status"] == 200)
        return {
            "requests_sent": len(self.requests),
            "requests_ok": len(ok),
            "requests_failed": sum(1 for r in self.requests if r["status"] not in (200, None)),
            "requests_abandoned": self.abandoned,
            "kv_usage_peak": peak("kv_usage"), "kv_tokens_peak": peak("kv_tokens"),
            "running_peak": peak("running"), "waiting_peak": peak("waiting"),
            "preemptions": (pre[-1] - pre[0]) if len(pre) >= 2 else None,
            "latency_p50_s": ok[len(ok) // 2] if ok else None,
            "latency_p90_s": ok[min(len(ok) - 1, (9 * len(ok)) // 10)] if ok else None,
            "samples": len(self.samples), "wall_s": round(self.wall_s, 3),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "engine": self.engine, "settings": self.settings, "summary": self.summary(),
                "samples": self.samples, "requests": self.requests}


def _get(url: str, timeout: float) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # noqa: S310 - loopback only (check_url)
        return r.read().decode("utf-8", errors="replace")


def sample_once(base: str, *, engine: str | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """One metrics sample from a server (``/metrics``; ``/slots`` for llama-server).

    Raises:
        LoadError: the server does not answer ``/metrics`` (is ``--metrics`` on?).
    """
    try:
        metrics = parse_prometheus(_get(base + "/metrics", timeout))
    except (urllib.error.URLError, OSError) as exc:
        raise LoadError(f"cannot read {base}/metrics: {exc}",
                        hint="llama-server needs --metrics; vLLM and SGLang (--enable-metrics) serve it") from exc
    slots = None
    if engine in (None, "llama.cpp") and any(k.startswith("llamacpp:") for k in metrics):
        try:
            slots = json.loads(_get(base + "/slots", timeout))
        except (urllib.error.URLError, OSError, json.JSONDecodeError):
            slots = None
    try:
        return engine_sample(metrics, slots=slots, engine=engine)
    except MetricsError:
        return engine_sample(metrics, engine=engine)


def run_load(url: str, trace, *, speed: float = 1.0, max_requests: int = 50, max_seconds: float = 120.0,
             interval_s: float = 0.25, max_prompt_tokens: int | None = None, max_output_tokens: int | None = None,
             max_inflight: int = 64, model: str | None = None, engine: str | None = None,
             request_timeout_s: float = 300.0) -> LoadResult:
    """Replay ``trace`` (a :class:`kvgate.replay.trace.Trace`) against ``url`` (module
    docstring) and return what was sent and sampled.

    Raises:
        LoadError: a non-loopback URL, non-positive bounds, or no ``/metrics``.
    """
    base = check_url(url)
    for name, v in (("speed", speed), ("max_seconds", max_seconds), ("interval_s", interval_s)):
        if not v > 0:
            raise LoadError(f"{name} must be positive, got {v!r}")
    if not isinstance(max_requests, int) or max_requests <= 0:
        raise LoadError(f"max_requests must be a positive integer, got {max_requests!r}")
    first = sample_once(base, engine=engine)
    res = LoadResult(url=base, engine=engine or first["engine"],
                     settings={"speed": speed, "max_requests": max_requests, "max_seconds": max_seconds,
                               "interval_s": interval_s, "max_prompt_tokens": max_prompt_tokens,
                               "max_output_tokens": max_output_tokens, "trace": getattr(trace, "source", None)})
    t0 = time.monotonic()
    stop = threading.Event()
    lock = threading.Lock()

    def sampler() -> None:
        while not stop.is_set():
            t = time.monotonic() - t0
            try:
                s = sample_once(base, engine=res.engine)
            except LoadError:
                s = {"kv_usage": None, "kv_tokens": None, "running": None, "waiting": None, "preemptions": None}
            row = {"t_s": round(t, 4), **{k: s.get(k) for k in ("kv_usage", "kv_tokens", "running", "waiting",
                                                                "preemptions")}}
            with lock:
                res.samples.append(row)
            stop.wait(interval_s)

    def send(i: int, prompt: int, out: int, row: dict[str, Any]) -> None:
        body = {"prompt": "hi " * max(1, prompt), "max_tokens": max(1, out), "temperature": 0.0,
                "ignore_eos": True, "stream": False}
        if model:
            body["model"] = model
        req = urllib.request.Request(base + "/v1/completions", data=json.dumps(body).encode(),
                                     headers={"Content-Type": "application/json"})
        t = time.monotonic()
        try:
            with urllib.request.urlopen(req, timeout=request_timeout_s) as r:  # noqa: S310 - loopback only
                payload = json.loads(r.read().decode())
                row.update(status=r.status, usage=payload.get("usage"))
        except urllib.error.HTTPError as exc:
            row.update(status=exc.code, error=str(exc)[:200])
        except (urllib.error.URLError, OSError, json.JSONDecodeError) as exc:
            row.update(status=-1, error=str(exc)[:200])
        row["latency_s"] = round(time.monotonic() - t, 4)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    workers: list[threading.Thread] = []
    n = min(max_requests, len(trace))
    for i in range(n):
        due = float(trace.arrival_s[i]) / speed
        while time.monotonic() - t0 < due and time.monotonic() - t0 < max_seconds:
            time.sleep(min(0.01, max(0.0, due - (time.monotonic() - t0))))
        if time.monotonic() - t0 >= max_seconds:
            break
        while sum(w.is_alive() for w in workers) >= max_inflight and time.monotonic() - t0 < max_seconds:
            time.sleep(0.01)
        p = int(trace.prompt_tokens[i])
        o = int(trace.output_tokens[i])
        p = min(p, max_prompt_tokens) if max_prompt_tokens else p
        o = min(o, max_output_tokens) if max_output_tokens else o
        row: dict[str, Any] = {"i": i, "t_sent_s": round(time.monotonic() - t0, 4), "prompt_tokens": p,
                               "max_tokens": o, "status": None, "latency_s": None}
        res.requests.append(row)
        w = threading.Thread(target=send, args=(i, p, o, row), daemon=True)
        w.start()
        workers.append(w)
    for w in workers:
        w.join(timeout=max(0.0, max_seconds - (time.monotonic() - t0)))
    res.abandoned = sum(w.is_alive() for w in workers)
    time.sleep(interval_s)
    stop.set()
    th.join(timeout=5)
    res.wall_s = time.monotonic() - t0
    return res


def plot_load(result: LoadResult, path: str, *, title: str | None = None, pool_tokens: int | None = None) -> str:
    """A PNG of KV use, running / waiting requests and preemptions over time."""
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    t = [s["t_s"] for s in result.samples]
    fig, ax = plt.subplots(3, 1, figsize=(8, 7), sharex=True)
    usage = [None if s["kv_usage"] is None else 100 * s["kv_usage"] for s in result.samples]
    ax[0].plot(t, [u if u is not None else float("nan") for u in usage], color="tab:blue")
    ax[0].set_ylabel("KV use (% of pool)")
    ax[0].set_ylim(0, 105)
    ax[0].axhline(100, color="tab:red", ls="--", lw=0.8)
    ax[1].step(t, [s["running"] if s["running"] is not None else float("nan") for s in result.samples],
               where="post", label="running")
    ax[1].step(t, [s["waiting"] if s["waiting"] is not None else float("nan") for s in result.samples],
               where="post", label="waiting / deferred")
    ax[1].set_ylabel("requests")
    ax[1].legend(loc="upper right")
    pre = [s["preemptions"] for s in result.samples]
    if any(p is not None for p in pre):
        ax[2].step(t, [p if p is not None else float("nan") for p in pre], where="post", color="tab:purple")
        ax[2].set_ylabel("preemptions (counter)")
    else:
        sent = [r["t_sent_s"] for r in result.requests]
        ax[2].plot(sent, range(1, len(sent) + 1), drawstyle="steps-post", color="tab:green")
        ax[2].set_ylabel("requests sent")
    ax[2].set_xlabel("time (s)")
    fig.suptitle(title or f"kvgate load: {result.url} ({result.engine})", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
