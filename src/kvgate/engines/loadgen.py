"""A bounded loopback load generator: replay a trace against an OpenAI-compatible server
while sampling its metrics.

Each trace request becomes one ``POST /v1/completions`` sent at its arrival time divided
by ``speed``, with a prompt of about ``prompt_tokens`` tokens (``"hi"`` repeated; a
server's tokenizer may count a few more or fewer: the server's own ``usage`` figures are
recorded per request) and ``max_tokens = output_tokens`` with ``ignore_eos`` set, so the
KV the request holds follows the trace. Prompt and output lengths can be capped (a tiny
CPU model cannot serve the trace's 8k prompts in a benchmark's minutes).

**Loopback only, whatever the environment says.** Requests go through
:class:`LoopbackConnection` (``http.client``), never ``urllib``: no redirect is followed (a
3xx reply is a failed request), ``http_proxy`` / ``HTTP_PROXY`` / ``all_proxy`` are never
read, the host name is resolved and only loopback addresses (``127.0.0.0/8``, ``::1``)
are connected to, and the connected socket's peer address is checked again after
connecting.

**Bounded by kvgate itself.** At most :data:`MAX_REQUESTS` requests, :data:`MAX_SECONDS`
of wall time, :data:`MAX_INFLIGHT` requests in flight (one thread each), a sampling
interval of at least :data:`MIN_INTERVAL_S`; no request is sent at or after the deadline
(requests still running then are abandoned and counted). Replies are read up to
:data:`MAX_REPLY_BYTES`; a longer one is a failure (``/metrics``: a sample not taken).

**Every request is counted**: ok (200 with a JSON object), failed (any other status, a
malformed or oversized reply, a connection error, a redirect) or abandoned (still running
at the deadline); ``sent = ok + failed + abandoned``.

A sampler thread reads ``/metrics`` (and llama-server's ``/slots``) every ``interval_s``
into :func:`kvgate.engines.metrics.engine_sample` rows: KV use, running, waiting
(queued / deferred), preemptions over time. Values outside their range (a usage above 1,
a negative count) are dropped from the sample and flagged (``flags``).
"""

from __future__ import annotations

import http.client
import ipaddress
import math
import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlparse

from kvgate.engines.metrics import MetricsError, engine_sample, parse_prometheus
from kvgate.errors import KvgateError
from kvgate.guarded import loads_json

LOOPBACK = ("127.0.0.1", "::1", "localhost")

#: kvgate's own caps on a load run (a bounded, self-stopping loop whatever the flags say).
MAX_REQUESTS = 100_000
MAX_SECONDS = 3600.0
MAX_INFLIGHT = 64
MIN_INTERVAL_S = 0.01
MAX_INTERVAL_S = 60.0
MAX_SPEED = 1e6
#: Largest reply read (``/metrics``, ``/slots``, a completion). A vLLM ``/metrics`` page
#: with histograms for a few models is well under 1 MiB.
MAX_REPLY_BYTES = 16 * 2**20


class LoadError(KvgateError):
    """Bad load-generator settings (a non-loopback URL, no bounds)."""


class ReplyError(Exception):
    """A reply kvgate does not accept (a redirect, too large, malformed): a failed request."""


def check_url(url: str) -> str:
    """The base URL (``http://127.0.0.1:8080``) when it is loopback http.

    Raises:
        LoadError: another scheme, a host that is not loopback, or a URL with a path,
            credentials or a bad port.
    """
    try:
        u = urlparse(url)
        port = u.port
    except ValueError as exc:
        raise LoadError(f"load URL {url!r} is not a valid URL: {exc}") from None
    if u.scheme != "http" or u.hostname not in LOOPBACK or u.username or u.password:
        raise LoadError(f"load URL {url!r} is not a loopback http address",
                        hint="kvgate load only talks to a server on this machine: http://127.0.0.1:PORT")
    if port == 0 or (port is None and u.netloc.endswith(":")):  # port 0 is no server; ":" alone was read as 80
        raise LoadError(f"load URL {url!r} has port {port if port is not None else '(empty)'}: no server listens "
                        "there", hint="give the server's port, e.g. http://127.0.0.1:8080")
    if u.path not in ("", "/") or u.params or u.query or u.fragment:
        raise LoadError(f"load URL {url!r} has a path, query or fragment: kvgate load sends to the server's "
                        "own API paths (/v1/completions, /metrics), never to another",
                        hint="give the server's address alone, e.g. http://127.0.0.1:8080")
    host = f"[{u.hostname}]" if ":" in (u.hostname or "") else u.hostname
    return f"http://{host}" + (f":{port}" if port else "")


def is_loopback(address: str) -> bool:
    """Whether an IP address (``127.0.0.5``, ``::1``, ``::ffff:127.0.0.1``) is loopback."""
    try:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return bool(ip.is_loopback or (mapped is not None and mapped.is_loopback))


class LoopbackConnection(http.client.HTTPConnection):
    """An ``http.client`` connection that only ever connects to a loopback address.

    The host is resolved here (``socket.getaddrinfo``), non-loopback answers are dropped
    before any ``connect()``, and after connecting the socket's peer address is checked
    again. ``http.client`` follows no redirect and reads no proxy variable.

    Raises:
        LoadError: the name resolves to no loopback address, or the peer is not loopback.
    """

    def connect(self) -> None:  # noqa: D102
        try:
            infos = socket.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
        except (OSError, UnicodeError) as exc:
            raise LoadError(f"cannot resolve {self.host}: {exc}") from exc
        addrs = [i for i in infos if is_loopback(str(i[4][0]))]
        if not addrs:
            raise LoadError(f"{self.host} resolves to {sorted({str(i[4][0]) for i in infos})}: not loopback; "
                            "not connecting")
        last: OSError | None = None
        for family, kind, proto, _, sockaddr in addrs:
            sock = socket.socket(family, kind, proto)
            try:
                sock.settimeout(self.timeout if isinstance(self.timeout, (int, float)) else None)
                sock.connect(sockaddr)
                peer = str(sock.getpeername()[0])
                if not is_loopback(peer):
                    raise LoadError(f"connected to {peer}, which is not loopback; closing")
            except OSError as exc:
                sock.close()
                last = exc
                continue
            except BaseException:
                sock.close()
                raise
            self.sock = sock
            return
        raise last or OSError(f"cannot connect to {self.host}:{self.port}")


def http_request(base: str, method: str, path: str, *, body: bytes | None = None, timeout: float = 2.0,
                 max_bytes: int = MAX_REPLY_BYTES) -> tuple[int, bytes]:
    """``(status, body)`` of one request to the loopback server at ``base`` (a
    :func:`check_url` result); the body read up to ``max_bytes``.

    Raises:
        ReplyError: a redirect (3xx: never followed), a reply over ``max_bytes``, or a
            malformed reply (bad status line, bad headers, cut short).
        LoadError: the name does not resolve to loopback, or the peer is not loopback.
        OSError: the connection failed or timed out.
    """
    u = urlparse(base)
    conn = LoopbackConnection(u.hostname or "", u.port or 80, timeout=timeout)
    try:
        headers = {"Content-Type": "application/json"} if body is not None else {}
        conn.request(method, path, body=body, headers=headers)
        r = conn.getresponse()
        if 300 <= r.status < 400:
            raise ReplyError(f"HTTP {r.status} redirect to {r.getheader('Location', '?')[:80]!r}: not followed "
                             "(kvgate load stays on loopback)")
        data = r.read(max_bytes + 1)
        if len(data) > max_bytes:
            raise ReplyError(f"reply larger than {max_bytes:,} B: not read")
        return r.status, data
    except http.client.HTTPException as exc:
        raise ReplyError(f"malformed reply: {type(exc).__name__}: {str(exc)[:120]}") from exc
    except (ValueError, UnicodeError, OverflowError) as exc:  # a header http.client cannot parse or hold
        raise ReplyError(f"malformed reply: {str(exc)[:120]}") from exc
    finally:
        conn.close()


@dataclass
class LoadResult:
    """What a load run saw. ``samples``: rows of ``{t_s, kv_usage, kv_tokens, running,
    waiting, preemptions}`` (``None`` = not reported); ``requests``: one row per request
    sent ``{i, t_sent_s, prompt_tokens, max_tokens, status, latency_s, usage}``
    (``status`` −1: no HTTP reply kvgate accepts, ``None``: abandoned); ``flags``:
    metric values dropped as out of range, once each."""

    url: str
    engine: str | None
    samples: list[dict[str, Any]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    wall_s: float = 0.0
    abandoned: int = 0
    settings: dict[str, Any] = field(default_factory=dict)
    flags: list[str] = field(default_factory=list)

    def summary(self) -> dict[str, Any]:
        """Peaks and totals: ``kv_usage_peak``, ``kv_tokens_peak``, ``waiting_peak``,
        ``running_peak``, ``preemptions`` (last − first counter), request counts
        (sent = ok + failed + abandoned) and latency percentiles (p50/p90, seconds)."""
        def peak(k: str) -> float | None:
            vals = [s[k] for s in self.samples if s.get(k) is not None]
            return max(vals) if vals else None

        pre = [s["preemptions"] for s in self.samples if s.get("preemptions") is not None]
        ok = sorted(r["latency_s"] for r in self.requests if r["status"] == 200)
        return {
            "requests_sent": len(self.requests),
            "requests_ok": len(ok),
            "requests_failed": sum(1 for r in self.requests if r["status"] not in (200, None)),
            "requests_abandoned": sum(1 for r in self.requests if r["status"] is None),
            "kv_usage_peak": peak("kv_usage"), "kv_tokens_peak": peak("kv_tokens"),
            "running_peak": peak("running"), "waiting_peak": peak("waiting"),
            "preemptions": (pre[-1] - pre[0]) if len(pre) >= 2 else None,
            "latency_p50_s": ok[len(ok) // 2] if ok else None,
            "latency_p90_s": ok[min(len(ok) - 1, (9 * len(ok)) // 10)] if ok else None,
            "samples": len(self.samples), "wall_s": round(self.wall_s, 3),
            "flags": list(self.flags),
        }

    def to_dict(self) -> dict[str, Any]:
        return {"url": self.url, "engine": self.engine, "settings": self.settings, "summary": self.summary(),
                "samples": self.samples, "requests": self.requests}


def _get(base: str, path: str, timeout: float) -> str:
    status, data = http_request(base, "GET", path, timeout=timeout)
    if status != 200:
        raise ReplyError(f"HTTP {status}")
    return data.decode("utf-8", errors="replace")


def sample_once(base: str, *, engine: str | None = None, timeout: float = 2.0) -> dict[str, Any]:
    """One metrics sample from a server (``/metrics``; ``/slots`` for llama-server).

    Raises:
        LoadError: the server does not answer ``/metrics`` with a page kvgate can read
            (is ``--metrics`` on?), or it is not on loopback.
    """
    try:
        metrics = parse_prometheus(_get(base, "/metrics", timeout))
    except (ReplyError, OSError, MetricsError) as exc:
        raise LoadError(f"cannot read {base}/metrics: {exc}",
                        hint="llama-server needs --metrics; vLLM and SGLang (--enable-metrics) serve it") from exc
    slots = None
    if engine in (None, "llama.cpp") and any(k.startswith("llamacpp:") for k in metrics):
        try:
            slots = loads_json(_get(base, "/slots", timeout), what="/slots")
        except (ReplyError, OSError, KvgateError):
            slots = None
    try:
        return engine_sample(metrics, slots=slots, engine=engine)
    except MetricsError:
        return engine_sample(metrics, engine=engine)


def check_bounds(*, speed: float, max_requests: int, max_seconds: float, interval_s: float,
                 max_inflight: int) -> None:
    """Refuse settings outside kvgate's own caps (module docstring), naming the flag.

    Raises:
        LoadError: a bound that is not a finite number in its range.
    """
    def real(name: str, v: Any, lo: float, hi: float, lo_open: bool = False) -> None:
        ok = isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) and \
            (v > lo if lo_open else v >= lo) and v <= hi
        if not ok:
            low = f"above {lo:g}" if lo_open else f"at least {lo:g}"
            raise LoadError(f"{name} must be a finite number {low} and at most {hi:g}, got {v!r}",
                            hint="kvgate load caps every run: it is a bounded, self-stopping loop")

    real("--speed", speed, 0.0, MAX_SPEED, lo_open=True)
    real("--max-seconds", max_seconds, 0.0, MAX_SECONDS, lo_open=True)
    real("--interval", interval_s, MIN_INTERVAL_S, MAX_INTERVAL_S)
    for name, n, hi in (("--max-requests", max_requests, MAX_REQUESTS), ("max_inflight", max_inflight, MAX_INFLIGHT)):
        if not isinstance(n, int) or isinstance(n, bool) or not 1 <= n <= hi:
            raise LoadError(f"{name} must be an integer from 1 to {hi:,}, got {n!r}",
                            hint="kvgate load caps every run: it is a bounded, self-stopping loop")


def run_load(url: str, trace: Any, *, speed: float = 1.0, max_requests: int = 50, max_seconds: float = 120.0,
             interval_s: float = 0.25, max_prompt_tokens: int | None = None, max_output_tokens: int | None = None,
             max_inflight: int = MAX_INFLIGHT, model: str | None = None, engine: str | None = None,
             request_timeout_s: float = 300.0) -> LoadResult:
    """Replay ``trace`` (a :class:`kvgate.replay.trace.Trace`) against ``url`` (module
    docstring) and return what was sent and sampled.

    Raises:
        LoadError: a non-loopback URL, bounds outside kvgate's caps
            (:func:`check_bounds`), or no ``/metrics``.
    """
    base = check_url(url)
    check_bounds(speed=speed, max_requests=max_requests, max_seconds=max_seconds, interval_s=interval_s,
                 max_inflight=max_inflight)
    first = sample_once(base, engine=engine)
    res = LoadResult(url=base, engine=engine or first["engine"],
                     settings={"speed": speed, "max_requests": max_requests, "max_seconds": max_seconds,
                               "interval_s": interval_s, "max_prompt_tokens": max_prompt_tokens,
                               "max_output_tokens": max_output_tokens, "trace": getattr(trace, "source", None)})
    t0 = time.monotonic()
    deadline = t0 + max_seconds
    stop = threading.Event()
    lock = threading.Lock()
    flags: dict[str, None] = dict.fromkeys(first.get("flags") or [])
    keys = ("kv_usage", "kv_tokens", "running", "waiting", "preemptions")
    closed = [False]  # set at the end: a request still running then stays abandoned

    def sampler() -> None:
        while not stop.is_set():
            t = time.monotonic() - t0
            try:
                s = sample_once(base, engine=res.engine, timeout=min(2.0, interval_s * 4))
            except (LoadError, Exception):  # noqa: BLE001 - a sample not taken is "not reported", never a crash
                s = dict.fromkeys(keys)
            row = {"t_s": round(t, 4), **{k: s.get(k) for k in keys}}
            with lock:
                res.samples.append(row)
                flags.update(dict.fromkeys(s.get("flags") or []))
            stop.wait(interval_s)

    def send(prompt: int, out: int, row: dict[str, Any]) -> None:
        body: dict[str, Any] = {"prompt": "hi " * max(1, prompt), "max_tokens": max(1, out), "temperature": 0.0,
                                "ignore_eos": True, "stream": False}
        if model:
            body["model"] = model
        t = time.monotonic()
        result: dict[str, Any] = {"status": -1}
        try:
            timeout = max(0.001, min(request_timeout_s, deadline - time.monotonic()))
            status, data = http_request(base, "POST", "/v1/completions", body=_json_bytes(body), timeout=timeout)
            result = completion_result(status, data)
        except Exception as exc:  # noqa: BLE001 - every failure is counted, never a thread traceback
            result = {"status": -1, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
            if time.monotonic() >= deadline:  # cut off by the run's deadline: abandoned, not failed
                result = {"status": None, "error": "abandoned at the deadline"}
        finally:
            result["latency_s"] = round(time.monotonic() - t, 4)
            with lock:
                if not closed[0]:
                    row.update(result)

    th = threading.Thread(target=sampler, daemon=True)
    th.start()
    workers: list[threading.Thread] = []
    n = min(max_requests, len(trace))
    try:
        for i in range(n):
            due = t0 + float(trace.arrival_s[i]) / speed
            while time.monotonic() < min(due, deadline):
                time.sleep(min(0.01, max(0.0, min(due, deadline) - time.monotonic())))
            while sum(w.is_alive() for w in workers) >= max_inflight and time.monotonic() < deadline:
                time.sleep(0.01)
            if time.monotonic() >= deadline or sum(w.is_alive() for w in workers) >= max_inflight:
                break  # never a request at or past the deadline, never one past the in-flight cap
            p = int(trace.prompt_tokens[i])
            o = int(trace.output_tokens[i])
            p = min(p, max_prompt_tokens) if max_prompt_tokens else p
            o = min(o, max_output_tokens) if max_output_tokens else o
            row: dict[str, Any] = {"i": i, "t_sent_s": round(time.monotonic() - t0, 4), "prompt_tokens": p,
                                   "max_tokens": o, "status": None, "latency_s": None}
            res.requests.append(row)
            w = threading.Thread(target=send, args=(p, o, row), daemon=True)
            w.start()
            workers.append(w)
        for w in workers:
            w.join(timeout=max(0.0, deadline - time.monotonic()))
    finally:
        stop.set()
        th.join(timeout=5)
    with lock:
        closed[0] = True
        res.abandoned = sum(1 for r in res.requests if r["status"] is None)
        res.flags = list(flags)
    res.wall_s = time.monotonic() - t0
    return res


def completion_result(status: int, data: bytes) -> dict[str, Any]:
    """A request row's outcome from a ``/v1/completions`` reply: ``{"status": 200,
    "usage": {...} or None}`` for a 200 with a JSON object, else ``{"status": status,
    "error": ...}`` (a 200 whose body is not a JSON object counts as failed, ``-1``).
    Never raises."""
    if status != 200:
        return {"status": status, "error": f"HTTP {status}: {data[:200].decode('utf-8', 'replace')}"}
    try:
        payload = loads_json(data, what="completion reply")
    except KvgateError as exc:
        return {"status": -1, "error": exc.message[:200]}
    if not isinstance(payload, dict):
        return {"status": -1, "error": f"completion reply is a JSON {type(payload).__name__}, not an object"}
    usage = payload.get("usage")
    return {"status": 200, "usage": usage if isinstance(usage, dict) else None}


def _json_bytes(obj: Any) -> bytes:
    import json  # noqa: PLC0415

    return json.dumps(obj).encode()


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
