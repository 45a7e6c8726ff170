"""Start-up of ``kvgate geometry CONFIG --max-seq 8192``: with torch installed and without (issue 16).

Each variant is a Python interpreter (a virtual environment with or without torch) and a
kvgate source tree (``PYTHONPATH``). Every variant runs the same command ``--runs`` times
after one warm-up run; the wall time (monotonic clock around start to exit) and CPU time
(``os.wait4``: user + system of the process) of each run are kept, and min / median / max
printed. The ``--json`` outputs of all variants must be byte-identical (checked: the answer
must not depend on whether torch is installed), and ``-X importtime`` tells whether the
process imported torch.

    python benchmarks/startup_geometry.py --config tests/data/configs/qwen3-8b.json \\
        --variant "after, torch=.venv/bin/python:src" \\
        --variant "after, no torch=/tmp/venv-notorch/bin/python:src" --out startup.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time


def run_once(python: str, src: str, argv: list[str]) -> tuple[float, float, bytes]:
    env = {**os.environ, "PYTHONPATH": src}
    t0 = time.monotonic()
    p = subprocess.Popen([python, "-m", "kvgate", *argv], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    out = p.stdout.read() if p.stdout else b""
    _, status, ru = os.wait4(p.pid, 0)
    wall = time.monotonic() - t0
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{python} -m kvgate {' '.join(argv)} failed with {os.waitstatus_to_exitcode(status)}")
    return wall, ru.ru_utime + ru.ru_stime, out


def imports_torch(python: str, src: str, argv: list[str]) -> bool:
    env = {**os.environ, "PYTHONPATH": src}
    r = subprocess.run([python, "-X", "importtime", "-m", "kvgate", *argv], env=env, capture_output=True, text=True)
    return any(line.startswith("import time:") and line.rsplit("|", 1)[-1].strip() == "torch"
               for line in r.stderr.splitlines())


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="kvgate geometry start-up, with and without torch")
    ap.add_argument("--config", required=True)
    ap.add_argument("--variant", action="append", required=True, help="'NAME=PYTHON:SRC' (repeat)")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    cmd = ["geometry", a.config, "--max-seq", "8192"]
    rows, outputs = [], {}
    for v in a.variant:
        name, _, rest = v.partition("=")
        python, _, src = rest.partition(":")
        run_once(python, src, cmd)  # warm-up: file cache
        walls, cpus = [], []
        for _ in range(a.runs):
            w, c, _ = run_once(python, src, cmd)
            walls.append(w)
            cpus.append(c)
        outputs[name] = run_once(python, src, [*cmd, "--json"])[2]
        row = {"variant": name, "python": python, "src": src, "wall_s": walls, "cpu_s": cpus,
               "wall_median_s": statistics.median(walls), "cpu_median_s": statistics.median(cpus),
               "imports_torch": imports_torch(python, src, cmd)}
        rows.append(row)
        print(f"{name:<28} wall min/median/max {min(walls):.2f} / {row['wall_median_s']:.2f} / {max(walls):.2f} s, "
              f"CPU median {row['cpu_median_s']:.2f} s, imports torch: {row['imports_torch']}", flush=True)
    same = len(set(outputs.values())) == 1
    print(f"--json outputs byte-identical across variants: {same}")
    if a.out:
        with open(a.out, "w") as fh:
            json.dump({"config": a.config, "runs": a.runs, "rows": rows, "json_identical": same,
                       "load_average": os.getloadavg()}, fh, indent=2)
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
