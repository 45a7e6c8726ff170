"""Ctrl-C at any point exits 130 without a traceback; a full disk on standard output names
standard output and leaves no half JSON document; ``load --url`` refuses port 0 and a path
(issue 28)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from kvgate.cli import main
from kvgate.engines.loadgen import LoadError, check_url

ENV = {**os.environ, "PYTHONUNBUFFERED": "1"}


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
@pytest.mark.parametrize("delay_s", [0.3, 0.6, 1.0])
def test_ctrl_c_at_any_point_exits_130_without_a_traceback(delay_s):
    """SIGINT while kvgate imports, builds the parser or runs the command (the first few
    tens of ms are the interpreter's own start, before any kvgate code: not kvgate's)."""
    p = subprocess.Popen([sys.executable, "-m", "kvgate", "geometry", "llama-3.1-8b", "--json"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=ENV)
    time.sleep(delay_s)
    p.send_signal(signal.SIGINT)
    out, err = p.communicate(timeout=60)
    if p.returncode == 0:  # finished before the signal: nothing to check
        return
    assert p.returncode == 130, err.decode()
    assert b"Traceback" not in err and b"interrupted" in err


@pytest.mark.parametrize("argv0", ["kvgate", "-m"])
def test_ctrl_c_while_kvgate_imports_exits_130_without_a_traceback(argv0):
    """The handler kvgate/__init__ installs for the command's start: deterministic, the
    signal sent from inside the import phase."""
    code = (f"import sys; sys.argv[0] = {argv0!r}; import kvgate, os, signal, time; "
            "os.kill(os.getpid(), signal.SIGINT); time.sleep(10)")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.returncode == 130 and r.stderr == b"ERROR: interrupted\n"


def test_importing_the_library_leaves_sigint_alone():
    code = "import signal, kvgate; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=60)
    assert r.stdout.strip() == b"True"


def test_keyboard_interrupt_while_building_the_parser_is_130(monkeypatch, capsys):
    import kvgate.cli as cli

    def boom(only=None, **kwargs):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "build_parser", boom)
    assert main(["geometry", "llama-3.1-8b", "--json"]) == 130
    cap = capsys.readouterr()
    assert json.loads(cap.out)["exit_code"] == 130 and "ERROR: interrupted" in cap.err


@pytest.mark.slow  # spawns processes or traces memory: scripts/test skips it, .ci/run runs it
@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_full_disk_on_stdout_names_stdout():
    with open("/dev/full", "w") as full:
        r = subprocess.run([sys.executable, "-m", "kvgate", "geometry", "llama-3.1-8b", "--json"], stdout=full,
                           stderr=subprocess.PIPE, env=ENV, timeout=60)
    err = r.stderr.decode()
    assert r.returncode == 2 and "standard output" in err and "No space left" in err
    assert "Traceback" not in err and "Exception ignored" not in err


def test_failed_write_to_a_file_leaves_no_half_json(tmp_path, monkeypatch):
    """ENOSPC after part of the document: the file is cut back to where it stood."""
    from kvgate import output

    target = tmp_path / "out.json"
    real_write = os.write
    calls = {"n": 0}

    def short_then_full(fd, data):
        calls["n"] += 1
        if calls["n"] == 1:
            return real_write(fd, bytes(data[:7]))
        raise OSError(28, "No space left on device")
    with open(target, "w") as fh:
        fh.write("before\n")
        fh.flush()
        monkeypatch.setattr(output.sys, "stdout", fh)
        monkeypatch.setattr(output.os, "write", short_then_full)
        with pytest.raises(output.StdoutError, match="standard output: No space left"):
            output.emit(True, {"a": "x" * 100}, "")
    assert target.read_text() == "before\n"


def test_stdout_written_whole_to_a_file(tmp_path, monkeypatch):
    from kvgate import output

    target = tmp_path / "out.json"
    with open(target, "w") as fh:
        monkeypatch.setattr(output.sys, "stdout", fh)
        output.emit(True, {"a": [1, 2]}, "")
    assert json.loads(target.read_text()) == {"a": [1, 2]}


@pytest.mark.parametrize("url,needle", [("http://127.0.0.1:0", "port 0"), ("http://127.0.0.1:", "port"),
                                        ("http://127.0.0.1:8080/v1", "path"),
                                        ("http://127.0.0.1:8080/x?y=1", "path"),
                                        ("http://localhost:8080#frag", "fragment")])
def test_load_url_port_zero_and_path_are_refused(url, needle):
    with pytest.raises(LoadError, match=needle):
        check_url(url)


@pytest.mark.parametrize("url,want", [("http://127.0.0.1:8080/", "http://127.0.0.1:8080"),
                                      ("http://[::1]:8080", "http://[::1]:8080")])
def test_load_url_plain_address_is_taken(url, want):
    assert check_url(url) == want
