"""Running a command under the sampler: outcomes, no-verdict cases, interruption, host peak."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

sys.path.insert(0, str(Path(__file__).parent))
import _fake_pynvml as fake  # noqa: E402
from kvgate.cli import main  # noqa: E402
from kvgate.measure.nvml import Nvml  # noqa: E402
from kvgate.measure.runner import CommandNotFoundError, measure_command  # noqa: E402

MiB, GiB = 2**20, 2**30
PY = sys.executable
REPO = Path(__file__).resolve().parents[1]


def _flag_fake(flag: Path, spike: int, **kw):
    """A fake GPU whose used memory is reserved + ``spike`` while ``flag`` exists."""
    return Nvml(module=fake.make(used_fn=lambda i: fake.H200_RESERVED + (spike if flag.exists() else 0), **kw))


def _spike_script(flag: Path, hold_s: float, pidfile: Path | None = None) -> str:
    # pid file written whole (temp + rename): the fake NVML must never read it half-written
    pid = (f"open({str(pidfile)!r} + '.tmp', 'w').write(str(os.getpid())); "
           f"os.replace({str(pidfile)!r} + '.tmp', {str(pidfile)!r});") if pidfile else ""
    return (f"import os, time; {pid} open({str(flag)!r}, 'w').close(); time.sleep({hold_s}); "
            f"os.unlink({str(flag)!r})")


def test_gpu_measurement_exact_peak_with_recorded_values(tmp_path):
    flag, pidfile = tmp_path / "flag", tmp_path / "pid"
    procs = lambda: [(int(pidfile.read_text()), 3 * GiB)] if pidfile.exists() else []  # noqa: E731
    nv = _flag_fake(flag, 4 * GiB, procs=procs)
    o = measure_command([PY, "-c", _spike_script(flag, 0.8, pidfile)], nvml=nv, settle_s=0.1)
    assert o.status == "ok" and o.exit_code == 0 and o.kvgate_exit_code == 0
    m = o.measurements[0]
    assert m.total_bytes == 143_771 * MiB
    assert m.idle_used_bytes == 616 * MiB
    assert m.peak_used_bytes == 616 * MiB + 4 * GiB
    assert m.reserved_bytes == 616 * MiB
    assert 0 < m.peak_time_s < 2 and m.max_gap_s < 0.5
    b = m.basis
    assert (b.domain, b.device_name, b.sampler, b.interval_s, b.exit_code) == ("gpu:0", "NVIDIA H200", "nvml", 0.001, 0)
    assert (b.driver_version, b.cuda_version) == ("580.95.05", "13.0")
    assert b.command[0] == PY and b.start_time and b.end_time
    assert len(m.processes) == 1
    assert (m.processes[0]["pid"], m.processes[0]["peak_used_bytes"]) == (int(pidfile.read_text()), 3 * GiB)
    assert o.document["schema"] == "kvgate.measurement/1" and o.document["status"] == "ok"


def test_per_process_not_available_is_none(tmp_path):
    nv = Nvml(module=fake.make(procs=fake.NVML_ERROR_NOT_SUPPORTED))
    o = measure_command([PY, "-c", "pass"], nvml=nv, settle_s=0.0)
    assert o.measurements[0].processes is None
    assert "not available" in o.measurements[0].extra["processes_note"]


def test_nonzero_exit_is_failed_and_keeps_code():
    o = measure_command([PY, "-c", "import sys; sys.exit(3)"], nvml=Nvml(module=fake.make()), settle_s=0.0)
    assert (o.status, o.exit_code, o.kvgate_exit_code) == ("failed", 3, 5)  # 5: EXIT_NO_VERDICT (README table)
    assert o.measurements[0].status == "failed" and o.measurements[0].basis.exit_code == 3


def test_killed_by_signal_is_failed():
    o = measure_command([PY, "-c", "import os, signal; os.kill(os.getpid(), signal.SIGKILL)"],
                        nvml=Nvml(module=fake.make()), settle_s=0.0)
    assert (o.status, o.exit_code, o.signal_name) == ("failed", 137, "SIGKILL")
    assert o.measurements[0].extra["signal"] == "SIGKILL"


def test_gpu_lost_mid_run_stops_cmd_and_fails(tmp_path):
    flag = tmp_path / "flag"
    nv = Nvml(module=fake.make(mem_error=lambda: fake.NVML_ERROR_GPU_IS_LOST if flag.exists() else None))
    t0 = time.monotonic()
    o = measure_command([PY, "-c", f"import time; open({str(flag)!r}, 'w').close(); time.sleep(60)"],
                        nvml=nv, settle_s=0.0, grace_s=2.0)
    assert time.monotonic() - t0 < 10
    assert o.status == "failed" and "NVML" in o.error
    assert o.measurements[0].extra["error"] == o.error


def test_missing_command_library_and_cli(tmp_path, capsys):
    with pytest.raises(CommandNotFoundError) as ei:
        measure_command(["kvgate-no-such-command-xyz"], nvml=Nvml(module=fake.make()))
    assert ei.value.exit_code == 127 and ei.value.hint
    out = tmp_path / "m.json"
    rc = main(["measure", "--domain", "host", "--out", str(out), "--", "kvgate-no-such-command-xyz", "--flag"])
    err = capsys.readouterr().err
    assert rc == 127
    assert err.startswith("ERROR: command not found: kvgate-no-such-command-xyz") and "HINT:" in err
    assert not out.exists()


def test_existing_output_refused_before_the_command_runs(tmp_path, capsys):
    out, marker = tmp_path / "m.json", tmp_path / "ran"
    out.write_text("{}")
    rc = main(["measure", "--domain", "host", "--settle", "0s", "--out", str(out), "--",
               PY, "-c", f"open({str(marker)!r}, 'w')"])
    assert rc == 2 and not marker.exists() and out.read_text() == "{}"
    assert "exists" in capsys.readouterr().err


def test_host_domain_peak_of_a_known_allocation(tmp_path):
    """A child touching 300 MiB: tree-RSS peak and its VmHWM within [300, 300 + 64] MiB.

    The 64 MiB tolerance covers the Python interpreter itself (about 10-20 MiB RSS).
    """
    n = 300 * MiB
    code = f"import time; b = bytearray({n}); b[::4096] = b'\\x01' * ({n} // 4096); time.sleep(0.4)"
    o = measure_command([PY, "-c", code], domain="host", settle_s=0.1, interval_s=0.005)
    assert o.status == "ok"
    m = o.measurements[0]
    lo, hi = n, n + 64 * MiB
    assert lo <= m.extra["tree_rss_peak_bytes"] <= hi
    assert lo <= m.extra["vmhwm_max_bytes"] <= hi
    assert m.processes and m.processes[0]["vmhwm_bytes"] == m.extra["vmhwm_max_bytes"]
    assert m.basis.domain == "host" and m.total_bytes > n
    # P is system-wide (MemTotal − MemAvailable), which other processes move too: no tight bound.
    assert m.idle_used_bytes is not None and m.peak_used_bytes <= m.total_bytes


def test_measure_cli_json_silent_when_not_tty(tmp_path, capsys):
    out, png = tmp_path / "m.json", tmp_path / "m.png"
    rc = main(["measure", "--domain", "host", "--settle", "0.05s", "--out", str(out), "--plot", str(png),
               "--json", "--", PY, "-c", "import time; time.sleep(0.3)"])
    cap = capsys.readouterr()
    assert rc == 0
    doc = json.loads(cap.out)
    assert doc["status"] == "ok" and doc["measurement_path"] == str(out)
    assert "[kvgate]" not in cap.err and "\r" not in cap.err
    assert json.loads(out.read_text())["domains"][0]["basis"]["domain"] == "host"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_failed_write_leaves_no_partial_file(tmp_path, monkeypatch, capsys):
    out = tmp_path / "m.json"

    def boom(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("kvgate.atomicio.os.replace", boom)
    monkeypatch.setattr("kvgate.atomicio.os.link", boom)  # the exclusive-creation commit
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "tmp"))
    rc = main(["measure", "--domain", "host", "--settle", "0s", "--out", str(out), "--", PY, "-c", "pass"])
    assert rc == 2  # no file anywhere: every rename fails
    err = capsys.readouterr().err
    assert "No space left on device" in err
    # never lost: the document follows on stderr
    doc = json.loads(err[err.index("{"):err.rindex("}") + 1])
    assert doc["schema"] == "kvgate.measurement/1" and doc["exit_code"] == 0
    assert not out.exists() and not list(tmp_path.glob(".m.json*"))  # neither the file nor a temp file


def _gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# SIGHUP (a closed terminal / SSH connection) like SIGTERM (issue 11, fault 3): at b278f86
# kvgate died of it (return code -1), saved nothing and left the workload running.
@pytest.mark.parametrize("sig, rc_expected", [(signal.SIGINT, 130), (signal.SIGTERM, 143), (signal.SIGHUP, 129)])
def test_interrupt_stops_the_process_group_and_saves_partial(tmp_path, sig, rc_expected):
    out, pids = tmp_path / "m.json", tmp_path / "pids"
    child = (
        "import os, subprocess, sys, time\n"
        "g = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
        f"open({str(pids) + '.tmp'!r}, 'w').write(f'{{os.getpid()}} {{g.pid}}')\n"
        f"os.replace({str(pids) + '.tmp'!r}, {str(pids)!r})\n"
        "time.sleep(60)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    p = subprocess.Popen([PY, "-m", "kvgate", "measure", "--domain", "host", "--settle", "0.1s", "--out", str(out),
                          "--", PY, "-c", child], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 20
    while not pids.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert pids.exists(), p.communicate(timeout=5)
    time.sleep(0.2)
    p.send_signal(sig)
    stdout, stderr = p.communicate(timeout=20)
    assert p.returncode == rc_expected, stderr
    doc = json.loads(out.read_text())
    assert doc["status"] == "interrupted"
    assert doc["domains"][0]["extra"]["stopped_by"] == signal.Signals(sig).name
    for pid in map(int, pids.read_text().split()):  # CMD and its child: the whole group
        deadline = time.monotonic() + 5
        while not _gone(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _gone(pid), pid
    assert b"no-verdict" in stdout


class _Tty:
    def __init__(self):
        self.parts = []

    def write(self, s):
        self.parts.append(s)

    def flush(self):
        pass

    def isatty(self):
        return True


@pytest.mark.parametrize("json_flag", [False, True])
def test_status_line_only_on_a_tty_without_json(tmp_path, monkeypatch, capsys, json_flag):
    tty = _Tty()
    monkeypatch.setattr(sys, "stderr", tty)
    args = ["measure", "--domain", "host", "--settle", "0s", "--out", str(tmp_path / "m.json")]
    rc = main(args + (["--json"] if json_flag else []) + ["--", PY, "-c", "import time; time.sleep(0.6)"])
    assert rc == 0
    lines = [p for p in tty.parts if "[kvgate]" in p]
    if json_flag:
        assert lines == []
    else:
        assert lines and all(k in lines[0] for k in (" s  used ", "peak", "headroom"))
        assert tty.parts[-1] == "\r\x1b[2K"  # the line is cleared before the summary


def test_nvml_missing_is_one_line_error_with_hint(tmp_path, monkeypatch, capsys):
    import kvgate.measure.nvml as nvmlmod

    monkeypatch.setattr(nvmlmod, "_DEFAULT", Nvml(module=fake.make(init_error=fake.NVML_ERROR_LIBRARY_NOT_FOUND)))
    out = tmp_path / "m.json"
    rc = main(["measure", "--out", str(out), "--", PY, "-c", "pass"])
    err = capsys.readouterr().err.splitlines()
    assert rc != 0 and not out.exists()
    assert len(err) == 2 and err[0].startswith("ERROR: NVML") and err[1].startswith("HINT:") and "--domain host" in err[1]


def test_a_blocked_nvml_query_is_recorded_as_a_gap_with_its_time(tmp_path):
    # NVML blocks inside the driver while another process initialises CUDA (seen on an
    # H200: ~105 ms); here the fake blocks 150 ms once the command has made its flag.
    flag = tmp_path / "flag"
    state = {"blocked": False}

    def mem_error():
        if flag.exists() and not state["blocked"]:
            state["blocked"] = True
            time.sleep(0.15)
        return None

    nv = Nvml(module=fake.make(mem_error=mem_error))
    o = measure_command([PY, "-c", f"import time; open({str(flag)!r}, 'w').close(); time.sleep(0.4)"],
                        nvml=nv, settle_s=0.05)
    m = o.measurements[0]
    gaps = m.extra["gaps"]
    top = gaps["largest"][0]
    assert top["gap_s"] == m.max_gap_s and 0.15 <= top["gap_s"] < 0.5
    assert 0 < top["at_s"] < 0.5 + 1  # after the start, while the command ran
    assert top["used_before_bytes"] == top["used_after_bytes"] == 616 * MiB
    assert len(gaps["largest"]) == 5 and gaps["over_10x_interval"] >= 1 and gaps["long_gap_threshold_s"] == 0.01
    assert [g["gap_s"] for g in gaps["largest"]] == sorted((g["gap_s"] for g in gaps["largest"]), reverse=True)
    from kvgate.measure.report import render_measurement

    assert f"largest gap {m.max_gap_s * 1e3:.2f} ms at {top['at_s']:.3f} s" in render_measurement(m)
    assert any(f"at {top['at_s']:.3f} s" in n for n in o.notes)
