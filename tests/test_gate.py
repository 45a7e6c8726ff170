"""The gate on the write-up's case; every boundary recomputed from its formula."""

import math
from fractions import Fraction

import pytest

from kvgate.gate import source_case as case
from kvgate.gate.decision import DecisionInputs, decide
from kvgate.gate.fit import fit_marginal
from kvgate.gate.render import render_text
from kvgate.gate.verdict import (
    Gate,
    GateError,
    Scenario,
    paging_candidate,
)
from kvgate.gate.weights_policy import WeightsPolicy
from kvgate.geometry import KVGeometry
from kvgate.model import load_model
from kvgate.units import GiB, MiB

S = 415_236_096  # one int8-f32scale slot of Qwen3-30B-A3B at 8192
T, P, U0 = 32_607 * MiB, 19_625 * MiB, 936 * MiB
M = Fraction(1, 10)


def source_inputs(**kw):
    sc = Scenario(total_bytes=T, peak_bytes=P, idle_bytes=U0, slots_measured=4, slots_target=8,
                  max_seq_measured=8192, max_seq=8192, total_measured_bytes=T)
    sc = Scenario(**{**sc.__dict__, **kw})
    return DecisionInputs(model=load_model("qwen3-30b-a3b"), scenario=sc, kv_format="int8-f32scale")


@pytest.fixture(scope="module")
def rec():
    return decide(source_inputs(), case.measurement())


def test_source_case_table(rec):
    t = {r["key"]: r for r in rec["table"]}
    assert t["slot"]["bytes"] == S == 396 * MiB
    assert t["all_slots"]["bytes"] == 8 * S == 3168 * MiB
    assert t["headroom"]["bytes"] == T - P == 12_982 * MiB
    assert round(float(Fraction(t["headroom"]["share"]["exact"])) * 100, 1) == 39.8
    assert round(float(Fraction(t["slot"]["share"]["exact"])) * 100, 1) == 1.2
    assert round(float(Fraction(t["all_slots"]["share"]["exact"])) * 100, 1) == 9.7  # the write-up printed 9.5
    assert rec["projection"]["kv_only_bytes"] == P + 4 * S == 21_209 * MiB


def test_source_case_verdicts_and_sensitivity(rec):
    assert rec["verdicts"] == {"paging": "not-a-bottleneck", "tiering": "not-a-bottleneck"}
    sens = Fraction(rec["sensitivity"]["value"]["exact"])
    assert rec["sensitivity"]["value"]["float"] == float(sens)  # every ratio: exact and float
    assert sens == Fraction(8 * S, T - P)
    assert round(float(sens) * 100, 1) == 24.4
    assert rec["sensitivity"]["flagged"] is True
    paging = rec["candidates"][0]
    assert paging["reclaim_bytes"] == 8 * S and paging["reclaim_per_slot_bytes"] == S


def test_boundaries_from_formula(rec):
    b = rec["boundaries"]
    limit = math.floor((1 - M) * T)  # ⌊(1 − m)·T⌋ bytes
    assert rec["projection"]["limit_bytes"] == limit == 30_771_825_868
    # card memory: P_target ≤ (1 − m)·T  ⇔  T ≥ P_target / (1 − m)
    t_exact = Fraction(P + 4 * S) / (1 - M)
    assert b["total_bytes"]["value"] == math.ceil(t_exact)
    assert round(b["total_bytes"]["value"] / MiB, 1) == 23_565.6
    assert round(b["total_bytes"]["value"] / GiB, 2) == 23.01
    # max_seq: P + N·S(L) − n·S(8192) ≤ limit, S(L) = 48·1056·L
    l_max = math.floor((limit - P + 4 * S) / (8 * 48 * 1056))
    assert b["max_seq"]["value"] == l_max == 29_233
    # slots: P + (N − n)·S ≤ limit
    n_max = 4 + (limit - P) // S
    assert b["slots"]["value"] == n_max == 28
    # resident weights: slack = limit − P_target, an int of bytes
    slack = limit - (P + 4 * S)
    assert b["weights_delta_bytes"]["value"] == slack == 8_532_577_484
    assert round(slack / MiB, 1) == 8_137.3
    assert round(slack / GiB, 2) == 7.95


def test_boundaries_are_where_the_verdict_actually_flips(rec):
    b = rec["boundaries"]
    at = lambda **kw: decide(source_inputs(**kw))["verdicts"]["paging"]
    assert at(total_bytes=b["total_bytes"]["value"]) == "not-a-bottleneck"
    assert at(total_bytes=b["total_bytes"]["value"] - 1) != "not-a-bottleneck"
    assert at(max_seq=29_233) == "not-a-bottleneck" and at(max_seq=29_234) != "not-a-bottleneck"
    assert at(slots_target=28) == "not-a-bottleneck" and at(slots_target=29) != "not-a-bottleneck"
    w = b["weights_delta_bytes"]["value"]
    assert at(weights_delta_bytes=w) == "not-a-bottleneck" and at(weights_delta_bytes=w + 1) != "not-a-bottleneck"


def test_pays_and_insufficient():
    # 22 GiB: limit 0.9·22,528 = 20,275.2 MiB < P_target 21,209 MiB; minus the whole
    # mirror 3,168 MiB → 18,041 MiB fits → tiering (a full offload reaches its bound)
    # pays; paging's bound is only reached with every slot empty → "pays-if".
    v = decide(source_inputs(total_bytes=22 * GiB))["verdicts"]
    assert v == {"paging": "pays-if", "tiering": "pays"}
    # 19,725 MiB card: limit 17,752.5 MiB < 18,041 MiB even with the full reclaim → insufficient.
    rec = decide(source_inputs(total_bytes=19_725 * MiB))
    assert P + 4 * S - 8 * S > math.floor(Fraction(9, 10) * (19_725 * MiB))
    assert rec["verdicts"]["paging"] == "insufficient"


def test_kv_quant_candidate_bytes():
    inp = source_inputs()
    inp.candidates = ["kv-quant"]
    inp.quant_to = "q4_0"
    rec = decide(inp)
    new = KVGeometry(load_model("qwen3-30b-a3b"), "q4_0").slot_bytes(8192)
    assert new == 48 * 8192 * 2 * (512 // 32 * 18)
    assert rec["candidates"][0]["reclaim_bytes"] == 8 * (S - new)


def test_fit_projection_matches_h200_numbers():
    # Issue 3: on an H200, 4 → 8 sequences grew the peak by 4,689,231,872 B while 4·S = 3,221,225,472 B.
    s_bf16 = 805_306_368
    p4 = 70_000_000_000
    p2 = p4 - 4_689_231_872 // 2
    fit = fit_marginal([(2, p2), (4, p4)])
    assert fit.slope == Fraction(4_689_231_872, 4)
    g = Gate(lambda L: s_bf16 * L // 8192, [paging_candidate(lambda L: s_bf16)], fit=fit)
    sc = Scenario(total_bytes=150 * GiB, peak_bytes=p4, slots_measured=4, slots_target=8,
                  max_seq_measured=8192, max_seq=8192)
    assert g.kv_only_target(sc) == p4 + 4 * s_bf16
    assert g.fit_target(sc) == p4 + 4_689_231_872
    assert g.target(sc) == g.fit_target(sc)  # the larger one decides


def test_fit_needs_two_levels():
    with pytest.raises(GateError):
        fit_marginal([(4, 10), (4, 12)])


def test_half_free_policy_moves_weights_with_the_card():
    pol = WeightsPolicy("half-free", idle_bytes=U0)
    g = Gate(lambda L: S, [paging_candidate(lambda L: S)], policy=pol)
    sc = Scenario(total_bytes=T, peak_bytes=P, idle_bytes=U0, slots_measured=4, slots_target=8,
                  max_seq_measured=8192, max_seq=8192, total_measured_bytes=T)
    t_min = g.boundaries(sc)["total_bytes"]["value"]
    # smallest T with P − W(T0) + W(T) + 4S ≤ 0.9·T, W(T) = (T − U0)//2//2... solved by brute force around t_min
    def fits(t):
        w = lambda tt: max(min((tt - U0) // 2, 24 * GiB), 256 * MiB)
        return P - w(T) + w(t) + 4 * S <= Fraction(9, 10) * t
    assert fits(t_min) and not fits(t_min - 1)
    assert t_min < 23_565 * MiB  # weights shrink with the card, so a smaller card still fits


@pytest.mark.parametrize("bad", [dict(slots_target=-1), dict(max_seq=0), dict(total_bytes=0), dict(margin=Fraction(1))])
def test_scenario_rejects_bad_values(bad):
    with pytest.raises(GateError):
        source_inputs(**bad)


def test_bound_only_paging_states_the_reclaim_it_needs():
    """Issue 11 #7: without a trace, --slots 99 (38.3 GiB of KV on a 32 GiB card) must not
    "pay": the verdict says which share of the mirror paging must free."""
    rec = decide(source_inputs(slots_target=99))
    paging = rec["candidates"][0]
    assert paging["verdict"] == "pays-if" and paging["bound_only"] is True
    # by hand: P_target = P + (99 − 4)·S = 57,245 MiB; limit ⌊0.9·T⌋ = 30,771,825,868 B
    target = P + 95 * S
    assert target == 57_245 * MiB
    need = target - 30_771_825_868
    assert paging["required_reclaim_bytes"] == need
    share = Fraction(need, 99 * S)
    assert paging["required_share_of_reclaim"]["exact"] == f"{share.numerator}/{share.denominator}"
    assert round(float(share) * 100, 1) == 71.2
    text = render_text(rec)
    assert "pays only if paging frees ≥ 71.2% of the mirror" in text and "--trace" in text
    # measured from a trace: the same reclaim is a real "pays"
    inp = source_inputs(slots_target=99)
    inp.measured_reclaim_bytes = 99 * S
    assert decide(inp)["verdicts"]["paging"] == "pays"
    inp.measured_reclaim_bytes = need - 1  # one byte short of what it needs
    assert decide(inp)["verdicts"]["paging"] == "insufficient"


def test_bound_that_cannot_make_it_fit_is_insufficient():
    # resident weights heavier by 12 GiB on the 99-slot target: P_target − N·S =
    # P − 4·S + 12 GiB = 30,329 MiB > ⌊0.9·T⌋ = 29,346.3 MiB: even the whole bound fails.
    rec = decide(source_inputs(slots_target=99, weights_delta_bytes=12 * GiB))
    assert P - 4 * S + 12 * GiB > 30_771_825_868
    assert rec["verdicts"]["paging"] == "insufficient"
    assert "no amount of paging makes it fit" in render_text(rec)
