"""``fit --tensor-parallel-size auto`` / ``--tp-size auto``: the answer at TP 1, 2, 4, 8, and
DOES NOT FIT naming the smallest TP that fits (kvgate.fit.tp_table; issues 25 and 29)."""

from __future__ import annotations

import json

from kvgate.cli import main
from kvgate.errors import KvgateError
from kvgate.fit.tp_table import render_rows, smallest_fitting, tp_rows


def fit_json(capsys, *argv):
    code = main(["fit", *argv, "--json"])
    return code, json.loads(capsys.readouterr().out)


def test_vllm_does_not_fit_names_the_smallest_tp_that_fits(capsys):
    """llama-3.1-70b (141,107,412,992 B of weights) on one H100: the weights alone are larger
    than the card; each row is the single answer at that TP."""
    args = ("llama-3.1-70b", "--gpu", "H100", "--max-model-len", "32768", "--weights-bytes", "141107412992")
    code, doc = fit_json(capsys, *args)
    assert code == 0 and doc["fits"] == "no"
    table = {r["tp"]: r for r in doc["tp_table"]}
    assert sorted(table) == [2, 4, 8]
    best = min(tp for tp, r in table.items() if r["fits"] == "yes")
    assert f"the smallest tensor parallel size that fits: -tp {best}" in doc["notes"][0]
    _, at = fit_json(capsys, *args, "-tp", str(best))
    assert at["fits"] == "yes" and at["max_concurrency"] == table[best]["max_concurrency"]
    _, below = fit_json(capsys, *args, "-tp", str(best // 2))
    assert below["fits"] != "yes"


def test_vllm_tp_auto_shows_the_smallest_fitting_size(capsys):
    code, doc = fit_json(capsys, "llama-3.1-70b", "--gpu", "H100", "-tp", "auto", "--max-model-len", "32768",
                         "--weights-bytes", "141107412992")
    assert code == 0 and [r["tp"] for r in doc["tp_table"]] == [1, 2, 4, 8]
    best = smallest_fitting_doc(doc)
    assert doc["settings"]["tensor_parallel_size"] == best and doc["fits"] == "yes"
    seqs = [r["max_concurrency"]["low"] for r in doc["tp_table"] if r["fits"] == "yes"]
    assert seqs == sorted(seqs)  # more ranks, more KV per request slot


def smallest_fitting_doc(doc):
    return min(r["tp"] for r in doc["tp_table"] if r["fits"] == "yes")


def test_sglang_tp_auto_table_and_its_refused_sizes(capsys):
    """qwen3-32b (64 heads) on an L40S under SGLang: TP 1 does not hold the weights."""
    code, doc = fit_json(capsys, "qwen3-32b", "--gpu", "L40S", "--engine", "sglang", "--tp-size", "auto",
                         "--context-length", "32768", "--weights-bytes", "65GB")
    assert code == 0 and doc["tp_table"][0]["fits"] == "no"
    assert doc["settings"]["tp_size"] == smallest_fitting_doc(doc) > 1


def test_rows_say_refused_with_the_engines_message():
    def answer_at(tp):
        raise KvgateError(f"--tp-size {tp}: SGLang stops while building the model")
    rows = tp_rows(answer_at, [1, 8])
    assert [r.fits for r in rows] == ["refused", "refused"] and smallest_fitting(rows) is None
    text = render_rows(rows, "--tp-size")
    assert "refused" in text and max(len(ln) for ln in text.splitlines()) <= 100


def test_long_reasons_are_wrapped_whole_under_100_columns():
    reason = "the weights alone are larger than the GPU: more tensor parallel ranks (-tp) or smaller (quantized) weights"

    def answer_at(tp):
        raise KvgateError(reason + f" at {tp}")
    text = render_rows(tp_rows(answer_at, [1, 2]), "-tp")
    assert max(len(ln) for ln in text.splitlines()) <= 100
    assert " ".join(" ".join(text.split()).split("-tp 1: ")[1:]).startswith(reason)
    assert "…" not in text.split("-tp 1: ")[1]
