"""Benchmark (not CI): kvgate against a real llama-server on CPU, end to end.

1. Write a tiny, complete Llama GGUF (random weights, a byte-fallback SentencePiece
   vocabulary) with the ``gguf`` package.
2. Start ``llama-server`` (built by the engines engineer at the commit in
   ``/work/llama.cpp-build/COMMIT``) on 127.0.0.1 with ``--metrics``, capture its startup
   log, and read it with ``kvgate import-log`` (cross-checked against the GGUF).
3. Replay a public trace head against it with ``kvgate.engines.loadgen`` (bounded in
   count and time), sampling ``/metrics`` and ``/slots``; save one ``/metrics`` and
   ``/slots`` dump as CI fixtures.
4. Gate the logged pool for a target (``gate_from_engine_log``) and write everything to
   ``benchmarks/results/llama_server_live/`` (JSON, log, plot).

Run: ``.venv/bin/python benchmarks/llama_server_live.py [--server PATH] [--out DIR]``.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

# tiny Llama: 4 layers, 256 wide, 4 heads, 2 KV heads of 64, vocabulary 262
CFG = dict(n_layer=4, n_embd=256, n_head=4, n_head_kv=2, head_dim=64, n_ff=512, n_ctx_train=4096)


#: the tiny Llama's own words after the specials and byte tokens: (text, score, type)
WORDS = [("▁", -1.0, 1), ("▁hi", -0.5, 1), ("hi", -2.0, 1)]


def write_tiny_llama(path: Path, seed: int = 0, *, cfg: dict | None = None, words: list | None = None,
                     add_bos: bool = True, name: str = "kvgate-tiny-llama") -> Path:
    """A loadable Llama GGUF with random f32 weights and an SPM vocabulary of <unk>, <s>,
    </s>, the 256 byte tokens and ``words`` (``(text, score, type)``; default
    :data:`WORDS`: "▁", "▁hi", "hi"), shaped by ``cfg`` (default :data:`CFG`)."""
    import gguf

    rng = np.random.default_rng(seed)
    c = cfg or CFG
    words = WORDS if words is None else words
    w = gguf.GGUFWriter(str(path), "llama")
    w.add_name(name)
    w.add_block_count(c["n_layer"])
    w.add_context_length(c["n_ctx_train"])
    w.add_embedding_length(c["n_embd"])
    w.add_feed_forward_length(c["n_ff"])
    w.add_head_count(c["n_head"])
    w.add_head_count_kv(c["n_head_kv"])
    w.add_rope_dimension_count(c["head_dim"])
    w.add_layer_norm_rms_eps(1e-5)
    w.add_file_type(0)  # ALL_F32
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + [t for t, _, _ in words]
    scores = [0.0] * 3 + [-1000.0] * 256 + [sc for _, sc, _ in words]
    types = [2, 3, 3] + [6] * 256 + [ty for _, _, ty in words]  # UNKNOWN, CONTROL, BYTE, NORMAL
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores(scores)
    w.add_token_types(types)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    w.add_add_bos_token(add_bos)
    V, E, F = len(tokens), c["n_embd"], c["n_ff"]
    q, kv = c["n_head"] * c["head_dim"], c["n_head_kv"] * c["head_dim"]

    def t(*shape):
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    w.add_tensor("token_embd.weight", t(V, E))
    w.add_tensor("output_norm.weight", np.ones(E, dtype=np.float32))
    w.add_tensor("output.weight", t(V, E))
    for i in range(c["n_layer"]):
        p = f"blk.{i}."
        w.add_tensor(p + "attn_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor(p + "attn_q.weight", t(q, E))
        w.add_tensor(p + "attn_k.weight", t(kv, E))
        w.add_tensor(p + "attn_v.weight", t(kv, E))
        w.add_tensor(p + "attn_output.weight", t(E, q))
        w.add_tensor(p + "ffn_norm.weight", np.ones(E, dtype=np.float32))
        w.add_tensor(p + "ffn_gate.weight", t(F, E))
        w.add_tensor(p + "ffn_up.weight", t(F, E))
        w.add_tensor(p + "ffn_down.weight", t(E, F))
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_ready(base: str, proc: subprocess.Popen, timeout: float = 120.0) -> None:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"llama-server exited with {proc.returncode}")
        try:
            with urllib.request.urlopen(base + "/health", timeout=2) as r:  # noqa: S310 - loopback
                if r.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.5)
    raise RuntimeError("llama-server did not become ready")


def stop(proc: subprocess.Popen) -> None:
    """Stop a llama-server: SIGTERM, then SIGKILL after 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="/work/llama.cpp-build/build/bin/llama-server")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/llama_server_live"))
    ap.add_argument("--ctx", type=int, default=2048, help="-c (whole context)")
    ap.add_argument("--np", type=int, default=4, help="-np (parallel slots)")
    ap.add_argument("--cache-type", default="f16", help="-ctk/-ctv")
    ap.add_argument("--trace", default=str(ROOT / "tests/data/traces/azure_conv_2023_head.csv"))
    ap.add_argument("--speed", type=float, default=4.0)
    ap.add_argument("--max-requests", type=int, default=20)
    ap.add_argument("--max-seconds", type=float, default=150.0)
    ap.add_argument("--max-prompt", type=int, default=400)
    ap.add_argument("--max-output", type=int, default=96)
    ap.add_argument("--grab-at", type=float, default=6.0, help="seconds into the load to save a metrics dump")
    ap.add_argument("--slots", type=int, default=8, help="gate target N")
    ap.add_argument("--max-seq", type=int, default=512, help="gate target L")
    a = ap.parse_args()

    from kvgate.engines import crosscheck, gate_from_engine_log, read_engine_log
    from kvgate.engines.loadgen import plot_load, run_load
    from kvgate.engines.report import render_check, render_pool
    from kvgate.model import load_model
    from kvgate.replay.trace import load_trace

    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    tmp = Path(os.environ.get("TMPDIR", "/tmp")) / f"kvgate-live-{os.getpid()}"
    tmp.mkdir(parents=True, exist_ok=True)
    gguf_path = write_tiny_llama(tmp / "tiny-llama.gguf")
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    log_path = out / "llama_server_startup.log"
    cmd = [a.server, "-m", str(gguf_path), "-c", str(a.ctx), "-np", str(a.np), "--host", "127.0.0.1",
           "--port", str(port), "--metrics", "--slots", "-t", "2", "-ctk", a.cache_type, "-ctv", a.cache_type,
           "--no-warmup", "-lv", "4"]
    commit = Path("/work/llama.cpp-build/COMMIT").read_text().strip() if Path("/work/llama.cpp-build/COMMIT").exists() else None
    with open(tmp / "server.log", "w") as lf:
        proc = subprocess.Popen(cmd, stdout=lf, stderr=subprocess.STDOUT)  # noqa: S603 - our own binary, loopback
        try:
            wait_ready(base, proc)
            time.sleep(0.5)
            shutil.copyfile(tmp / "server.log", log_path)
            pool = read_engine_log(log_path)
            model = load_model(str(gguf_path))
            check = crosscheck(pool, model)
            trace = load_trace(a.trace)

            def grab() -> None:  # one /metrics + /slots dump mid-load, for the CI fixtures
                time.sleep(a.grab_at)
                for ep, name in (("/metrics", "llamacpp_metrics_under_load.prom"),
                                 ("/slots", "llamacpp_slots_under_load.json")):
                    with urllib.request.urlopen(base + ep, timeout=5) as r:  # noqa: S310 - loopback
                        (out / name).write_bytes(r.read())

            import threading

            threading.Thread(target=grab, daemon=True).start()
            res = run_load(base, trace, speed=a.speed, max_requests=a.max_requests, max_seconds=a.max_seconds,
                           interval_s=0.2, max_prompt_tokens=a.max_prompt, max_output_tokens=a.max_output,
                           max_inflight=16)
            with urllib.request.urlopen(base + "/metrics", timeout=5) as r:  # noqa: S310 - loopback
                (out / "llamacpp_metrics.prom").write_bytes(r.read())
            with urllib.request.urlopen(base + "/slots", timeout=5) as r:  # noqa: S310 - loopback
                (out / "llamacpp_slots.json").write_bytes(r.read())
        finally:
            stop(proc)
    shutil.copyfile(tmp / "server.log", out / "llama_server_full.log")
    gate = gate_from_engine_log(pool, model, slots=a.slots, max_seq=a.max_seq, pool_bytes=check.get("pool_bytes"),
                                trace=trace)
    plot_load(res, str(out / "load.png"), title=f"llama-server {commit[:10] if commit else ''} tiny llama, "
                                                f"-c {a.ctx} -np {a.np}, trace ×{a.speed}")
    doc = {"command": cmd[:1] + ["-m", "tiny-llama.gguf"] + cmd[3:], "commit": commit, "model": CFG,
           "pool": pool.to_dict(), "crosscheck": check, "load": res.to_dict(),
           "gate": {k: v for k, v in gate.items() if k != "record"}, "gate_record_verdicts": gate["record"]["verdicts"]}
    (out / "result.json").write_text(json.dumps(doc, indent=2, default=str))
    print(render_pool(pool))
    print(render_check(check))
    print(json.dumps(res.summary(), indent=2))
    print("\n".join(gate["lines"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
