"""The real NVML path: runs only where NVML answers (a GPU machine); skipped elsewhere.

On the H200 run (benchmarks/device_run.sh) this checks the doorway against the driver,
not a fake: v2 memory info with ``reserved``, used = total − free, names and versions,
and a short ``kvgate measure`` on the GPU domain.
"""

from __future__ import annotations

import json
import sys

import pytest

from kvgate.cli import main
from kvgate.measure.nvml import Nvml, NvmlError


@pytest.fixture(scope="module")
def nv():
    n = Nvml()
    try:
        if n.device_count() < 1:
            pytest.skip("no GPU")
    except NvmlError as exc:
        pytest.skip(f"NVML not available here: {exc.message}")
    yield n
    n.shutdown()


def test_memory_v2_and_basis(nv):
    h = nv.handle(0)
    m = nv.memory(h)
    assert isinstance(m.total_bytes, int) and 0 <= m.free_bytes <= m.total_bytes
    assert m.used_bytes == m.total_bytes - m.free_bytes
    assert m.reserved_bytes is not None  # drivers since R510 have nvmlDeviceGetMemoryInfo_v2
    assert m.reserved_bytes <= m.used_bytes
    d = nv.device_info(0)
    assert d.name and d.uuid.startswith("GPU-")
    v = nv.versions()
    assert v["driver_version"] and v["cuda_version"] and v["nvml_version"]
    read = nv.used_reader([h])
    assert abs(read()[0] - m.used_bytes) < 2**30
    assert nv.processes(h) is None or isinstance(nv.processes(h), dict)


def test_measure_gpu_domain(nv, tmp_path, capsys):
    out = tmp_path / "m.json"
    rc = main(["measure", "--settle", "0.2s", "--out", str(out), "--json", "--",
               sys.executable, "-c", "import time; time.sleep(0.3)"])
    assert rc == 0
    doc = json.loads(out.read_text())
    d = doc["domains"][0]
    assert doc["status"] == "ok" and d["basis"]["sampler"] == "nvml" and d["basis"]["interval_s"] == 0.001
    assert d["reserved_bytes"] is not None and d["max_gap_s"] < 0.05 and d["samples"] > 100
    capsys.readouterr()
