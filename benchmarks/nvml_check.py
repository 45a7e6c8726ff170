"""What kvgate's NVML doorway reads on this machine, as JSON (no pytest needed).

    PYTHONPATH=src python benchmarks/nvml_check.py [--out F]

Records the values the CPU tests' fake pynvml stands in for (tests/_fake_pynvml.py):
memory v2 (total, free, reserved), v1 "used", device name/UUID, driver/NVML/CUDA
versions, the compute-process listing, and checks used = total − free.
"""

from __future__ import annotations

import argparse
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    from kvgate.measure.nvml import session

    nv = session()
    mod = nv._init()
    out = {"device_count": nv.device_count(), "versions": nv.versions(), "gpus": []}
    for i in range(out["device_count"]):
        h = nv.handle(i)
        m = nv.memory(h)
        v1 = mod.nvmlDeviceGetMemoryInfo(h)
        d = nv.device_info(i)
        procs = nv.processes(h)
        out["gpus"].append({
            "index": i, "name": d.name, "uuid": d.uuid, "v2_memory_info": nv._v2,
            "total_bytes": m.total_bytes, "free_bytes": m.free_bytes, "reserved_bytes": m.reserved_bytes,
            "used_bytes": m.used_bytes, "v1_used_bytes": int(v1.used), "v1_free_bytes": int(v1.free),
            "reader_used_bytes": nv.used_reader([h])(),
            "processes": None if procs is None else {str(k): v for k, v in procs.items()},
            "used_is_total_minus_free": m.used_bytes == m.total_bytes - m.free_bytes,
        })
    text = json.dumps(out, indent=2)
    print(text)
    if a.out:
        with open(a.out, "w") as fh:
            fh.write(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
