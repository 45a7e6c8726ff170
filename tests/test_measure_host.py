"""Host rules on fake /proc and cgroup trees: total = MemTotal or a lower cgroup limit."""

from __future__ import annotations

from kvgate.measure.host import Cgroup, read_meminfo, rss_hwm_bytes

GiB = 2**30


def _v2(tmp_path, max_text: str):
    cg = tmp_path / "sys" / "kube" / "pod1"
    cg.mkdir(parents=True)
    (cg / "memory.current").write_text(f"{3 * GiB}\n")
    (cg / "memory.max").write_text(max_text)
    (cg / "memory.peak").write_text(f"{5 * GiB}\n")
    (cg / "memory.stat").write_text(f"anon 123\ninactive_file {GiB}\nactive_file 7\n")
    proc = tmp_path / "cgroup"
    proc.write_text("0::/kube/pod1\n")
    return Cgroup(root=tmp_path / "sys", proc_cgroup=proc)


def test_cgroup_v2_limit_working_set_and_peak(tmp_path):
    c = _v2(tmp_path, f"{8 * GiB}\n")
    assert (c.kind, c.limit(), c.working_set(), c.peak()) == ("v2", 8 * GiB, 2 * GiB, 5 * GiB)


def test_cgroup_v2_unlimited(tmp_path):
    assert _v2(tmp_path, "max\n").limit() is None


def test_cgroup_v1(tmp_path):
    cg = tmp_path / "sys" / "memory" / "job"
    cg.mkdir(parents=True)
    (cg / "memory.usage_in_bytes").write_text(f"{4 * GiB}")
    (cg / "memory.limit_in_bytes").write_text("9223372036854771712")  # v1's "no limit"
    (cg / "memory.max_usage_in_bytes").write_text(f"{6 * GiB}")
    (cg / "memory.stat").write_text(f"total_inactive_file {GiB}\n")
    proc = tmp_path / "cgroup"
    proc.write_text("4:memory:/job\n0::/\n")
    c = Cgroup(root=tmp_path / "sys", proc_cgroup=proc)
    assert (c.kind, c.limit(), c.working_set(), c.peak()) == ("v1", None, 3 * GiB, 6 * GiB)


def test_no_cgroup(tmp_path):
    proc = tmp_path / "cgroup"
    proc.write_text("0::/\n")
    c = Cgroup(root=tmp_path / "nothing", proc_cgroup=proc)
    assert (c.kind, c.limit(), c.working_set(), c.peak()) == (None, None, None, None)


def test_meminfo_kib_to_bytes(tmp_path):
    p = tmp_path / "meminfo"
    p.write_text("MemTotal:       24684092 kB\nMemAvailable:   24230568 kB\nHugePages_Total:       0\n")
    assert read_meminfo(p) == {"MemTotal": 24684092 * 1024, "MemAvailable": 24230568 * 1024, "HugePages_Total": 0}


def test_rss_and_hwm_of_self_and_gone():
    import os

    rss, hwm = rss_hwm_bytes(os.getpid())
    assert 0 < rss <= hwm
    assert rss_hwm_bytes(2**22 + 12345) == (None, None)
