"""The non-KV bands of kvgate fit from the startup logs (kvgate.engines.vllm.calibrate): the data rule,
the deployed bands holding it, the leave-one-out check, and the log check's new inputs
(printed CUDA total, a class of GPUs, weights from an estimate or another log)."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from kvgate.engines.vllm.budget import BANDS, active_bands, using_bands
from kvgate.engines.vllm.calibrate import Observation, calibrate, contains, data_bands, leave_one_out, observations
from kvgate.engines.vllm.logcheck import _gpu, check_logs
from kvgate.errors import KvgateError
from kvgate.fit.gpus import lookup_gpu
from kvgate.fit.interval import Interval

FOLDER = Path(__file__).parent / "data" / "fit_logs"
GiB, MiB = 2**30, 2**20


@pytest.fixture(scope="module")
def cases():
    return check_logs(FOLDER)


@pytest.fixture(scope="module")
def loo(cases):
    return leave_one_out(FOLDER, cases)


def test_deployed_bands_hold_the_data_bands():
    d = data_bands(FOLDER)
    assert contains(BANDS, d)
    # the data: V0 sampler 25 B/logit (Qwen2.5-7B bitsandbytes, 0.7.3); V1's sampler is the code's
    assert d.c_v0 == (0, 25)
    assert d.k == (Fraction(104, 100), Fraction(105, 100))
    # V0 non-torch printed 0.03 (RTX 4060) … 1.79 GiB (0.6.5 branch), ± 0.005 GiB, whole MiB
    assert d.non_torch_v0 == Interval(25 * MiB, 1839 * MiB)
    # graph pools: 0.13 and 1.62 GiB before 0.21, 0.09 and 0.17 GiB from 0.21
    assert d.cuda_graph == Interval(128 * MiB, 1664 * MiB)
    assert d.cuda_graph_021 == Interval(87 * MiB, 1664 * MiB)


def test_calibrate_rule_on_made_up_observations():
    tw = 10 * GiB
    obs = [
        Observation("a", "activation", Interval(int(10.4 * GiB), int(10.5 * GiB)), False, tw=tw, logits=1),
        Observation("b", "activation", Interval(11 * GiB, 11 * GiB + MiB), False, tw=tw, logits=512 * MiB),
        Observation("c", "non_torch", Interval(300 * MiB, 310 * MiB), False),
        Observation("d", "non_torch", Interval(50 * MiB, 60 * MiB), True),
        Observation("e", "cuda_graph", Interval(200 * MiB, 210 * MiB), True),
    ]
    b = calibrate(obs)
    # K_HI from the small-sampler log a only (b's sampler is large: 4 × 512 Mi × 10 > 10 GiB):
    # 10.4 GiB / 10 GiB -> 1.04 (rounded up to 0.01); K_LO the smallest printed.high / T·w
    # (a: 1.05), capped at K_HI
    assert b.k == (Fraction(104, 100), Fraction(104, 100))
    # C_HI V0 from b: (11 GiB - 1.04 × 10 GiB) / 512 Mi logits = 1.2 -> 2
    assert b.c_v0 == (0, 2)
    # c is V0 before 0.7 (0.6.x's rules count the growth and more: vllm/worker/worker.py 0.6.4
    # determine_num_available_blocks), so its band starts no higher than the growth band's d
    assert b.non_torch_v0 == Interval(50 * MiB, 310 * MiB)
    assert b.non_torch_growth == Interval(50 * MiB, BANDS.non_torch_growth.high)  # the prior's upper end stays
    # a V0 0.7+ figure is a growth-rule figure (memory_profiling), whatever the engine
    g = calibrate([Observation("f", "non_torch", Interval(30 * MiB, 40 * MiB), False, growth=True)])
    assert g.non_torch_growth.low == 30 * MiB and g.non_torch_v0 == BANDS.non_torch_v0
    assert b.cuda_graph == BANDS.cuda_graph  # no pre-0.21 graph pool: the prior
    assert b.cuda_graph_021 == Interval(200 * MiB, 210 * MiB)
    assert calibrate([]) == BANDS


def test_using_bands_changes_the_terms_and_restores():
    narrow = calibrate([Observation("x", "non_torch", Interval(100 * MiB, 101 * MiB), False)])
    assert active_bands() == BANDS
    with using_bands(narrow):
        assert active_bands().non_torch_v0 == Interval(100 * MiB, 101 * MiB)
    assert active_bands() == BANDS


def test_observations_come_from_printed_terms(cases):
    obs = observations(FOLDER, cases)
    kinds = {(o.term, o.file) for o in obs}
    assert ("non_torch", "vllm_0.7.3-dev_qwen2.5-7b-bnb4_rtx4060_1.log") in kinds
    assert ("cuda_graph", "vllm_2026-08_qwen3.8-27b-fp8_rtx5090_tp2_1.log") in kinds
    # an --enforce-eager log's 0 GiB graph pool is not a graph pool
    assert ("cuda_graph", "vllm_2025-12_gpt-oss-20b_44gib-gpu_1.log") not in kinds
    assert sum(o.term == "activation" for o in obs) == 9  # the V0 0.7.3 A100 40GB log added a ninth


def test_leave_one_out_uses_bands_without_the_log(loo):
    # the 0.6.5 branch's 1.79 GiB non-torch is the only figure of 0.6.5-0.6.6's rule
    # (memory_profiling(baseline_memory_in_bytes=...): torch memory other than the weights
    # counts); the 0.35 GiB of 0.6.4 (vllm/worker/worker.py: all memory in use less torch's
    # allocation) is another quantity, its own band, so without the log its rule has the prior.
    # (Before the rules were told apart, the 0.6.4 figures set its band to 0.36 GiB: a miss.)
    case, bands = loo["vllm_0.6.5-dev_llama-3-8b_h100_1.log"]
    assert bands.non_torch_v0 == BANDS.non_torch_v0
    assert bands.non_torch_v064.high < 400 * MiB
    assert case.inside is True
    # a log that prints no non-KV term sees the bands of all logs
    case, bands = loo["vllm_0.19.0_gpt-oss-20b_a100_1.log"]
    assert bands == data_bands(FOLDER) and case.inside
    # 63 of 64: the one in-sample miss (tests/test_fit_logs.py); the 0.6.5 log is inside
    # since its non-torch figure is read by its own release's rule
    assert sum(bool(c.inside) for c, _ in loo.values()) == 63 and len(loo) == 64


def test_log_check_gpu_from_the_printed_total_or_a_class(tmp_path):
    (tmp_path / "a.log").write_text("total_gpu_memory (8.00GiB) x gpu_memory_utilization (0.70)\n")
    g = _gpu(tmp_path, {"file": "a.log"}, {"gpu": "RTX 4060", "cuda_total_printed": "total_gpu_memory (8.00GiB)"})
    assert g.cuda_total.contains(8 * GiB) and g.cuda_total.width < 11 * MiB
    with pytest.raises(KvgateError, match="not in the log"):
        _gpu(tmp_path, {"file": "a.log"}, {"gpu": "x", "cuda_total_printed": "total_gpu_memory (9.00GiB)"})
    hull = _gpu(tmp_path, {"file": "a.log"}, {"gpu": ["H100 80GB", "A100 80GB"]})
    h100, a100 = lookup_gpu("H100 80GB").cuda_total, lookup_gpu("A100 80GB").cuda_total
    assert "or" in hull.name and hull.cuda_total == Interval(min(h100.low, a100.low), max(h100.high, a100.high))
    assert hull.cuda_total.width > max(h100.width, a100.width)


def test_weights_without_a_weights_line_are_labelled(cases):
    by = {c.file: c for c in cases}
    est = by["vllm_2025-07_qwen3-235b-a22b-fp8_h100_tp4_1.log"]
    assert est.weights_from == "estimate" and any("ESTIMATE" in p for p in est.presumed)
    other = by["vllm_0.11.0_gpt-oss-120b_h100_1.log"]
    assert other.weights_from == "other log" and any("vllm_0.10.1_gpt-oss-120b_h100_1.log" in p for p in other.presumed)


def test_v1_activation_observation_does_not_move_k():
    """V1's peak is max(forward, logits + sampler) with the sampler from the code: a V1 log
    whose sampler dominates says nothing about K (it would give K ≈ 8.8 for gpt-oss-20b)."""
    tw = 10 * GiB
    v0 = Observation("a", "activation", Interval(int(10.4 * GiB), int(10.5 * GiB)), False, tw=tw, logits=1)
    v1 = Observation("g", "activation", Interval(int(1.825 * GiB), int(1.835 * GiB)), True,
                     tw=int(0.2063 * GiB), logits=51_478_528)
    assert calibrate([v0, v1]).k == calibrate([v0]).k


def test_non_torch_band_follows_the_release_rule(cases):
    """V0 0.7+ and V1 0.9.1+ measure non-torch memory as growth since the first snapshot
    (vllm/utils memory_profiling); V0 0.6.x by its own rules (the V0-before-0.7 band)."""
    from kvgate.engines.vllm.budget import CUDA_CONTEXT, non_torch_band

    assert non_torch_band(False, (0, 7, 3))[0] == BANDS.non_torch_growth
    assert non_torch_band(True, (0, 12, 0))[0] == BANDS.non_torch_growth
    assert "0.6.4" in non_torch_band(False, (0, 6, 4))[1] and non_torch_band(False, (0, 6, 4))[0] == BANDS.non_torch_v064
    assert "0.6.5" in non_torch_band(False, (0, 6, 5))[1] and non_torch_band(False, (0, 6, 6))[0] == BANDS.non_torch_v0
    assert non_torch_band(True, (0, 8, 5))[0] == BANDS.non_torch_growth + CUDA_CONTEXT
    obs = {o.file: o for o in observations(FOLDER, cases) if o.term == "non_torch"}
    assert obs["vllm_0.7.3-dev_qwen2.5-7b-bnb4_rtx4060_1.log"].growth is True   # V0 0.7.3, RTX 4060, 0.03 GiB
    assert obs["vllm_2025-12_gpt-oss-20b_44gib-gpu_1.log"].growth is True       # V1 0.12, L40S, 0.04 GiB
    assert obs["vllm_0.6.4_llama-3.1-8b_rtx3090_1.log"].growth is False        # 0.6.4 counts the context too
    assert obs["vllm_0.6.4_llama-3.1-8b_rtx3090_1.log"].upto_064 is True
    assert obs["vllm_0.6.5-dev_llama-3-8b_h100_1.log"].upto_064 is False     # 0.6.5's memory_profiling
    d = data_bands(FOLDER)
    # 0.6.4: 0.35 GiB twice (RTX 3090), from the growth band's low end (it counts the growth too)
    assert d.non_torch_v064 == Interval(25 * MiB, 364 * MiB)
    # growth-rule figures 0.03 (RTX 4060) … 0.16 GiB (H100), ± printing, whole MiB; the prior's upper end
    assert d.non_torch_growth == Interval(25 * MiB, BANDS.non_torch_growth.high)
    assert max(o.printed.high for o in obs.values() if o.growth) < 170 * MiB


def test_unquantized_text_estimate_takes_the_narrow_band_and_holds_the_printed_weights():
    """vLLM allocates parameters × dtype (+ the rotary cache and padding): an unquantized text
    model's estimate from its config gets [1.00, 1.02]; every log of such a model prints weights
    inside it. Quantized (gpt-oss MXFP4) and multimodal (Gemma 4) configs keep [0.85, 1.15]."""
    from kvgate.atomicio import read_json
    from kvgate.engines.vllm.budget import WEIGHTS_ESTIMATE, WEIGHTS_ESTIMATE_PLAIN, weights_term
    from kvgate.engines.vllm.logcheck import printed_bytes

    est = {c.file: c for c in check_logs(FOLDER, weights="estimate")}
    man = {e["file"]: e for e in read_json(FOLDER / "manifest.json")}
    plain = ["vllm_0.6.4_llama-3.1-8b_rtx3090_1.log", "vllm_0.6.5-dev_llama-3-8b_h100_1.log",
             "vllm_0.8-v0_qwen3-0.6b_h100_1.log", "vllm_0.7-v0_qwen2.5-32b_l40s_tp2_1.log",
             "vllm_0.7-v0_deepseek-r1-distill-qwen-14b_rtx4090_tp2_1.log"]
    for f in plain:
        w = est[f].terms["weights"]
        assert abs(w["high"] / w["low"] - float(WEIGHTS_ESTIMATE_PLAIN[1])) < 1e-6, f
        p = printed_bytes(man[f]["weights"])  # the printed figure, its middle inside the band
        assert w["low"] <= (p.low + p.high) // 2 <= w["high"], f
    for f in ("vllm_0.19.0_gpt-oss-20b_a100_1.log", "vllm_0.19_gemma-4-26b-a4b_a100_1.log"):
        w = est[f].terms["weights"]
        assert abs(w["high"] / w["low"] - float(WEIGHTS_ESTIMATE[1] / WEIGHTS_ESTIMATE[0])) < 1e-6, f
    t = weights_term(100 * GiB, ranks=2, exact=False, source="x", plain=True)
    assert t.value.low == 50 * GiB and "unquantized" in t.source


def test_fit_weights_from_an_unquantized_text_config_take_the_narrow_band():
    """``kvgate fit`` on a config file: vLLM's narrow band for an unquantized text model, the
    wide one for a quantized or multimodal config and under SGLang (its loader not read)."""
    from types import SimpleNamespace

    from kvgate.engines.vllm.engine import weights_for_fit
    from kvgate.model import load_model

    def band(ref: Path, engine: str = "vllm") -> float:
        t = weights_for_fit(SimpleNamespace(weights_bytes=None, model=str(ref), dtype="auto"), 1,
                            load_model(ref), None, engine)
        return t.value.high / t.value.low

    cfgs = FOLDER / "configs"
    assert abs(band(cfgs / "qwen2.5-32b-instruct.json") - 1.02) < 1e-6
    assert abs(band(cfgs / "qwen2.5-32b-instruct.json", "sglang") - 1.15 / 0.85) < 1e-6
    assert abs(band(cfgs / "gpt-oss-120b.json") - 1.15 / 0.85) < 1e-6  # MXFP4 quantization_config
    assert abs(band(FOLDER.parent / "configs" / "gemma-4-26b-a4b.json") - 1.15 / 0.85) < 1e-6  # vision tower
