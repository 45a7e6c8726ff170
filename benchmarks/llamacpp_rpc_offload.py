"""Benchmark (CPU only, not CI): the GPU compute buffer of llama.cpp's graph reserve under
partial offload, from the pinned build's own scheduler and allocator, against ``kvgate fit``.

Why: an H100 llama-server (0c1e57098bba) logged a 320 MiB ``CUDA0 compute buffer`` at every
partial ``-ngl`` (0 included) for Llama-3.1-8B F16 ``-c 32768`` (issue 26). The size comes from
``ggml-backend.cpp``'s scheduler (op offload: a CPU layer's matmuls with 512 tokens run on the
GPU, their weights and the layer's K and V copied into the GPU's compute buffer) and
``ggml-alloc.c``'s allocator, none of which is CUDA code. So the same reserve runs here on an
RPC device (``ggml-rpc`` talking to a local ``ggml-rpc-server``, CPU memory) that offloads like
CUDA: ``benchmarks/llamacpp/rpc_offload_op.patch`` gives it ``ggml-cuda.cu``'s
``offload_op`` (batch ≥ 32). What differs from CUDA: no f16 copies for a quantized cache under
flash attention (CUDA's ``get_alloc_size``; these cases are marked) and the RPC device has no
host buffer type, so ``benchmarks/llamacpp/offload_harness.cpp`` turns off the CPU's repacked
("extra") buffer types to keep the CPU layers' weights in host memory, where CUDA puts them
(``CUDA_Host``, ahead of the extra types in ``llama-model.cpp`` ``make_cpu_buft_list``).

Steps:
1. build: the pinned source (build/h6/llama.cpp.tar.gz) with the patch applied,
   ``cmake -DGGML_RPC=ON -DGGML_CUDA=OFF -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=ON``, targets
   ``llama ggml-rpc ggml-rpc-server``; ``g++ offload_harness.cpp -lllama -lggml -lggml-base``.
2. ``headers DIR``: zero-weight GGUFs (:mod:`llamacpp_gpu_buffers`' writer) of the Llama-3.1-8B
   shape with 4 layers in F16/Q8_0/Q4_0 (the peak is one CPU layer's, the layer count does not
   enter it), extended sparse to full size.
3. ``run DIR --harness H --rpc HOST:PORT``: each case through the harness (a llama-server-like
   context: ``n_outputs_max`` = slots, as ``server_output_limits`` sets it), the
   ``RPC0[…] compute buffer size`` it logs; ``benchmarks/results/llamacpp_rpc_offload.json``.
4. ``compare``: ``kvgate fit`` on the same GGUF and flags (``--engine llama.cpp``; no ``-np``:
   4 slots, unified, as the harness), each logged value inside kvgate's band or not.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RES = ROOT / "benchmarks/results/llamacpp_rpc_offload.json"
MiB = 2**20

#: (name, shape, n_layer, weight type)
MODELS = [("l4x-f16", "llama8b", 4, "F16"), ("l4x-q8_0", "llama8b", 4, "Q8_0"), ("l4x-q4_0", "llama8b", 4, "Q4_0")]

#: (id, model, kvgate/llama-server flags); the harness gets the same as arguments
CASES = [
    ("f16-c32k-ngl0", "l4x-f16", "-c 32768 -ngl 0"),
    ("f16-c32k-ngl2", "l4x-f16", "-c 32768 -ngl 2"),
    ("f16-c32k-ngl4", "l4x-f16", "-c 32768 -ngl 4"),
    ("f16-c8k-ngl0", "l4x-f16", "-c 8192 -ngl 0"),
    ("f16-c8k-ngl0-fa-off", "l4x-f16", "-c 8192 -ngl 0 -fa off"),
    ("f16-c32k-ngl1-ub2048", "l4x-f16", "-c 32768 -ngl 1 -ub 2048"),
    ("f16-c32k-ngl2-ub256", "l4x-f16", "-c 32768 -ngl 2 -ub 256"),
    ("f16-c32k-ngl0-ub16", "l4x-f16", "-c 32768 -ngl 0 -ub 16"),
    ("f16-c32k-ngl0-nooff", "l4x-f16", "-c 32768 -ngl 0 --no-op-offload"),
    ("f16-c32k-ngl2-nooff", "l4x-f16", "-c 32768 -ngl 2 --no-op-offload"),
    ("f16-c64k-np2-q8kv-ngl0", "l4x-f16", "-c 65536 -np 2 -ctk q8_0 -ctv q8_0 -ngl 0"),
    ("f16-c64k-np2-q8kv-ngl2", "l4x-f16", "-c 65536 -np 2 -ctk q8_0 -ctv q8_0 -ngl 2"),
    ("q8-c32k-ngl0", "l4x-q8_0", "-c 32768 -ngl 0"),
    ("q8-c8k-np1-ngl0", "l4x-q8_0", "-c 8192 -np 1 -ngl 0"),
    ("q8-c32k-ngl2", "l4x-q8_0", "-c 32768 -ngl 2"),
    ("q4-c32k-ngl0", "l4x-q4_0", "-c 32768 -ngl 0"),
    ("q4-c32k-ngl2", "l4x-q4_0", "-c 32768 -ngl 2"),
    ("q4-c128k-ngl0", "l4x-q4_0", "-c 131072 -ngl 0"),
]


def harness_args(flags: str) -> list[str]:
    """The harness's positional arguments for llama-server ``flags``: NGL N_CTX N_SEQ UNIFIED FA
    TYPE_K TYPE_V OP_OFFLOAD UBATCH N_OUTPUTS_MAX (no ``-np``: 4 slots, unified)."""
    a = flags.split()
    get = lambda k, d: a[a.index(k) + 1] if k in a else d  # noqa: E731
    np_ = get("-np", None)
    n_seq, unified = (int(np_), 0) if np_ else (4, 1)
    fa = {"on": "1", "off": "0", "auto": "-1"}[get("-fa", "auto")]
    return [get("-ngl", "999"), get("-c", "4096"), str(n_seq), str(unified), fa, get("-ctk", "f16"), get("-ctv", "f16"),
            "0" if "--no-op-offload" in a else "1", get("-ub", "512"), str(n_seq)]


def cmd_headers(a: argparse.Namespace) -> int:
    sys.path.insert(0, str(ROOT / "benchmarks"))
    import llamacpp_gpu_buffers as b  # noqa: PLC0415

    d = Path(a.dir)
    d.mkdir(parents=True, exist_ok=True)
    for name, shape, n_layer, ty in MODELS:
        b.SHAPES[f"{shape}_{n_layer}"] = dict(b.SHAPES[shape], n_layer=n_layer)
        size = b.write_header(d / f"{name}.gguf", f"{shape}_{n_layer}", ty)
        with open(d / f"{name}.gguf", "r+b") as f:
            f.truncate(size)
        print(name, f"{size / 2**30:.2f} GiB (sparse)")
    return 0


def cmd_run(a: argparse.Namespace) -> int:
    out = {"llama_cpp": "0c1e57098bba (llama-cpp-python 0.3.36 vendor) + rpc_offload_op.patch, CPU build",
           "device": "ggml-rpc to a local ggml-rpc-server (CPU memory)", "cases": {}}
    for cid, model, flags in CASES:
        r = subprocess.run([a.harness, str(Path(a.dir) / f"{model}.gguf"), a.rpc, *harness_args(flags)],  # noqa: S603
                           capture_output=True, text=True, timeout=600)
        log = r.stdout + r.stderr
        m = re.search(r"RPC0\[[^\]]*\] compute buffer size =\s+([\d.]+) MiB", log)
        c = re.search(r" CPU compute buffer size =\s+([\d.]+) MiB", log)
        sp = re.search(r"splits = ([\d /]+)", log)
        fa = re.search(r"Flash Attention (enabled|disabled|not supported)", log)
        row = {"model": model, "flags": flags, "rc": r.returncode,
               "gpu_compute_mib": float(m.group(1)) if m else 0.0,  # not printed when ≤ 1 byte
               "cpu_compute_mib": float(c.group(1)) if c else None,
               "splits": sp.group(1).strip() if sp else None, "flash_attn_auto": fa.group(1) if fa else None}
        out["cases"][cid] = row
        print(cid, json.dumps(row), flush=True)
    RES.write_text(json.dumps(out, indent=1) + "\n")
    return 0


def cmd_compare(a: argparse.Namespace) -> int:
    runs = json.loads(RES.read_text())["cases"]
    lines = ["| case | flags | logged MiB | kvgate band MiB | |", "|---|---|---|---|---|"]
    inside = 0
    for cid, row in runs.items():
        r = subprocess.run([sys.executable, "-m", "kvgate", "fit", str(Path(a.dir) / f"{row['model']}.gguf"),  # noqa: S603
                            "--gpu", "H100", "--json", "--engine", "llama.cpp", *row["flags"].split()],
                           capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(ROOT / "src")}, timeout=300)
        doc = json.loads(r.stdout)
        t = next(x for x in doc["terms"] if x["name"].startswith("compute buffer"))
        lo, hi = t["low"] / MiB, t["high"] / MiB
        got = row["gpu_compute_mib"]
        ok = lo - 0.01 <= got <= hi + 0.01
        inside += ok
        row["kvgate_mib"] = [round(lo, 2), round(hi, 2)]
        lines.append(f"| {cid} | `{row['flags']}` | {got:,.2f} | [{lo:,.2f}, {hi:,.2f}] | {'in' if ok else 'MISS'} |")
    doc = json.loads(RES.read_text())
    doc["cases"] = runs
    RES.write_text(json.dumps(doc, indent=1) + "\n")
    print("\n".join(lines))
    print(f"{inside}/{len(runs)} inside")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    h = sub.add_parser("headers")
    h.add_argument("dir")
    r = sub.add_parser("run")
    r.add_argument("dir")
    r.add_argument("--harness", required=True)
    r.add_argument("--rpc", default="127.0.0.1:50077")
    c = sub.add_parser("compare")
    c.add_argument("dir")
    a = ap.parse_args()
    return {"headers": cmd_headers, "run": cmd_run, "compare": cmd_compare}[a.cmd](a)


if __name__ == "__main__":
    raise SystemExit(main())
