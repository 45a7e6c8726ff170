"""Measure llama.cpp's compute buffer with flash attention on and off, on tiny GGUFs.

    PYTHONPATH=src python benchmarks/llamacpp_compute_buffer.py \
        [--server /tmp/tier_llama/build/bin/llama-server] [--out benchmarks/results/llamacpp_compute_buffer.json]

Writes tiny Llama GGUFs (benchmarks/llama_server_live.py's writer, with a larger vocabulary
and the widths below), starts ``llama-server`` on the CPU (``-ngl 0``) once per setting,
reads the ``CPU compute buffer size = X MiB`` line its graph reserve prints
(``src/llama-context.cpp`` ``sched_reserve``, llama.cpp 0c1e57098bba as vendored by
llama-cpp-python 0.3.36) and stops it. The graph and its allocator (``ggml-alloc.c``) are
the backend's; the CPU buffer is what the CUDA buffer is with every layer offloaded, up
to the backends' alignment. Each row also carries kvgate's band
(:func:`kvgate.engines.llamacpp.fit.compute_buffer`) so the check is in the file.
"""

from __future__ import annotations

import argparse
import json
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "benchmarks"))

from llama_server_live import free_port, write_tiny_llama  # noqa: E402

MiB = 2**20
_LINE = re.compile(r"(\w+) compute buffer size =\s+([\d.]+) MiB")
_SEQ = re.compile(r"n_ctx_seq\s+= (\d+)")

#: model shapes (n_embd, n_head, n_head_kv, head_dim, n_ff, extra vocabulary words)
SHAPES = {
    "v4k-h8": dict(n_layer=2, n_embd=256, n_head=8, n_head_kv=2, head_dim=32, n_ff=768, n_ctx_train=32768, words=4000),
    "v32k-h4": dict(n_layer=2, n_embd=256, n_head=4, n_head_kv=4, head_dim=64, n_ff=1024, n_ctx_train=32768, words=32000),
    "v1k-h16-ff4k": dict(n_layer=2, n_embd=512, n_head=16, n_head_kv=4, head_dim=32, n_ff=4096, n_ctx_train=32768, words=1000),
}
#: (shape, -c, -ub, -np) per run; each with -fa on and -fa off
RUNS = [
    ("v4k-h8", 2048, 512, 1), ("v4k-h8", 8192, 512, 1), ("v4k-h8", 8192, 128, 1), ("v4k-h8", 8192, 512, 4),
    ("v32k-h4", 2048, 512, 1), ("v32k-h4", 16384, 512, 1), ("v32k-h4", 4096, 2048, 1),
    ("v1k-h16-ff4k", 4096, 512, 1), ("v1k-h16-ff4k", 16384, 256, 1), ("v1k-h16-ff4k", 1024, 1024, 1),
]


def _words(n: int) -> list[tuple[str, float, int]]:
    return [(f"▁w{i}", -3.0 - i * 1e-4, 1) for i in range(n)]


def measure(server: str, gguf: Path, ctx: int, ub: int, np_: int, fa: str) -> dict[str, float]:
    """Start llama-server, return {backend: MiB} of its compute buffer lines, stop it."""
    cmd = [server, "-m", str(gguf), "-c", str(ctx), "-ub", str(ub), "-b", str(max(ub, 2048)), "-np", str(np_),
           "-fa", fa, "-ngl", "0", "-t", "1", "--no-warmup", "-lv", "4", "--port", str(free_port()), "--host", "127.0.0.1"]
    p = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    out: dict[str, float] = {}
    t0 = time.monotonic()
    try:
        assert p.stdout is not None
        for line in p.stdout:
            m = _LINE.search(line)
            if m:
                out[m.group(1)] = float(m.group(2))
            c = _SEQ.search(line)
            if c:
                out["n_ctx_seq"] = float(c.group(1))
            if "graph: nodes" in line or "graph splits" in line or "server is listening" in line or time.monotonic() - t0 > 120:
                break
    finally:
        p.terminate()
        try:
            p.wait(10)
        except subprocess.TimeoutExpired:
            p.kill()
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--server", default="/tmp/tier_llama/build/bin/llama-server")
    ap.add_argument("--out", default=str(ROOT / "benchmarks/results/llamacpp_compute_buffer.json"))
    a = ap.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        paths = {}
        for name, shape in SHAPES.items():
            cfg = {k: v for k, v in shape.items() if k != "words"}
            paths[name] = write_tiny_llama(Path(tmp) / f"{name}.gguf", cfg=cfg, words=_words(shape["words"]))
        for name, ctx, ub, np_ in RUNS:
            for fa in ("on", "off"):
                got = measure(a.server, paths[name], ctx, ub, np_, fa)
                shape = SHAPES[name]
                rows.append({"shape": name, "n_vocab": 259 + shape["words"], "n_embd": shape["n_embd"],
                             "n_head": shape["n_head"], "n_head_kv": shape["n_head_kv"], "head_dim": shape["head_dim"],
                             "n_ff": shape["n_ff"], "ctx": ctx, "ubatch": ub, "parallel": np_, "flash_attn": fa,
                             "compute_buffer_mib": got})
                print(json.dumps(rows[-1]), flush=True)
    Path(a.out).write_text(json.dumps({"server": a.server, "llama_cpp": "0c1e57098bba (llama-cpp-python 0.3.36 vendor)",
                                       "backend": "CPU, -ngl 0, -t 1, --no-warmup", "rows": rows}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
