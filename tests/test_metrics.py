"""Engine metrics readers (real /metrics dumps) and the bounded loopback load generator."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kvgate.engines.loadgen import LoadError, check_url, run_load
from kvgate.engines.metrics import MetricsError, engine_sample, parse_prometheus, slots_usage
from kvgate.replay.trace import synthetic_fixed

DATA = Path(__file__).parent / "data" / "metrics"


def dump(name: str):
    return parse_prometheus((DATA / name).read_text())


def test_vllm_v1_kv_cache_usage_perc_with_engine_label():
    m = dump("vllm_0.10.0_glm45.prom")
    assert m["vllm:kv_cache_usage_perc"] == [({"engine": "0", "model_name": "zai-org/GLM-4.5"}, 9.75010481363281e-06)]
    s = engine_sample(m)
    assert s["engine"] == "vllm" and s["kv_usage"] == 9.75010481363281e-06
    assert s["running"] is None and s["waiting"] is None and s["preemptions"] is None  # not in the dump: unknown


def test_vllm_old_gpu_cache_usage_name_and_process_metrics():
    m = dump("vllm_router_qwen25-coder.prom")
    assert m["process_max_fds"] == [({}, 1048576.0)]
    s = engine_sample(m)
    assert (s["kv_usage"], s["running"], s["waiting"]) == (0.0, 0.0, 0.0)


def test_vllm_preemptions_counter():
    s = engine_sample(dump("vllm_triton_backend.prom"))
    assert s["preemptions"] == 0.0 and s["waiting"] == 0.0


def test_llamacpp_dump_from_the_live_benchmark():
    p = DATA / "llamacpp_0c1e5709.prom"
    if not p.exists():
        pytest.skip("llama-server dump not captured yet")
    m = parse_prometheus(p.read_text())
    # the pinned llama-server no longer exports kv_cache_usage_ratio (server-task.cpp to_metrics)
    assert "llamacpp:kv_cache_usage_ratio" not in m
    assert {"llamacpp:requests_processing", "llamacpp:requests_deferred", "llamacpp:n_tokens_max"} <= set(m)
    slots = json.loads((DATA / "llamacpp_0c1e5709_slots.json").read_text())
    s = engine_sample(m, slots=slots)
    assert s["engine"] == "llama.cpp" and s["waiting"] == m["llamacpp:requests_deferred"][0][1]
    # KV tokens of busy slots = their prompt.tokens (prompt + sampled), from the server's JSON
    busy = [x for x in slots if x["is_processing"]]
    want = sum(x["n_prompt_tokens"] for x in busy)
    assert busy and all(x["n_prompt_tokens"] <= x["n_ctx"] for x in slots)
    assert s["kv_tokens"] == want and s["kv_usage"] == want / sum(x["n_ctx"] for x in slots)


def test_slots_usage_by_hand():
    slots = [{"id": 0, "n_ctx": 512, "is_processing": True, "n_prompt_tokens": 100,
              "next_token": [{"n_decoded": 28}]},
             {"id": 1, "n_ctx": 512, "is_processing": False, "n_prompt_tokens": 300}]
    u = slots_usage(slots)
    # n_prompt_tokens is prompt.tokens.size(), which already holds the sampled tokens
    assert u == {"slots": 2, "busy": 1, "n_ctx_total": 1024, "kv_tokens": 100, "kv_usage": 100 / 1024}
    with pytest.raises(MetricsError, match="n_ctx"):
        slots_usage([{"id": 0}])


def test_bad_metrics_line_names_the_line():
    with pytest.raises(MetricsError, match="line 2"):
        parse_prometheus("# HELP x y\nthis is not a sample\n")
    assert parse_prometheus("a_b 1e3 1700000000\n") == {"a_b": [({}, 1000.0)]}


@pytest.mark.parametrize("url", ["http://10.0.0.1:8080", "https://127.0.0.1:8080", "http://example.com"])
def test_load_refuses_non_loopback(url):
    with pytest.raises(LoadError, match="loopback"):
        check_url(url)


class _Fake(BaseHTTPRequestHandler):
    """A loopback stand-in for llama-server: /metrics, /slots, /v1/completions."""

    busy = 0
    lock = threading.Lock()

    def log_message(self, *a):  # quiet
        pass

    def _send(self, body: str, ctype: str = "text/plain") -> None:
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802
        if self.path == "/metrics":
            self._send(f"llamacpp:requests_processing {_Fake.busy}\nllamacpp:requests_deferred 0\n")
        elif self.path == "/slots":
            self._send(json.dumps([{"id": 0, "n_ctx": 100, "is_processing": _Fake.busy > 0, "n_prompt_tokens": 10,
                                    "next_token": [{"n_decoded": 0}]}]), "application/json")

    def do_POST(self):  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        with _Fake.lock:
            _Fake.busy += 1
        threading.Event().wait(0.05)
        with _Fake.lock:
            _Fake.busy -= 1
        self._send(json.dumps({"usage": {"prompt_tokens": len(body["prompt"].split()),
                                         "completion_tokens": body["max_tokens"]}}), "application/json")


def test_run_load_end_to_end_against_a_loopback_server():
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        trace = synthetic_fixed(5, 40, 7, interval_s=0.02)
        res = run_load(f"http://127.0.0.1:{srv.server_address[1]}", trace, max_requests=3, max_seconds=10,
                       interval_s=0.02, max_prompt_tokens=12)
    finally:
        srv.shutdown()
    s = res.summary()
    assert res.engine == "llama.cpp"
    assert s["requests_sent"] == 3 and s["requests_ok"] == 3 and s["requests_abandoned"] == 0
    assert [r["usage"] for r in res.requests] == [{"prompt_tokens": 12, "completion_tokens": 7}] * 3
    assert s["waiting_peak"] == 0.0 and s["samples"] >= 2


def test_cli_load_writes_samples_and_plot(tmp_path, capsys):
    from kvgate.cli import main

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0.0,30,5\n0.01,20,4\n")
    srv = ThreadingHTTPServer(("127.0.0.1", 0), _Fake)
    th = threading.Thread(target=srv.serve_forever, daemon=True)
    th.start()
    try:
        code = main(["load", "--url", f"http://127.0.0.1:{srv.server_address[1]}", "--trace", str(trace),
                     "--max-requests", "2", "--max-seconds", "10", "--interval", "0.02",
                     "--out", str(tmp_path / "load.json"), "--plot", str(tmp_path / "load.png")])
    finally:
        srv.shutdown()
    assert code == 0
    doc = json.loads((tmp_path / "load.json").read_text())
    assert doc["summary"]["requests_ok"] == 2 and doc["engine"] == "llama.cpp"
    assert (tmp_path / "load.png").stat().st_size > 1000
    assert "2 sent, 2 ok" in capsys.readouterr().out


def test_cli_load_refuses_a_remote_url(capsys):
    from kvgate.cli import main

    assert main(["load", "--url", "http://192.168.1.5:8000", "--trace", "x.csv"]) == 2
    assert "loopback" in capsys.readouterr().err
