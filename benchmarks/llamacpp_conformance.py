"""Benchmark (not CI): llama.cpp's own KV / recurrent bytes for published configs, across
context, sequences, cache types, flash attention, SWA and unified settings, written as the
fixture ``tests/data/llamacpp/conformance.json`` that ``tests/test_conformance_llamacpp.py``
compares kvgate against.

What it does:

1. Compiles ``benchmarks/llamacpp/kv_bytes.cpp`` against a llama.cpp build tree (CPU,
   shared libraries) at the pinned commit (:data:`kvgate.engines.llamacpp.pool.PINNED_COMMIT`).
2. For every config in ``tests/data/configs/`` and ``src/kvgate/model/presets/`` whose
   architecture ``tests/gguf_from_config.py`` can write, writes a metadata-only GGUF into
   ``tests/data/llamacpp/conformance/`` (committed: the test reads the same file).
3. Runs ``kv_bytes`` on each GGUF with every setting of :data:`SETTINGS`: llama.cpp builds
   the model from the metadata (``llama_model_init_from_user``, ``no_alloc``), creates a
   context, and reports ``llama_get_memory_breakdown()``'s context bytes and its
   ``llama_kv_cache`` log lines, or its refusal.
4. Writes the fixture and prints the table for ``benchmarks/RESULTS.md`` (kvgate vs
   llama.cpp per model).

Building llama.cpp (about 5 minutes on 2 cores; not committed)::

    pip download --no-deps --no-binary :all: llama-cpp-python==0.3.36   # vendors llama.cpp
    tar xf llama_cpp_python-0.3.36.tar.gz                                 # at 0c1e57098bba...
    cmake -S llama_cpp_python-0.3.36/vendor/llama.cpp -B build -DGGML_NATIVE=OFF \\
          -DLLAMA_CURL=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_TYPE=Release
    cmake --build build -j2 --target llama

Run: ``.venv/bin/python benchmarks/llamacpp_conformance.py --llama-src SRC --llama-build BUILD``.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "tests"))

from gguf_from_config import ARCH, arch_of, loadable_copy, write_loadable_gguf  # noqa: E402
from kvgate.engines.llamacpp.pool import PINNED_COMMIT  # noqa: E402

DATA = ROOT / "tests" / "data" / "llamacpp"
OUT_GGUF = DATA / "conformance"
FIXTURE = DATA / "conformance.json"

BASE: dict[str, Any] = dict(n_ctx=4096, n_seq=1, type_k="f16", type_v="f16", flash_attn="auto", swa_full=0,
                            kv_unified=0, n_ubatch=512)


def _s(id_: str, **kw: Any) -> dict[str, Any]:
    return {"id": id_, **BASE, **kw}


# Each setting moves one or two of llama.cpp's knobs away from llama-server's defaults.
SETTINGS: list[dict[str, Any]] = [
    _s("base"),
    _s("c32768", n_ctx=32768),
    _s("c5000", n_ctx=5000),                                   # not a multiple of 256
    _s("c131072", n_ctx=131072),
    _s("np4", n_ctx=16384, n_seq=4),                           # per-sequence streams
    _s("np3-c10000", n_ctx=10000, n_seq=3),                    # n_ctx / n_seq not a multiple of 256
    _s("np4-kvu", n_ctx=16384, n_seq=4, kv_unified=1),         # one unified stream
    _s("swa-full-np4", n_ctx=16384, n_seq=4, swa_full=1),
    _s("swa-kvu-np4", n_ctx=16384, n_seq=4, kv_unified=1),
    _s("ub2048", n_ctx=32768, n_ubatch=2048),
    _s("ub64-np2", n_ctx=8192, n_seq=2, n_ubatch=64),
    _s("fa-off", flash_attn="off"),                            # V transposed, padded to the widest layer
    _s("fa-off-np4", n_ctx=16384, n_seq=4, flash_attn="off"),
    _s("fa-on", flash_attn="on"),
    _s("q8_0", type_k="q8_0", type_v="q8_0"),
    _s("q4_0", type_k="q4_0", type_v="q4_0"),
    _s("q4_1", type_k="q4_1", type_v="q4_1"),
    _s("q5_1-q5_0", type_k="q5_1", type_v="q5_0"),
    _s("iq4_nl", type_k="iq4_nl", type_v="iq4_nl"),
    _s("f16-q8_0", type_k="f16", type_v="q8_0"),
    _s("q8_0-f16", type_k="q8_0", type_v="f16"),
    _s("bf16", type_k="bf16", type_v="bf16"),
    _s("f32", type_k="f32", type_v="f32"),
    _s("fa-off-q8_0", type_k="q8_0", type_v="q8_0", flash_attn="off"),  # llama.cpp refuses
]


# real GGUF headers used as they are (a test vocabulary added)
GGUF_SOURCES = [DATA / "deepseek-v2-lite-pre-mla-keys.gguf"]


def configs() -> list[tuple[str, Path]]:
    """(name, path) of the inputs: the configs whose architecture the GGUF writer knows
    (published ones, the presets, the edge cases of ``tests/data/llamacpp/edge/``, the
    published configs of ``tests/data/llamacpp/configs/``) and
    the GGUF headers of :data:`GGUF_SOURCES`."""
    out = []
    for p in sorted((ROOT / "tests" / "data" / "configs").glob("*.json")):
        out.append((p.stem, p))
    for p in sorted((ROOT / "src" / "kvgate" / "model" / "presets").glob("*.json")):
        out.append((f"preset-{p.stem}", p))
    for p in sorted((DATA / "edge").glob("*.json")):
        out.append((f"edge-{p.stem}", p))
    for p in sorted((DATA / "configs").glob("*.json")):  # published configs for llama.cpp only (SOURCES.md)
        out.append((p.stem, p))
    keep = [(p.stem, p) for p in GGUF_SOURCES]
    for name, p in out:
        cfg = json.loads(p.read_text())
        text = cfg["text_config"] if "text_config" in cfg and "num_hidden_layers" not in cfg else cfg
        if text.get("model_type") in ARCH:
            keep.append((name, p))
    return keep


def build_probe(src: Path, build: Path, out: Path) -> Path:
    """Compile kv_bytes.cpp against the llama.cpp tree; returns the binary."""
    lib = build / "bin"
    exe = out / "kv_bytes"
    cmd = ["g++", "-std=c++17", "-O1", f"-I{src}/include", f"-I{src}/ggml/include", f"-I{src}/src",
           str(ROOT / "benchmarks" / "llamacpp" / "kv_bytes.cpp"), f"-L{lib}", "-lllama", "-lggml", "-lggml-base",
           f"-Wl,-rpath,{lib}", "-o", str(exe)]
    subprocess.run(cmd, check=True)
    return exe


def setting_line(s: dict[str, Any]) -> str:
    return (f"{s['n_ctx']} {s['n_seq']} {s['type_k']} {s['type_v']} {s['flash_attn']} {s['swa_full']} "
            f"{s['kv_unified']} {s['n_ubatch']}\n")


def _abort_reason(r: subprocess.CompletedProcess[str]) -> str:
    text = r.stdout + r.stderr
    why = next((x.split(": ", 1)[-1] for x in text.splitlines() if "GGML_ASSERT" in x or "GGML_ABORT" in x),
               None) or next((x for x in text.splitlines() if "error" in x.lower()), f"exit {r.returncode}")
    return why[-300:]


def run_llamacpp(exe: Path, gguf: Path) -> list[dict[str, Any]]:
    """llama.cpp's answer for every setting. One process per GGUF; when llama.cpp aborts
    on a setting (a GGML_ASSERT), that setting is recorded as refused with the assert and
    the rest run in a new process."""
    out: list[dict[str, Any]] = []
    while len(out) < len(SETTINGS):
        todo = SETTINGS[len(out):]
        r = subprocess.run([str(exe), str(gguf)], input="".join(setting_line(s) for s in todo), capture_output=True,
                           text=True, timeout=1800)
        answers = [json.loads(x) for x in r.stdout.splitlines() if x.startswith("{")]
        if len(answers) == 1 and answers[0].get("error") == "model load failed":
            return [answers[0]] * len(SETTINGS)
        out.extend(answers[: len(todo)])
        if len(answers) < len(todo):
            if r.returncode == 0:
                raise RuntimeError(f"{gguf.name}: {len(answers)} answers for {len(todo)} settings")
            out.append({"error": f"aborted: {_abort_reason(r)}", "log": []})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--llama-src", type=Path, default=Path("/work/llama.cpp-build/src"))
    ap.add_argument("--llama-build", type=Path, default=Path("/work/llama.cpp-build/build"))
    ap.add_argument("--only", nargs="*", default=None, help="config names to run (default: all)")
    args = ap.parse_args()
    commit_file = args.llama_src.parent / "COMMIT"
    commit = commit_file.read_text().strip() if commit_file.exists() else PINNED_COMMIT
    if commit != PINNED_COMMIT:
        print(f"llama.cpp tree is at {commit}, kvgate models {PINNED_COMMIT}", file=sys.stderr)
        return 2
    OUT_GGUF.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory() as tmp:
        exe = build_probe(args.llama_src, args.llama_build, Path(tmp))
        for name, path in configs():
            if args.only and name not in args.only:
                continue
            gguf = OUT_GGUF / f"{name}.gguf"
            if path.suffix == ".gguf":
                loadable_copy(path, gguf)
            else:
                write_loadable_gguf(json.loads(path.read_text()), gguf)
            answers = run_llamacpp(exe, gguf)
            for s, a in zip(SETTINGS, answers):
                if "error" in a:
                    a = {"error": a["error"], "log": a.get("log", [])[-6:]}
                else:
                    a = {"context_bytes": a["context_bytes"], "n_ctx": a["n_ctx"], "n_ctx_seq": a["n_ctx_seq"],
                         "log": [x for x in a["log"] if "size =" in x or "creating" in x]}
                rows.append({"model": name, "config": str(path.relative_to(ROOT)), "gguf": gguf.name,
                             "setting": s, "llamacpp": a})
            print(f"{name}: {sum('context_bytes' in r['llamacpp'] for r in rows if r['model'] == name)} sized",
                  file=sys.stderr)
    if args.only and FIXTURE.exists():  # merge into the existing fixture
        old = json.loads(FIXTURE.read_text())["rows"]
        rows = [r for r in old if r["model"] not in set(args.only)] + rows
    doc = {
        "llama_cpp_commit": PINNED_COMMIT,
        "generated_by": "benchmarks/llamacpp_conformance.py",
        "date": dt.date.today().isoformat(),
        "how": "llama_model_init_from_user(metadata, no_alloc) + llama_init_from_model + llama_get_memory_breakdown"
               "() context bytes, CPU build",
        "rows": sorted(rows, key=lambda r: (r["model"], [s["id"] for s in SETTINGS].index(r["setting"]["id"]))),
    }
    tmpf = FIXTURE.with_suffix(".json.tmp")
    tmpf.write_text(json.dumps(doc, indent=1) + "\n")
    tmpf.replace(FIXTURE)
    print_table()
    return 0


def print_table() -> None:
    """The per-model table (kvgate vs llama.cpp) for benchmarks/RESULTS.md."""
    import test_conformance_llamacpp as t

    cols = ["exact", "both refuse", "off", "kvgate refuses", "llama.cpp refuses", "llama.cpp aborts"]
    print("| model (config) | llama.cpp arch | settings | " + " | ".join(cols) + " |")
    print("|---|---|---:|" + "---:|" * len(cols))
    total: dict[str, int] = {}
    by_model: dict[str, dict[str, int]] = {}
    offs: list[str] = []
    for r in t.rows():
        v, lc, kv = t.compare(r)
        by_model.setdefault(r["model"], {}).setdefault(v, 0)
        by_model[r["model"]][v] += 1
        total[v] = total.get(v, 0) + 1
        if v not in ("exact", "both refuse", "llama.cpp aborts"):
            offs.append(f"{t.row_id(r)}: llama.cpp {lc} kvgate {kv}")
    for m, c in by_model.items():
        src = ROOT / next(r["config"] for r in t.rows() if r["model"] == m)
        if src.suffix == ".gguf":
            import gguf as g

            arch = g.GGUFReader(str(src)).fields["general.architecture"].contents()
        else:
            cfg = json.loads(src.read_text())
            text = cfg["text_config"] if "text_config" in cfg and "num_hidden_layers" not in cfg else cfg
            arch = arch_of(text)
        print(f"| {m} | {arch} | {sum(c.values())} | "
              + " | ".join(str(c.get(k, 0)) for k in cols) + " |")
    print(f"| **all** | | **{sum(total.values())}** | " + " | ".join(f"**{total.get(k, 0)}**" for k in cols) + " |")
    for o in offs:
        print("  off:", o, file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
