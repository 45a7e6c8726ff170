"""vLLM's per-release rules that kvgate fit reads from the engine's code rather than fits:
the V1 `vllm serve` defaults of --max-num-batched-tokens / --max-num-seqs
(kvgate.engines.vllm.flags), the logits and sampler of V1's profile run and the CUDA context in
V1's non-torch memory before 0.9.1 (kvgate.engines.vllm.budget)."""

from __future__ import annotations

import pytest

from kvgate.engines.vllm.budget import CUDA_CONTEXT, activation_term, non_torch_term, v1_logits_rule
from kvgate.engines.vllm.flags import VllmFlags, resolve_vllm_flags
from kvgate.fit.release import Release, parse_version
from kvgate.fit.widths import model_widths
from kvgate.model import load_preset

GiB = 2**30


def _rel(v: str) -> Release:
    return Release("vllm", v, parse_version(v), "given")


def _settings(v: str, gpu: str, total_gib: float, **kw):
    return resolve_vllm_flags(VllmFlags(max_model_len=8192, **kw), _rel(v), cuda_total_bytes=int(total_gib * GiB),
                              gpu_name=gpu, max_position_embeddings=131072)


@pytest.mark.parametrize("v, gpu, total, tokens, seqs", [
    ("0.7.1", "H100 80GB", 79.2, 8192, 1024),   # _override_v1_engine_args: device name h100/h200
    ("0.7.1", "A100 80GB", 79.1, 2048, 1024),   # not H100/H200 by name; max_num_seqs 1024 on every GPU
    ("0.7.3", "L40S", 44.4, 2048, 1024),
    ("0.8.4", "L40S", 44.4, 2048, 256),         # _set_default_args_v1 0.8.4: 256 off H100/H200
    ("0.8.4", "H200", 139.8, 8192, 1024),
    ("0.8.5", "A100 80GB", 79.1, 8192, 1024),   # 0.8.5: device memory ≥ 70 GiB, A100 included
    ("0.9.0", "A100 80GB", 79.1, 2048, 256),    # 0.9: ≥ 70 GiB and not an A100
    ("0.11.0", "H100 80GB", 79.2, 8192, 1024),
    ("0.11.0", "L40S", 44.4, 2048, 256),
])
def test_v1_serve_defaults_per_release(v, gpu, total, tokens, seqs):
    s = _settings(v, gpu, total, use_v1=True)
    assert (s.max_num_batched_tokens, s.max_num_seqs) == (tokens, seqs)
    assert "V1 `vllm serve` default" in s.defaults["max_num_batched_tokens"]


def test_v1_logits_rule_per_release():
    # 0.7.0-0.7.2: logits of every profiled token in the model dtype, no sampler
    assert v1_logits_rule(_rel("0.7.1"), 8192, 1024, 2)[:3] == (8192, 2, 2)
    # 0.7.3: the last token of max_num_seqs requests
    assert v1_logits_rule(_rel("0.7.3"), 8192, 1024, 2)[:3] == (1024, 2, 2)
    # 0.8-0.11: FlashInfer when installed (b+12) or PyTorch's sort (b+36); rows min(seqs, T)
    assert v1_logits_rule(_rel("0.11.0"), 512, 1024, 2)[:3] == (512, 14, 38)
    # 0.12: PyTorch's sort unless opted in, b+36 at it (torch 2.9 pinned; measured on 2.11)
    assert v1_logits_rule(_rel("0.12.0"), 2048, 256, 2)[:3] == (256, 38, 38)
    # PyTorch sorts 2 … 127 rows by a full sort (measured 50.6 B a logit for 64 bf16 rows)
    assert v1_logits_rule(_rel("0.12.0"), 2048, 64, 2)[:3] == (64, 51, 51)
    # 0.11 and before (torch 2.6-2.8, not measured): the sort's band keeps b+26 after it
    assert v1_logits_rule(_rel("0.11.0"), 2048, 256, 2, False)[:3] == (256, 28, 38)
    # 0.19+: Triton top-k/top-p for ≥ 8 rows
    assert v1_logits_rule(_rel("0.19.0"), 2048, 256, 2)[:3] == (256, 14, 18)
    assert v1_logits_rule(_rel("0.19.0"), 2048, 4, 2)[:3] == (4, 14, 51)


def test_v1_activation_is_a_max_not_a_sum():
    """gpt-oss-20b at 0.12 on a 44 GiB card: the sampler (1.8 GiB) dominates the forward
    (0.21 GiB); the peak is the larger of the two plus the kept hidden states."""
    m = load_preset("gpt-oss-20b")
    s = _settings("0.12.0", "L40S", 44.4, use_v1=True)
    t = activation_term(s, model_widths(m.config), _rel("0.12.0"), m.config).value
    logits = 256 * 201_088
    hidden = 2048 * 2880 * 2
    assert t.low >= 38 * logits + hidden and t.high <= 38 * logits + hidden + 2 * 256 * 2880 * 2
    assert t.low < int(1.835 * GiB) < t.high  # printed 1.83 GiB


def test_v1_non_torch_counts_the_cuda_context_before_0_9_1():
    s = _settings("0.8.5", "L40S", 44.4, use_v1=True)
    old, new = non_torch_term(s, _rel("0.8.5")).value, non_torch_term(s, _rel("0.9.1")).value
    assert old.low - new.low == CUDA_CONTEXT.low and old.high - new.high == CUDA_CONTEXT.high
    v0 = _settings("0.7.0", "L40S", 44.4, use_v1=False)
    assert non_torch_term(v0, _rel("0.7.0")).value == non_torch_term(v0, _rel("0.9.1")).value
