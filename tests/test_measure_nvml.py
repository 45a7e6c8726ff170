"""NVML doorway logic on CPU, with a fake pynvml fed recorded H200 values."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _fake_pynvml as fake  # noqa: E402
from kvgate.measure import nvml  # noqa: E402
from kvgate.measure.nvml import (  # noqa: E402
    Nvml,
    NvmlDeviceError,
    NvmlError,
    NvmlGpuLostError,
    NvmlUnavailableError,
    parse_gpu_selection,
)

MiB = 2**20


def test_v2_first_records_reserved_and_used_is_total_minus_free():
    nv = Nvml(module=fake.make(used_fn=lambda i: fake.H200_RESERVED + 4096 * MiB))
    m = nv.memory(nv.handle(0))
    assert m.total_bytes == 143_771 * MiB
    assert m.reserved_bytes == 616 * MiB
    # v2 "used" would be 4096 MiB; kvgate's used is total − free, reserved included.
    assert m.used_bytes == (616 + 4096) * MiB
    assert nv._v2 is True


def test_v1_fallback_when_v2_missing_reserved_not_available():
    nv = Nvml(module=fake.make(v2=False))
    m = nv.memory(nv.handle(0))
    assert m.reserved_bytes is None  # not available, never 0
    assert m.used_bytes == 616 * MiB
    assert nv._v2 is False
    assert nv.used_reader([nv.handle(0)])() == [616 * MiB]


def test_used_reader_one_value_per_gpu():
    nv = Nvml(module=fake.make(gpus=2, used_fn=lambda i: (1 + i) * 1000 * MiB))
    read = nv.used_reader([nv.handle(0), nv.handle(1)])
    assert read() == [1000 * MiB, 2000 * MiB]


def test_lazy_init_once_and_shutdown():
    mod = fake.make()
    nv = Nvml(module=mod)
    assert mod.calls == []  # nothing until the first query
    nv.device_count()
    nv.device_count()
    assert mod.calls == ["init"]
    nv.shutdown()
    nv.shutdown()
    assert mod.shutdowns == 1


@pytest.mark.parametrize("code, cls, words", [
    (fake.NVML_ERROR_LIBRARY_NOT_FOUND, NvmlUnavailableError, "libnvidia-ml"),
    (fake.NVML_ERROR_DRIVER_NOT_LOADED, NvmlUnavailableError, "driver"),
    (fake.NVML_ERROR_NO_PERMISSION, NvmlError, "permission"),
])
def test_init_errors_are_typed_with_hint(code, cls, words):
    nv = Nvml(module=fake.make(init_error=code))
    with pytest.raises(cls) as ei:
        nv.device_count()
    assert ei.value.hint and words in ei.value.hint
    assert ei.value.code == code


def test_pynvml_not_installed(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import raises ImportError
    with pytest.raises(NvmlUnavailableError) as ei:
        Nvml().device_count()
    assert "nvidia-ml-py" in ei.value.hint and "--domain host" in ei.value.hint


def test_missing_gpu_index():
    nv = Nvml(module=fake.make(gpus=1))
    with pytest.raises(NvmlDeviceError, match="GPU 3 does not exist"):
        nv.handle(3)


def test_gpu_lost_mid_run_is_typed():
    state = {"lost": False}
    nv = Nvml(module=fake.make(mem_error=lambda: fake.NVML_ERROR_GPU_IS_LOST if state["lost"] else None))
    read = nv.used_reader([nv.handle(0)])
    assert read() == [616 * MiB]
    state["lost"] = True
    with pytest.raises(NvmlGpuLostError):
        read()


def test_device_info_and_versions():
    nv = Nvml(module=fake.make(cuda=12080))
    d = nv.device_info(0)
    assert (d.name, d.total_bytes, d.reserved_bytes) == ("NVIDIA H200", 143_771 * MiB, 616 * MiB)
    assert d.uuid.startswith("GPU-")
    assert nv.versions() == {"driver_version": "580.95.05", "nvml_version": "13.580.95.05", "cuda_version": "12.8"}


def test_processes_not_supported_is_none_not_empty():
    nv = Nvml(module=fake.make(procs=fake.NVML_ERROR_NOT_SUPPORTED))
    assert nv.processes(nv.handle(0)) is None
    nv = Nvml(module=fake.make(procs=[(1234, 2048 * MiB), (99, None)]))
    assert nv.processes(nv.handle(0)) == {1234: 2048 * MiB, 99: None}


def test_gpu_selection():
    assert parse_gpu_selection("0", 1) == [0]
    assert parse_gpu_selection("1, 0", 2) == [0, 1]
    assert parse_gpu_selection("all", 4) == [0, 1, 2, 3]
    with pytest.raises(NvmlDeviceError):
        parse_gpu_selection("2", 2)
    with pytest.raises(NvmlDeviceError):
        parse_gpu_selection("x", 2)
    with pytest.raises(NvmlDeviceError):
        parse_gpu_selection("all", 0)


def test_cuda_version_text():
    assert nvml.cuda_version_text(12080) == "12.8"
    assert nvml.cuda_version_text(13000) == "13.0"
