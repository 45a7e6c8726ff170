"""vLLM's profile run of a multimodal model's encoder (kvgate.engines.vllm.encoder), the
printing interval of a logged pool (kvgate.engines.vllm.logcheck.meets) and V1's sampler per
release (kvgate.engines.vllm.budget.v1_logits_rule): each rule's numbers from vLLM's code, and
the logs that move."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvgate.atomicio import read_json
from kvgate.engines.vllm.budget import v1_logits_rule
from kvgate.engines.vllm.encoder import encoder_profile, image_smart_resize, video_smart_resize
from kvgate.engines.vllm.logcheck import check_logs, meets, miss_gap, printed_bytes
from kvgate.fit.interval import Interval
from kvgate.fit.release import Release, parse_version
from kvgate.model import read_config

ROOT = Path(__file__).resolve().parent / "data"
FOLDER = ROOT / "fit_logs"
GiB = 2**30
VL = read_config(ROOT / "configs" / "qwen3-vl-30b-a3b-instruct.json")
Q35 = read_config(ROOT / "configs" / "qwen3.5-27b.json")
_BUDGET = re.compile(r"Encoder cache will be initialized with a budget of (\d+) tokens, and profiled with (\d+) (\w+) items")


def test_smart_resize_as_transformers_writes_it():
    # a 9,999,999² image under longest_edge 16,777,216 px at factor 32: 4096², the processor's cap
    assert image_smart_resize(9999999, 9999999, 32, 65536, 16777216) == (4096, 4096)
    # 24,576 frames of it under the video cap 25,165,824 px (t × h × w): the floor of one factor
    assert video_smart_resize(24576, 4096, 4096, 2, 32, 4096, 25165824) == (32, 32)
    assert video_smart_resize(2, 4096, 4096, 2, 32, 4096, 25165824) == (3520, 3520)


def test_qwen3_vl_profile_at_0_11_and_0_12_holds_the_budget_expanded():
    """0.11/0.12 profile 1 video of 12,288 soft tokens counted as int(12,288 × 12.5) = 153,600;
    its output (out_hidden_size 2048 × (1 + 3 deepstack) = 8,192 wide) is copied into
    new_zeros((153,600, 8,192)) and the unexpanded one stays referenced: 2.53 GiB in bf16."""
    for v in ((0, 11, 0), (0, 12, 0)):
        p = encoder_profile(VL, v, max_model_len=65536, max_num_batched_tokens=8192, max_num_seqs=256, dtype_bytes=2)
        assert p is not None
        assert (p.modality, p.items, p.budget, p.out_tokens, p.out_dim) == ("video", 1, 153600, 12288, 8192)
        assert p.held == (153600 + 12288) * 8192 * 2
        assert p.pixels == 12288 * 4 * (3 * 2 * 16 * 16) * 4  # 49,152 patches of 1,536 float32 values
    # from 0.13 the cache holds the outputs as they are, and an image (16,384 tokens) is the larger item
    p = encoder_profile(VL, (0, 13, 0), max_model_len=65536, max_num_batched_tokens=8192, max_num_seqs=256, dtype_bytes=2)
    assert p is not None and (p.modality, p.budget, p.held) == ("image", 16384, 16384 * 8192 * 2)
    # a vision config without its output width, a text model, or a text-only config: nothing modelled
    assert encoder_profile({**VL, "vision_config": {"depth": 27}}, (0, 12, 0), max_model_len=1,
                           max_num_batched_tokens=1, max_num_seqs=1, dtype_bytes=2) is None
    assert encoder_profile({"model_type": "qwen3"}, (0, 12, 0), max_model_len=1, max_num_batched_tokens=1,
                           max_num_seqs=1, dtype_bytes=2) is None


def test_qwen3_5_profile_at_0_19():
    p = encoder_profile(Q35, (0, 19, 0), max_model_len=50000, max_num_batched_tokens=2048, max_num_seqs=1, dtype_bytes=2)
    assert p is not None
    assert (p.modality, p.items, p.budget) == ("image", 1, 16384)
    assert p.held == 16384 * 5120 * 2  # no deepstack: out_hidden_size 5120
    # a batch larger than an image's tokens profiles several images
    p = encoder_profile(Q35, (0, 19, 0), max_model_len=50000, max_num_batched_tokens=40000, max_num_seqs=256,
                        dtype_bytes=2)
    assert p is not None and (p.items, p.budget) == (2, 40000)


def test_the_budget_vllm_prints_is_the_one_kvgate_derives():
    """Every Qwen3-VL-family log's "Encoder cache will be initialized with a budget of N tokens,
    and profiled with K M items" line against encoder_profile at that log's settings."""
    inputs = read_json(FOLDER / "fit_inputs.json", what="inputs")["cases"]
    by = {c.file: c for c in check_logs(FOLDER) if c.predicted is not None}
    seen = 0
    for f, inp in inputs.items():
        if "skip" in inp or f not in by or not str(inp.get("model", "")).endswith(".json"):
            continue
        cfg = read_config(FOLDER / inp["model"])
        m = _BUDGET.search((FOLDER / f).read_text(encoding="utf-8"))
        prof = by[f].terms["profile"]
        p = encoder_profile(cfg, parse_version(inp["release"]), max_model_len=prof["max_model_len"],
                            max_num_batched_tokens=prof["tokens"], max_num_seqs=prof["seqs"], dtype_bytes=2)
        if p is None:
            continue
        assert m is not None, f
        assert (int(m.group(1)), int(m.group(2)), m.group(3)) == (p.budget, p.items, p.modality), f
        seen += 1
    assert seen == 8  # three Qwen3-VL-30B-A3B (0.11, 0.12), four Qwen3.5-27B and a Qwen3.5-9B (0.19)


@pytest.mark.parametrize("f", ["vllm_0.11.0rc2_qwen3-vl-30b-a3b_h100_1.log", "vllm_0.12.0_qwen3-vl-30b-a3b_h100_tp2_1.log",
                               "vllm_0.12.0_qwen3-vl-30b-a3b_h100_tp2_2.log",
                               "vllm_0.19.0_qwen3.5-27b_rtx3090_tp4_eager_2.log"])
def test_the_logs_the_encoder_cache_moves_are_inside(f):
    c = check_logs(FOLDER, only=f)[0]
    assert c.inside, (c.printed, c.predicted)
    src = c.terms["activation peak (profile run)"]
    lo = src["low"]
    # the activation's low end holds the encoder cache: above 2.5 GiB on the 0.11/0.12 Qwen3-VL logs
    assert lo > (2.5 * GiB if "qwen3-vl" in f else 0.2 * GiB)


def test_printing_interval_counts_on_both_sides():
    p = printed_bytes("5.24 GiB")
    assert p == Interval(int(5.235 * GiB), int(5.245 * GiB))
    assert meets(Interval(0, int(5.236 * GiB)), p) and meets(Interval(int(5.244 * GiB), 6 * GiB), p)
    assert not meets(Interval(0, int(5.234 * GiB)), p) and not meets(Interval(int(5.246 * GiB), 6 * GiB), p)
    assert miss_gap(Interval(0, 5 * GiB), p) == p.low - 5 * GiB > 0
    assert miss_gap(Interval(6 * GiB, 7 * GiB), p) == p.high - 6 * GiB < 0
    # a log's case is inside exactly when its printing interval meets the prediction
    for c in check_logs(FOLDER):
        if c.predicted is not None and c.printed_range is not None:
            assert c.inside == meets(c.predicted, c.printed_range), c.file


def test_sampler_path_per_release_from_topk_topp_sampler():
    rel = lambda t: Release("vllm", t, parse_version(t), "test")  # noqa: E731
    # 0.12-0.16: forward_native (PyTorch's sort, b+36 under the torch they pin) unless
    # VLLM_USE_FLASHINFER_SAMPLER=1
    for t in ("0.12.0", "0.13.0", "0.15.0", "0.16.0"):
        assert v1_logits_rule(rel(t), 8192, 256, 2)[:3] == (256, 2 + 36, 2 + 36), t
    # 0.17+: the Triton kernel for 8 rows or more
    for t in ("0.17.0", "0.18.1", "0.19.0"):
        assert v1_logits_rule(rel(t), 8192, 256, 2)[:3] == (256, 2 + 12, 2 + 16), t
        assert v1_logits_rule(rel(t), 8192, 4, 2)[2] == 2 + 49, t  # below 8 rows: PyTorch's sort


def test_sampler_path_as_the_log_prints_it():
    from kvgate.engines.vllm.logcheck import sampler_from_log

    assert sampler_from_log("INFO [topk_topp_sampler.py:50] Using FlashInfer for top-p & top-k sampling.") is True
    assert sampler_from_log("WARNING FlashInfer is not available. Falling back to the PyTorch-native implementation "
                            "of top-p & top-k sampling.") is False
    assert sampler_from_log("no such line") is None
    rel = lambda t: Release("vllm", t, parse_version(t), "test")  # noqa: E731
    # 0.10: FlashInfer's masked copy and softmax, or PyTorch's sort, where the release alone says either
    assert v1_logits_rule(rel("0.10.2"), 8192, 1024, 2)[1:3] == (2 + 12, 2 + 36)
    assert v1_logits_rule(rel("0.10.2"), 8192, 1024, 2, True)[1:3] == (2 + 12, 2 + 16)
    assert v1_logits_rule(rel("0.10.2"), 8192, 1024, 2, False)[1:3] == (2 + 26, 2 + 36)
    # from 0.17 the path without FlashInfer is Triton's for 8 rows or more: nothing changes there
    assert v1_logits_rule(rel("0.19.0"), 8192, 256, 2, False)[1:3] == (2 + 12, 2 + 16)
    # the logs that say it: every 0.8-0.11 log printing the line gets that path's band
    by = {c.file: c for c in check_logs(FOLDER) if c.predicted is not None}
    c = by["vllm_0.10.2_qwen3-30b-a3b_h100_1.log"]  # "FlashInfer is not available"
    t = c.terms["activation peak (profile run)"]
    # 1,024 rows × 151,936 vocab × (36 − 26) B, and the rows' hidden states (2,048 × bf16) at the high end
    assert t["high"] - t["low"] == 1024 * 151936 * 10 + 1024 * 2048 * 2 and c.inside


def test_cli_takes_the_sampler_flag(capsys):
    from kvgate.cli import main

    base = ["fit", str(ROOT / "configs" / "qwen3-8b.json"), "--gpu", "H100 80GB", "--vllm-version", "0.10.2",
            "--weights-bytes", "16GB", "--json"]
    assert main(base + ["--flashinfer-sampler", "yes"]) in (0, 1)
    out = capsys.readouterr().out
    assert "FlashInfer's top-k/top-p" in out
    with pytest.raises(SystemExit) as exc:
        main(base + ["--flashinfer-sampler", "maybe"])
    assert exc.value.code == 2 and "--flashinfer-sampler takes yes or no" in capsys.readouterr().err



def test_encoder_cache_counted_for_a_hub_id_in_the_local_cache(monkeypatch, tmp_path, capsys):
    """A Qwen3-VL named by its Hub id, read from the local Hugging Face cache, gets the same
    encoder-cache term as its config.json given as a file (the whole config.json is found from
    the id, not from the model's source text)."""
    import json

    from tests.test_model_names import fake_cache

    from kvgate.cli import main

    cfg = ROOT / "configs" / "qwen3-vl-30b-a3b-instruct.json"
    fake_cache(tmp_path / "hub", "Qwen/Qwen3-VL-30B-A3B-Instruct", {"config.json": cfg})
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path / "hub"))
    pools = []
    for ref in (str(cfg), "Qwen/Qwen3-VL-30B-A3B-Instruct"):
        main(["fit", ref, "--gpu", "H100", "--engine", "vllm", "--max-model-len", "32768", "--release", "0.13.0",
              "--json"])
        a = json.loads(capsys.readouterr().out)
        assert any("encoder cache held" in t["source"] for t in a["terms"]), ref
        pools.append(a["kv_pool_bytes"])
    assert pools[0] == pools[1]
