"""``kvgate load`` stays on loopback whatever redirects, proxy variables or name resolution
say; every bound is kvgate's own; malformed replies are counted failures; metric values
outside their range are flagged. Every server here is on 127.0.0.1 and every loop bounded."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from kvgate.engines import loadgen
from kvgate.engines.loadgen import LoadError, ReplyError, check_bounds, http_request, run_load, sample_once
from kvgate.engines.metrics import engine_sample, parse_prometheus
from kvgate.replay.trace import synthetic_fixed

VLLM_METRICS = "vllm:num_requests_running 0\nvllm:num_requests_waiting 0\nvllm:kv_cache_usage_perc 0.25\n"


class _Server:
    """A loopback HTTP server whose replies are set per test; it records every request."""

    def __init__(self, get=None, post=None):
        self.seen: list[tuple[str, str]] = []
        self.release = threading.Event()
        outer = self

        class H(BaseHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def _do(self, method, fn):
                outer.seen.append((method, self.path))
                if method == "POST":
                    self.rfile.read(int(self.headers.get("Content-Length") or 0))
                fn(self, outer)

            def do_GET(self):  # noqa: N802
                self._do("GET", get or _ok_metrics)

            def do_POST(self):  # noqa: N802
                self._do("POST", post or _ok_completion)

        self.srv = ThreadingHTTPServer(("127.0.0.1", 0), H)
        self.srv.daemon_threads = True
        self.port = self.srv.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self):
        self.release.set()
        self.srv.shutdown()
        self.srv.server_close()


def _reply(h, status: int, body: bytes, headers: dict | None = None):
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def _ok_metrics(h, srv):
    _reply(h, 200, VLLM_METRICS.encode())


def _ok_completion(h, srv):
    _reply(h, 200, json.dumps({"usage": {"prompt_tokens": 3, "completion_tokens": 2}}).encode())


@pytest.fixture
def servers():
    made: list[_Server] = []

    def make(**kw):
        s = _Server(**kw)
        made.append(s)
        return s

    yield make
    for s in made:
        s.close()


@pytest.fixture
def thread_errors():
    """Exceptions raised in any thread (a traceback printed by a worker)."""
    seen = []
    old = threading.excepthook
    threading.excepthook = lambda a: seen.append(a.exc_value)
    yield seen
    threading.excepthook = old


def _trace(n=3):
    return synthetic_fixed(n, 20, 4, interval_s=0.0)


def test_a_redirect_from_the_local_server_is_not_followed(servers):
    other = servers()  # the redirect's target: must never be contacted
    srv = servers(post=lambda h, s: _reply(h, 302, b"", {"Location": other.url + "/v1/completions"}))
    res = run_load(srv.url, _trace(3), max_requests=3, max_seconds=5, interval_s=0.05)
    s = res.summary()
    assert other.seen == []
    assert (s["requests_sent"], s["requests_ok"], s["requests_failed"]) == (3, 0, 3)
    assert all("redirect" in r["error"] and "not followed" in r["error"] for r in res.requests)


def test_proxy_variables_are_ignored(servers, monkeypatch):
    proxy = servers(get=lambda h, s: _reply(h, 502, b"proxy"), post=lambda h, s: _reply(h, 502, b"proxy"))
    srv = servers()
    for var in ("http_proxy", "HTTP_PROXY", "all_proxy", "ALL_PROXY"):
        monkeypatch.setenv(var, proxy.url)
    for var in ("no_proxy", "NO_PROXY"):
        monkeypatch.delenv(var, raising=False)
    import urllib.request

    monkeypatch.setattr(urllib.request, "_opener", None)  # a urllib client would read the variables anew
    res = run_load(srv.url, _trace(2), max_requests=2, max_seconds=5, interval_s=0.05)
    assert proxy.seen == []  # prompts never left for the proxy
    assert res.summary()["requests_ok"] == 2
    assert sum(1 for m, _ in srv.seen if m == "POST") == 2


def test_a_name_that_resolves_off_loopback_is_not_connected(monkeypatch):
    connects = []
    monkeypatch.setattr(loadgen.socket, "getaddrinfo",
                        lambda *a, **k: [(socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.7", 80))])
    monkeypatch.setattr(socket.socket, "connect", lambda self, addr: connects.append(addr))
    with pytest.raises(LoadError, match="not loopback"):
        http_request("http://localhost:8000", "GET", "/metrics")
    assert connects == []


def test_the_peer_address_is_checked_after_connecting(servers, monkeypatch):
    srv = servers()
    monkeypatch.setattr(socket.socket, "getpeername", lambda self: ("10.0.0.7", srv.port))
    with pytest.raises(LoadError, match="10.0.0.7"):
        sample_once(srv.url)
    assert srv.seen == []  # nothing was sent to it


@pytest.mark.parametrize("kw", [
    {"max_seconds": float("inf")}, {"max_seconds": 1e9}, {"max_seconds": float("nan")}, {"max_requests": 10**9},
    {"interval_s": 1e-9}, {"interval_s": float("inf")}, {"speed": float("inf")}, {"max_inflight": 65},
])
def test_bounds_are_kvgates_own(kw):
    args = {"speed": 1.0, "max_requests": 10, "max_seconds": 10.0, "interval_s": 0.25, "max_inflight": 64, **kw}
    with pytest.raises(LoadError):
        check_bounds(**args)


@pytest.mark.parametrize("flag,value", [("--max-seconds", "inf"), ("--max-seconds", "1e9"),
                                         ("--max-requests", "1000000000"), ("--interval", "1e-9")])
def test_cli_refuses_unbounded_runs_before_any_work(flag, value, capsys, tmp_path):
    from kvgate.cli import main

    code = main(["load", "--url", "http://127.0.0.1:9", "--trace", str(tmp_path / "absent.csv"), f"{flag}={value}"])
    err = capsys.readouterr().err
    assert code == 2 and "ERROR:" in err and flag in err and "Traceback" not in err


def test_no_request_past_the_inflight_cap_at_the_deadline(servers):
    srv = servers(post=lambda h, s: (s.release.wait(5), _ok_completion(h, s)))
    res = run_load(srv.url, _trace(10), max_requests=10, max_seconds=0.5, interval_s=0.05, max_inflight=2)
    s = res.summary()
    assert s["requests_sent"] == 2  # never a third one sent at the deadline
    assert s["requests_abandoned"] == 2 and s["requests_ok"] == s["requests_failed"] == 0


def _raw(data: bytes):
    def reply(h, srv):
        h.wfile.write(data)
        h.wfile.flush()
        h.close_connection = True
    return reply


@pytest.mark.parametrize("post", [
    _raw(b"garbage\r\n\r\n"),
    _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\n{\"usage\""),  # cut short
    lambda h, s: _reply(h, 200, b"not json"),
    lambda h, s: _reply(h, 200, b"[1, 2, 3]"),
    lambda h, s: _reply(h, 200, b"[" * 100_000),
    lambda h, s: _reply(h, 200, b'{"usage": ' + b"9" * 5000 + b"}"),
    lambda h, s: _reply(h, 200, b'{"usage": [1]}'),
    lambda h, s: _reply(h, 500, b"boom"),
    # found by benchmarks/fuzz.py (replies): http.client raised OverflowError on this length
    _raw(b"HTTP/1.1 200 OK\r\nContent-Length: 99999999999999999999\r\n\r\n{}"),
])
def test_malformed_replies_are_counted_failures_without_thread_tracebacks(servers, thread_errors, post):
    srv = servers(post=post)
    res = run_load(srv.url, _trace(3), max_requests=3, max_seconds=5, interval_s=0.05)
    s = res.summary()
    assert thread_errors == []
    assert s["requests_sent"] == 3
    assert s["requests_ok"] + s["requests_failed"] + s["requests_abandoned"] == 3
    assert s["requests_abandoned"] == 0


def test_a_bad_status_line_on_metrics_is_an_error_not_a_traceback(servers, capsys, tmp_path):
    from kvgate.cli import main

    srv = servers(get=_raw(b"NOT HTTP AT ALL\r\n\r\n"))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,30,5\n")
    code = main(["load", "--url", srv.url, "--trace", str(trace), "--max-seconds", "2"])
    err = capsys.readouterr().err
    assert code == 2 and "cannot read" in err and "/metrics" in err


def test_metrics_replies_are_read_up_to_a_cap(servers):
    srv = servers(get=lambda h, s: _reply(h, 200, b"# " + b"x" * 5000 + b"\n"))
    with pytest.raises(ReplyError, match="larger than 1,000 B"):
        http_request(srv.url, "GET", "/metrics", max_bytes=1000)
    assert loadgen.MAX_REPLY_BYTES <= 64 * 2**20


def test_out_of_range_metric_values_are_flagged_not_shown():
    s = engine_sample(parse_prometheus("vllm:kv_cache_usage_perc 2.5\nvllm:num_requests_running -5\n"
                                       "vllm:num_requests_waiting 3\nvllm:num_preemptions_total +Inf\n"))
    assert s["kv_usage"] is None and s["running"] is None and s["preemptions"] is None and s["waiting"] == 3
    assert any("vllm:kv_cache_usage_perc 2.5" in f and "0 … 1" in f for f in s["flags"])
    assert any("vllm:num_requests_running -5" in f for f in s["flags"])


def test_cli_load_warns_about_out_of_range_metrics(servers, capsys, tmp_path):
    from kvgate.cli import main

    srv = servers(get=lambda h, s: _reply(h, 200, b"vllm:kv_cache_usage_perc 2.5\nvllm:num_requests_running -5\n"))
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,30,5\n")
    code = main(["load", "--url", srv.url, "--trace", str(trace), "--max-seconds", "2", "--interval", "0.05"])
    out = capsys.readouterr().out
    assert code == 0 and "250" not in out and "KV use      peak not reported" in out
    assert "WARNING: metric vllm:kv_cache_usage_perc 2.5 is outside 0 … 1" in out


def test_slots_with_hostile_values_are_not_a_crash():
    from kvgate.engines.metrics import MetricsError, slots_usage

    for bad in ('[{"n_ctx": "x"}]', '[{"n_ctx": -1}]', '[{"n_ctx": 1e400}]', "[" * 10000,
                '[{"n_ctx": ' + "9" * 5000 + "}]"):
        with pytest.raises(MetricsError):
            slots_usage(bad)
