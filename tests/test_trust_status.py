"""A measurement's own status and exit code are honoured: a file whose run failed gives
no verdict (exit 5) even when a domain inside it says ok."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from kvgate.errors import EXIT_NO_VERDICT, EXIT_OK
from kvgate.measure.measurement import Basis, Measurement, MeasurementError, measurement_file
from kvgate.measure.select import select_measurement

MiB = 2**20
GATE = ["gate", "--model", "qwen3-30b-a3b", "--max-seq", "8192", "--kv-format", "int8-f32scale",
        "--slots-measured", "4", "--slots", "8", "--no-record", "--json"]


def _doc(*, status="ok", exit_code=0, domain_status="ok", domain_exit=0):
    m = Measurement(total_bytes=32607 * MiB, peak_used_bytes=19625 * MiB, idle_used_bytes=936 * MiB,
                    basis=Basis(domain="gpu:0", device_name="NVIDIA GeForce RTX 5090", total_bytes=32607 * MiB,
                                exit_code=domain_exit, sampler="nvml"),
                    status=domain_status)
    return measurement_file([m], status=status, command=["serve"], exit_code=exit_code)


@pytest.mark.parametrize("kw", [{"status": "failed", "exit_code": 1}, {"status": "failed", "exit_code": None},
                                {"status": "ok", "exit_code": 1}, {"status": "interrupted", "exit_code": 130},
                                {"domain_exit": 137}])
def test_a_failed_run_with_an_ok_domain_gives_no_verdict(tmp_path, capsys, kw):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc(**kw)))
    code = main([*GATE, "--measurement", str(path)])
    rec = json.loads(capsys.readouterr().out)
    assert code == EXIT_NO_VERDICT
    assert rec["status"] == "no-verdict" and set(rec["verdicts"].values()) == {"no-verdict"}


def test_an_ok_run_still_decides(tmp_path, capsys):
    path = tmp_path / "m.json"
    path.write_text(json.dumps(_doc()))
    assert main([*GATE, "--measurement", str(path)]) == EXIT_OK
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


def test_the_change_is_said_and_the_exit_code_kept():
    sel = select_measurement(_doc(status="failed", exit_code=1, domain_exit=None))
    assert sel.measurement.status == "failed" and sel.measurement.basis.exit_code == 1
    assert any("gpu:0 is marked ok but the run's status is failed" in w for w in sel.warnings)


@pytest.mark.parametrize("bad", [{"status": "great"}, {"exit_code": "1"}, {"exit_code": True}])
def test_a_malformed_run_status_is_an_error(bad):
    with pytest.raises(MeasurementError):
        select_measurement({**_doc(), **bad})
