"""Benchmark (device, not CI): every buffer a CUDA ``llama-server`` logs, against ``kvgate fit``.

Three steps, so the GPU machine only runs llama-server:

1. ``headers DIR`` (here): write zero-weight GGUF *headers* (metadata, an SPM vocabulary,
   every tensor info at full size; no tensor data) for the shapes in :data:`MODELS`:
   Llama-3.1-8B, Qwen3-8B and Gemma-3-12B (tied output) in F16 / Q8_0 / Q4_0. Each header
   file ends where the tensor data would start; ``SIZES.txt`` gives the full file size.
2. ``run DIR --server PATH --out OUT`` (device): ``truncate -s`` each header to its full size
   (a sparse file of zeros: zero weights are valid F16/Q8_0/Q4_0), start llama-server for
   every case of :data:`CASES`, keep its log until ``server is listening`` (or its exit),
   read the process's GPU memory from ``nvidia-smi --query-compute-apps`` and stop it.
3. ``compare OUT`` (here): read each log's buffer lines and run ``kvgate fit`` on the same
   (sparse) GGUF with the same flags and ``--gpu H100``; write
   ``benchmarks/results/llamacpp_gpu_buffers.{json,md}``.

llama.cpp: the pinned 0c1e57098bba (vendor/llama.cpp of the llama-cpp-python 0.3.36 sdist),
built for sm_90 with ``-DGGML_CUDA=ON`` (``benchmarks/device_llamacpp_gpu_buffers.sh``).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MiB = 2**20

#: shapes of the published configs (config.json of each model on the Hugging Face hub)
SHAPES = {
    "llama8b": dict(arch="llama", n_layer=32, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=14336,
                    n_vocab=128256, n_ctx_train=131072, tied=False, rope_theta=500000.0),
    "qwen3_8b": dict(arch="qwen3", n_layer=36, n_embd=4096, n_head=32, n_head_kv=8, head_dim=128, n_ff=12288,
                     n_vocab=151936, n_ctx_train=40960, tied=False, rope_theta=1000000.0, qk_norm=True),
    "gemma3_12b": dict(arch="gemma3", n_layer=48, n_embd=3840, n_head=16, n_head_kv=8, head_dim=256, n_ff=15360,
                       n_vocab=262208, n_ctx_train=131072, tied=True, rope_theta=1000000.0, qk_norm=True,
                       swa=1024, post_norms=True),
}
#: (name, shape, type of the 2-D weights); norms are F32 as llama-quantize leaves them
MODELS = [("llama8b-f16", "llama8b", "F16"), ("llama8b-q8_0", "llama8b", "Q8_0"),
          ("llama8b-q4_0", "llama8b", "Q4_0"), ("qwen3_8b-q8_0", "qwen3_8b", "Q8_0"),
          ("gemma3_12b-q8_0", "gemma3_12b", "Q8_0"), ("gemma3_12b-q4_0", "gemma3_12b", "Q4_0")]

#: (case id, model, llama-server flags), in the order they run (most wanted first)
CASES = [
    ("l16-ngl20", "llama8b-f16", "-c 32768 -ngl 20"),
    ("l16-ngl0", "llama8b-f16", "-c 32768 -ngl 0"),
    ("l16-ngl1", "llama8b-f16", "-c 32768 -ngl 1"),
    ("l16-ngl33", "llama8b-f16", "-c 32768 -ngl 33"),
    ("l16-ngl32", "llama8b-f16", "-c 32768 -ngl 32"),
    ("g12q8-ngl99", "gemma3_12b-q8_0", "-c 32768 -ngl 99"),
    ("g12q8-ngl20", "gemma3_12b-q8_0", "-c 32768 -ngl 20"),
    ("l16-np2-q8kv", "llama8b-f16", "-c 65536 -np 2 -ctk q8_0 -ctv q8_0 -ngl 99"),
    ("l8-ngl20", "llama8b-q8_0", "-c 32768 -ngl 20"),
    ("l4-ngl20", "llama8b-q4_0", "-c 32768 -ngl 20"),
    ("l8-ngl0", "llama8b-q8_0", "-c 32768 -ngl 0"),
    ("l4-ngl0", "llama8b-q4_0", "-c 32768 -ngl 0"),
    ("q3q8-ngl10", "qwen3_8b-q8_0", "-c 32768 -ngl 10"),
    ("l16-fit-c512k", "llama8b-f16", "-c 524288"),
    ("l16-fit-c512k-np4", "llama8b-f16", "-c 524288 -np 4"),
    ("q3q8-fit-default", "qwen3_8b-q8_0", ""),
    ("l16-ngl2", "llama8b-f16", "-c 32768 -ngl 2"),
    ("l16-ngl20-ub256", "llama8b-f16", "-c 32768 -ngl 20 -ub 256"),
    ("l16-ngl20-fa-off", "llama8b-f16", "-c 8192 -ngl 20 -fa off"),
    ("l16-ngl20-np2-q8kv", "llama8b-f16", "-c 65536 -np 2 -ctk q8_0 -ctv q8_0 -ngl 20"),
    ("g12q8-ngl0", "gemma3_12b-q8_0", "-c 32768 -ngl 0"),
    ("g12q4-ngl99", "gemma3_12b-q4_0", "-c 32768 -ngl 99"),
    ("g12q4-ngl30", "gemma3_12b-q4_0", "-c 32768 -ngl 30"),
    ("l16-fitt4096-c512k", "llama8b-f16", "-c 524288 -fitt 4096"),
    ("l16-fit-default", "llama8b-f16", ""),
    ("q3q8-ngl99", "qwen3_8b-q8_0", "-c 32768 -ngl 99"),
    ("l16-ngl99", "llama8b-f16", "-c 32768 -ngl 99"),
    ("l16-np2", "llama8b-f16", "-c 32768 -np 2 -ngl 99"),
    ("l8-ngl10", "llama8b-q8_0", "-c 32768 -ngl 10"),
    ("g12q8-fit-c512k", "gemma3_12b-q8_0", "-c 524288"),
    ("q3q8-ngl0", "qwen3_8b-q8_0", "-c 32768 -ngl 0"),
    ("l16-ngl1-ub2048", "llama8b-f16", "-c 32768 -ngl 1 -ub 2048"),
    # --fit with a target nothing meets: common/fit.cpp goes on at -ngl 0 (or the -ngl given), n_ctx at its minimum
    ("l16-fitt-huge", "llama8b-f16", "-fitt 99999999"),
    ("l16-fitt-huge-ngl10", "llama8b-f16", "-fitt 99999999 -ngl 10"),
]

#: diagnostic runs, not compared with kvgate (flags kvgate does not take): ``(id, model, flags,
#: environment)``. ``GGML_SCHED_DEBUG=2`` with ``-lv 5`` prints every split of the graph
#: reserves with its inputs and every node's backend and size (``ggml-backend.cpp``
#: ``ggml_backend_sched_print_assignments``); ``--no-op-offload`` keeps the ops of CPU layers
#: on the CPU (``common/arg.cpp``).
DIAG = [
    ("l16-ngl0-sched", "llama8b-f16", "-c 32768 -ngl 0 -lv 5", {"GGML_SCHED_DEBUG": "2"}),
    ("l16-ngl0-nooff", "llama8b-f16", "-c 32768 -ngl 0 --no-op-offload", {}),
    ("l16-ngl20-nooff", "llama8b-f16", "-c 32768 -ngl 20 --no-op-offload", {}),
    ("l16-ngl0-c8k", "llama8b-f16", "-c 8192 -ngl 0", {}),
    ("l4-ngl0-c8k", "llama8b-q4_0", "-c 8192 -ngl 0", {}),
]

# --------------------------------------------------------------------------------------------
# 1. headers


def tensors(s: dict, wtype: str) -> list[tuple[str, tuple[int, ...], str]]:
    """``(name, ne, type)`` of every tensor llama.cpp's loader creates for the shape (ne in
    ggml order: ``ne[0]`` the row); ``src/models/{llama,qwen3,gemma3}.cpp`` load_arch_tensors."""
    E, V, F, D = s["n_embd"], s["n_vocab"], s["n_ff"], s["head_dim"]
    q, kv = s["n_head"] * D, s["n_head_kv"] * D
    out = [("token_embd.weight", (E, V), wtype), ("output_norm.weight", (E,), "F32")]
    if not s["tied"]:
        out.append(("output.weight", (E, V), wtype))
    for i in range(s["n_layer"]):
        p = f"blk.{i}."
        out += [(p + "attn_norm.weight", (E,), "F32"), (p + "attn_q.weight", (E, q), wtype),
                (p + "attn_k.weight", (E, kv), wtype), (p + "attn_v.weight", (E, kv), wtype),
                (p + "attn_output.weight", (q, E), wtype), (p + "ffn_norm.weight", (E,), "F32"),
                (p + "ffn_gate.weight", (E, F), wtype), (p + "ffn_up.weight", (E, F), wtype),
                (p + "ffn_down.weight", (F, E), wtype)]
        if s.get("qk_norm"):
            out += [(p + "attn_q_norm.weight", (D,), "F32"), (p + "attn_k_norm.weight", (D,), "F32")]
        if s.get("post_norms"):
            out += [(p + "post_attention_norm.weight", (E,), "F32"), (p + "post_ffw_norm.weight", (E,), "F32")]
    return out


def write_header(path: Path, shape: str, wtype: str) -> int:
    """Write the GGUF header of ``shape`` with 2-D weights of ``wtype``; returns the full file size."""
    import gguf
    import numpy as np

    s = SHAPES[shape]
    arch = s["arch"]
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(path.stem)
    w.add_block_count(s["n_layer"])
    w.add_context_length(s["n_ctx_train"])
    w.add_embedding_length(s["n_embd"])
    w.add_feed_forward_length(s["n_ff"])
    w.add_head_count(s["n_head"])
    w.add_head_count_kv(s["n_head_kv"])
    w.add_key_length(s["head_dim"])
    w.add_value_length(s["head_dim"])
    w.add_rope_dimension_count(s["head_dim"])
    w.add_rope_freq_base(s["rope_theta"])
    w.add_layer_norm_rms_eps(1e-6)
    if s.get("swa"):
        w.add_sliding_window(s["swa"])
    w.add_file_type({"F16": 1, "Q8_0": 7, "Q4_0": 2}[wtype])
    n_vocab = s["n_vocab"]
    toks = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    toks += [f"t{i}" for i in range(n_vocab - len(toks))]
    w.add_tokenizer_model("llama")
    w.add_token_list(toks)
    w.add_token_scores([0.0] * 3 + [-1000.0] * 256 + [-1.0] * (n_vocab - 259))
    w.add_token_types([2, 3, 3] + [6] * 256 + [1] * (n_vocab - 259))
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    for name, ne, ty in tensors(s, wtype):
        qt = gguf.GGMLQuantizationType[ty]
        bs, ts = gguf.GGML_QUANT_SIZES[qt]
        n = 1
        for x in ne[1:]:
            n *= x
        nbytes = n * (ne[0] // bs) * ts
        w.add_tensor_info(name, tuple(reversed(ne)), np.dtype(np.float32), nbytes, raw_dtype=qt)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_ti_data_to_file()
    fout = w.fout[0]
    w.write_padding(fout, fout.tell())
    start = fout.tell()
    data = sum(gguf.GGUFWriter.ggml_pad(ti.nbytes, w.data_alignment) for ti in w.tensors[0].values())
    fout.close()
    return start + data


def cmd_headers(a: argparse.Namespace) -> int:
    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    lines = []
    for name, shape, ty in MODELS:
        size = write_header(d / f"{name}.gguf", shape, ty)
        lines.append(f"{name}.gguf {size}")
        print(name, size, f"{size / 2**30:.2f} GiB")
    (d / "SIZES.txt").write_text("\n".join(lines) + "\n")
    return 0


def extend(d: Path) -> None:
    """Each header to its full size, sparse (``truncate``: the tensor data reads as zeros)."""
    for line in (d / "SIZES.txt").read_text().split("\n"):
        if line.strip():
            name, size = line.split()
            with open(d / name, "r+b") as f:
                f.truncate(int(size))


# --------------------------------------------------------------------------------------------
# 2. run (device)


def gpu_used_by(pid: int) -> int | None:
    """MiB nvidia-smi charges to ``pid`` (``--query-compute-apps``), ``None`` if not listed."""
    try:
        r = subprocess.run(["nvidia-smi", "--query-compute-apps=pid,used_memory", "--format=csv,noheader,nounits"],
                           capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    for line in r.stdout.splitlines():
        p = [x.strip() for x in line.split(",")]
        if len(p) == 2 and p[0] == str(pid):
            return int(p[1])
    return None


def host_rss(pid: int) -> dict:
    """The process's host memory from ``/proc/PID/status`` (VmRSS, RssAnon, RssFile), MiB."""
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            k = line.split(":")[0]
            if k in ("VmRSS", "RssAnon", "RssFile", "RssShmem"):
                out[k] = round(int(line.split()[1]) / 1024, 1)
    except (OSError, ValueError, IndexError):
        pass
    return out


def healthy(port: int) -> bool:
    """Whether llama-server answers ``GET /health`` with 200 (the model is loaded)."""
    import urllib.request

    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as r:  # noqa: S310
            return r.status == 200
    except Exception:  # noqa: BLE001
        return False


def run_case(server: str, gguf_path: Path, flags: str, log: Path, port: int, timeout: float,
             env: dict | None = None) -> dict:
    cmd = [server, "-m", str(gguf_path), "--host", "127.0.0.1", "--port", str(port), "--no-warmup", "-t", "8", "-lv", "4"]  # -lv 4: the buffer lines are INFO of llama.cpp itself
    cmd += flags.split()
    t0 = time.monotonic()
    with open(log, "w") as lf:
        # stdbuf: llama.cpp's log goes through stdio, fully buffered into a file otherwise
        import shutil

        pre = ["stdbuf", "-oL", "-eL"] if shutil.which("stdbuf") else []
        proc = subprocess.Popen([*pre, *cmd], stdout=lf, stderr=subprocess.STDOUT,  # noqa: S603
                                start_new_session=True, env={**os.environ, **(env or {})})
        ready, used, rss = False, None, {}
        while time.monotonic() - t0 < timeout:
            if proc.poll() is not None:
                break
            if healthy(port):
                ready = True
                time.sleep(0.3)
                used = gpu_used_by(proc.pid)
                rss = host_rss(proc.pid)
                break
            time.sleep(0.25)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
    return {"ready": ready, "rc": proc.returncode, "gpu_used_mib": used, "host_rss_mib": rss,
            "seconds": round(time.monotonic() - t0, 1),
            "command": " ".join(["llama-server", "-m", gguf_path.name] + flags.split())}


def cmd_run(a: argparse.Namespace) -> int:
    d, out = Path(a.dir), Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    extend(d)
    deadline = time.monotonic() + a.budget
    res = {}
    every = {c[0]: (c[1], c[2], c[3] if len(c) > 3 else {}) for c in [*CASES, *DIAG]}
    only = [x for x in (a.only or "").split(",") if x]
    skip = {x for x in (a.skip or "").split(",") if x}
    order = only or [c[0] for c in CASES]
    for i, cid in enumerate(order):
        if cid in skip or cid not in every:
            continue
        model, flags, env = every[cid]
        left = deadline - time.monotonic()
        if left < 20:
            res[cid] = {"skipped": "out of time"}
            continue
        r = run_case(a.server, d / f"{model}.gguf", flags, out / f"{cid}.log", 18000 + i, min(60.0, left - 5), env)
        res[cid] = r
        print(cid, json.dumps(r), flush=True)
        (out / "runs.json").write_text(json.dumps(res, indent=1))
    return 0


# --------------------------------------------------------------------------------------------
# 3. compare (here)

BUF = re.compile(r"(\w+)\s+(model|KV|compute|RS) buffer size =\s+([\d.]+) MiB")
BUF_KV = re.compile(r"llama_kv_cache:\s+(\w+) KV buffer size =\s+([\d.]+) MiB")


def read_log(text: str) -> dict:
    """The buffers a llama-server log prints, MiB by device (``CUDA0``, ``CPU``, ``CUDA_Host``, ...)."""
    got: dict = {"model": {}, "kv": {}, "compute": {}}
    for line in text.splitlines():
        m = BUF.search(line)
        if not m:
            continue
        dev, kind, mib = m.group(1), m.group(2), float(m.group(3))
        key = {"model": "model", "KV": "kv", "compute": "compute", "RS": "kv"}[kind]
        got[key][dev] = round(got[key].get(dev, 0.0) + mib, 2)
    m = re.search(r"offloaded (\d+)/(\d+) layers to GPU", text)
    got["offloaded"] = m.group(0) if m else None
    m = re.search(r"n_slots = (\d+), n_ctx_slot = (\d+), kv_unified = '(\w+)'", text)
    got["slots"] = {"n_slots": int(m.group(1)), "n_ctx_slot": int(m.group(2)), "kv_unified": m.group(3)} if m else None
    m = re.search(r"n_seq_max\s*=\s*(\d+)", text)
    got["n_seq_max"] = int(m.group(1)) if m else None
    fit = [ln.strip() for ln in text.splitlines() if "common_fit" in ln or "fit_params" in ln or "llama_params_fit" in ln]
    got["fit_lines"] = fit[-6:]
    m = re.findall(r"n_gpu_layers\s*[=:]\s*(-?\d+)", text)
    got["n_gpu_layers_said"] = m[-1] if m else None
    return got


def kvgate_fit(gguf_path: Path, flags: str) -> dict:
    cmd = [sys.executable, "-m", "kvgate", "fit", str(gguf_path), "--gpu", "H100", "--json"] + flags.split()
    r = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")},  # noqa: S603
                       timeout=300)
    if r.returncode != 0:
        return {"error": (r.stdout + r.stderr).strip()[-400:]}
    return json.loads(r.stdout)


def term(doc: dict, prefix: str) -> tuple[float, float] | None:
    for t in doc.get("terms", []):
        if t["name"].startswith(prefix):
            return t["low"] / MiB, t["high"] / MiB
    return None


def cmd_compare(a: argparse.Namespace) -> int:
    d, out = Path(a.dir), Path(a.out)
    extend(d)
    runs = json.loads((out / "runs.json").read_text())
    rows, table = [], []
    for cid, model, flags in CASES:
        r = runs.get(cid, {})
        if not r or "skipped" in r or not (out / f"{cid}.log").exists():
            continue
        got = read_log((out / f"{cid}.log").read_text(errors="replace"))
        doc = kvgate_fit(d / f"{model}.gguf", flags)
        pred = {"model": term(doc, "model buffer"), "kv": term(doc, "KV buffer"), "compute": term(doc, "compute buffer"),
                "context": term(doc, "CUDA context")}
        parts = [v for v in pred.values() if v is not None]
        pred["process"] = (sum(v[0] for v in parts), sum(v[1] for v in parts)) if len(parts) == 4 else None
        row = {"case": cid, "command": r.get("command"), "ready": r.get("ready"), "logged": got, "gpu_used_mib": r.get("gpu_used_mib"),
               "kvgate": {k: v for k, v in pred.items()}, "kvgate_error": doc.get("error"),
               "kvgate_settings": doc.get("settings"), "kvgate_fits": doc.get("fits"), "kvgate_reason": doc.get("reason"),
               "kvgate_host": doc.get("host_memory")}
        rows.append(row)

        def cell(key: str, dev: str = "CUDA0", got: dict = got, pred: dict = pred) -> str:
            lg = got[key].get(dev, 0.0)
            p = pred[key]
            if p is None:
                return f"{lg:,.2f} / n.a."
            lo, hi = p
            ok = "=" if abs(lo - hi) < 0.01 and abs(lo - lg) < 0.01 else ("in" if lo - 0.01 <= lg <= hi + 0.01 else "MISS")
            ps = f"{lo:,.2f}" if abs(lo - hi) < 0.01 else f"[{lo:,.2f}, {hi:,.2f}]"
            return f"{lg:,.2f} / {ps} {ok}"

        used, proc = r.get("gpu_used_mib"), pred["process"]
        pcell = "n.a." if used is None or proc is None else (
            f"{used:,} / [{proc[0]:,.0f}, {proc[1]:,.0f}] {'in' if proc[0] - 1 <= used <= proc[1] + 1 else 'MISS'}")
        table.append(f"| {cid} | `{flags}` | {cell('model')} | {cell('kv')} | {cell('compute')} | "
                     f"{pcell} | {(got['slots'] or {}).get('n_slots', 'n.a.')} |")
    res = ROOT / "benchmarks/results"
    (res / "llamacpp_gpu_buffers.json").write_text(json.dumps({"llama_cpp": "0c1e57098bba (llama-cpp-python 0.3.36 vendor), CUDA sm_90",
                                                                "rows": rows}, indent=1))
    head = ("| case | flags | model buffer CUDA0 MiB logged / kvgate | KV CUDA0 | compute CUDA0 | process MiB "
            "(nvidia-smi) / kvgate's sum | slots |\n|---|---|---|---|---|---|---|")
    (res / "llamacpp_gpu_buffers.md").write_text(head + "\n" + "\n".join(table) + "\n")
    print(head)
    print("\n".join(table))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("headers")
    h.add_argument("dir")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--server", required=True)
    r.add_argument("--out", required=True)
    r.add_argument("--budget", type=float, default=240.0, help="seconds for all cases")
    r.add_argument("--only", help="comma-separated case ids (of CASES and DIAG), run in this order")
    r.add_argument("--skip", help="comma-separated case ids not to run")
    c = sub.add_parser("compare")
    c.add_argument("dir")
    c.add_argument("out", help="the run's output folder (logs and runs.json)")
    a = ap.parse_args()
    return {"headers": cmd_headers, "run": cmd_run, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
