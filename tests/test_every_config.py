"""Every config in ``tests/data/configs/`` through ``fit``, ``weights`` and ``geometry``:
an answer or a clean refusal (``ERROR:`` as one JSON document, exit 2), never a traceback.

A crash such as Gemma-3n's (``intermediate_size`` is a per-layer list, and ``fit`` and
``weights`` raised TypeError) cannot return unnoticed. In-process calls of ``kvgate.cli.main``,
not subprocesses, so the whole set runs in seconds.
"""

from __future__ import annotations

import io
import json
from contextlib import redirect_stderr, redirect_stdout
from pathlib import Path

import pytest

CONFIGS = sorted((Path(__file__).resolve().parent / "data" / "configs").glob("*.json"))

# (label, argv after the config path): vLLM's fit (the default engine), llama.cpp's fit
# (its flags choose the engine), the weights estimate, the geometry at the config's length.
COMMANDS = [
    ("fit-vllm", ["fit", "{cfg}", "--gpu", "H100"]),
    ("fit-llamacpp", ["fit", "{cfg}", "--gpu", "H100", "-c", "8192"]),
    ("weights", ["weights", "{cfg}"]),
    ("geometry", ["geometry", "{cfg}", "--max-seq", "8192"]),
]

CASES = [(c, label, argv) for c in CONFIGS for label, argv in COMMANDS]


@pytest.mark.parametrize("cfg,label,argv", CASES, ids=[f"{c.stem}-{label}" for c, label, _ in CASES])
def test_every_config_answers_or_refuses_cleanly(cfg: Path, label: str, argv: list[str]) -> None:
    from kvgate.cli import main

    out, err = io.StringIO(), io.StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        rc = main([a.format(cfg=cfg) for a in argv] + ["--json"])
    assert "Traceback" not in err.getvalue() and "internal error" not in out.getvalue(), err.getvalue()[-2000:]
    doc = json.loads(out.getvalue())  # one JSON document either way
    if rc == 0:
        assert "error" not in doc
    else:
        assert rc == 2, (rc, doc)
        assert isinstance(doc["error"], str) and doc["error"]


def test_a_config_transformers_rejects_prints_kvgates_lines_only(capsys):
    """FalconH1Config logs an error with the whole config before it raises; kvgate's answer is
    its own ERROR/HINT pair, without transformers' log line."""
    from kvgate.cli import main

    cfg = Path(__file__).resolve().parent / "data" / "configs" / "falcon-h1-0.5b-reconstructed.json"
    main(["weights", str(cfg)])
    err = capsys.readouterr().err
    assert "[transformers]" not in err and "Logging error" not in err
    assert err.startswith("ERROR:") or not err
