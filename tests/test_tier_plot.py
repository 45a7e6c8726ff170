"""``kvgate tier --plot``: a PNG of the curve with the device pool and host tier marked."""

from __future__ import annotations

import json

import numpy as np

from kvgate.cli import main


def _trace(tmp_path, n=300):
    p = tmp_path / "t.jsonl"
    p.write_text("".join(json.dumps({"timestamp": i, "input_length": 1500, "output_length": 1,
                                     "hash_ids": [0, i % 9 + 1, i % 40 + 20]}) + "\n" for i in range(n)))
    return p


def test_plot_writes_a_png_and_names_it(tmp_path, capsys):
    p, png = _trace(tmp_path), tmp_path / "curve.png"
    argv = ["tier", "--trace", str(p), "--model", "llama-3.1-8b", "--device-blocks", "4",
            "--host-capacity", "1GiB", "--plot", str(png), "--json"]
    assert main(argv) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["plot"] == str(png)
    data = png.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 20_000
    import matplotlib.image as mpimg

    img = mpimg.imread(str(png))
    assert img.shape[0] > 400 and img.shape[1] > 700
    # the curve, the device line (green) and the host line (orange) are drawn: those hues are present
    rgb = (img[..., :3] * 255).astype(int).reshape(-1, 3)
    for colour in ((44, 160, 44), (255, 127, 14), (31, 119, 180)):  # C2, C1, C0
        assert np.any(np.abs(rgb - colour).sum(axis=1) < 30), colour
    # an existing file is kept without --force (exit 2, nothing computed), replaced with it
    before = png.stat().st_mtime_ns
    assert main(argv) == 2
    assert png.stat().st_mtime_ns == before
    capsys.readouterr()
    assert main([*argv, "--force", "--cache-model", "sglang"]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] == str(png)


def test_no_plot_without_the_flag(tmp_path, capsys):
    p = _trace(tmp_path)
    assert main(["tier", "--trace", str(p), "--model", "llama-3.1-8b", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["plot"] is None
    assert not list(tmp_path.glob("*.png"))
