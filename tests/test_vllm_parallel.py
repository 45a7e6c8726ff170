"""vLLM's parallel layouts (pipeline parallel, decode context parallel, TP/PP from the
process tags) and logs that hold more than one startup.

Every expected figure is worked by hand in the test from the model's public config and
vLLM's own code (read at 0.12.0 and 0.33.0: ``vllm/distributed/utils.py``
``get_pp_indices``; ``vllm/v1/core/kv_cache_utils.py`` ``get_kv_cache_configs``,
``_report_kv_cache_config``; ``vllm/v1/kv_cache_interface.py``
``FullAttentionSpec.max_memory_usage_bytes``), never copied from kvgate's output.
"""

from __future__ import annotations

import pytest

from kvgate.engines import read_engine_log
from kvgate.engines.startups import StartupError
from test_engine_logs import GIB, interval
from test_engine_logs_more import compose, read

# ------------------------------------------------------------------ several startups / services


def _compose_then_plain() -> str:
    """A compose log of one service (Qwen3.6, fp8 KV, 567,978 tokens) with a plain log of
    another server (Kimi-Linear TP 2, 75,840 tokens, no service column) pasted after it."""
    a = "\n".join(compose("vllm-a-1", read("vllm_0.24.0_qwen3.6-35b-a3b_fp8kv.log"))) + "\n"
    return a + read("vllm_kimi-linear_tp2.log")


def test_service_choice_never_reads_a_pasted_log_under_the_services_name():
    p = read_engine_log("two.log", text=_compose_then_plain(), service="vllm-a-1")
    # service vllm-a-1's own pool: 567,978 tokens, fp8, TP 1 — not Kimi's 75,840 at TP 2
    assert p.pool_tokens == 567_978 and p.kv_format == "fp8" and p.tp == 1 and p.max_model_len == 131_072
    assert p.startup["service"] == "vllm-a-1" and len(p.startup["startups"]) == 1
    assert any("no docker compose service column" in n and "not read as service vllm-a-1" in n for n in p.notes)


def test_a_pasted_log_beside_a_compose_service_is_refused_without_a_choice():
    with pytest.raises(StartupError, match="without a docker compose service column") as e:
        read_engine_log("two.log", text=_compose_then_plain())
    assert "--service" in e.value.hint and "vllm-a-1" in str(e.value)


def test_a_pasted_log_beside_a_compose_service_without_a_pool_is_read_alone():
    text = "\n".join(compose("proxy-1", "GET /health 200\nGET /v1/models 200")) + "\n" + read("vllm_kimi-linear_tp2.log")
    p = read_engine_log("two.log", text=text)
    assert p.pool_tokens == 75_840 and p.tp == 2 and (p.pool_bytes.low, p.pool_bytes.high) == interval("2.30", GIB)
    assert p.startup["service"] is None and any("proxy-1 hold no KV pool" in n for n in p.notes)


# ------------------------------------------------------------------ pipeline parallel

from kvgate.engines import crosscheck  # noqa: E402
from kvgate.geometry import VLLM, GeometryError, KVGeometry, vllm_kv_cache_report  # noqa: E402
from kvgate.model.config import spec_from_config  # noqa: E402
from test_engine_logs_more import QWEN3_06B, QWEN3_235B  # noqa: E402

# Qwen3-0.6B: 8 KV heads × head_dim 128 × (K + V) × 2 B (bf16) = 4,096 B per layer and token
Q06_LAYER_TOKEN = 8 * 128 * 2 * 2
# DeepSeek-V2-Lite (MLA): one latent of kv_lora_rank 512 + qk_rope_head_dim 64 = 576 × 2 B per layer and token,
# the same on every TP rank (vLLM replicates the latent)
DSV2_LITE = dict(model_type="deepseek_v2", num_hidden_layers=27, num_attention_heads=16, num_key_value_heads=16,
                 hidden_size=2048, kv_lora_rank=512, qk_rope_head_dim=64, qk_nope_head_dim=128, v_head_dim=128,
                 q_lora_rank=None, torch_dtype="bfloat16", max_position_embeddings=163840, vocab_size=102400,
                 intermediate_size=10944, moe_intermediate_size=1408, n_routed_experts=64, first_k_dense_replace=1)
DSV2_LAYER_TOKEN = (512 + 64) * 2


def test_pp_partition_is_vllms_get_pp_indices():
    from kvgate.engines.vllm.pool import pp_partition  # noqa: PLC0415 - new in this change

    # n // pp each; the n % pp left over goes one each to stages -2, -3, … (never the last first)
    assert pp_partition(61, 4) == [15, 15, 16, 15]  # 61 = 4 × 15 + 1: stage -2
    assert pp_partition(94, 4) == [23, 24, 24, 23]  # 94 = 4 × 23 + 2: stages -2, -3
    assert pp_partition(27, 2) == [14, 13]  # 27 = 2 × 13 + 1: stage -2 is the first
    assert pp_partition(28, 3) == [9, 10, 9]
    assert pp_partition(61, 4, "10,20,16,15") == [10, 20, 16, 15]  # VLLM_PP_LAYER_PARTITION
    with pytest.raises(GeometryError, match="does not match num_hidden_layers=61"):
        pp_partition(61, 4, "10,20,16,16")
    with pytest.raises(GeometryError, match="does not match pp_size=4"):
        pp_partition(61, 4, [30, 31])


def test_geometry_per_rank_is_the_stage_that_sets_the_pool():
    m = spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test")
    g = KVGeometry(m, "bf16", layout=VLLM(pipeline_parallel_size=3))
    # 28 layers over 3 stages: [9, 10, 9]; the 10-layer stage sets the pool
    assert g.bytes_per_token() == 10 * Q06_LAYER_TOKEN == 40_960
    assert g.slot_bytes(8192) == 10 * 8192 * Q06_LAYER_TOKEN == 335_544_320
    r = vllm_kv_cache_report(g, 10 * 2**30, 8192)
    # one block on the 10-layer stage: 16 × 4,096 × 10 = 655,360 B; 10 GiB / 655,360 B = 16,384 blocks
    assert r["pool_bytes_per_block"] == 655_360 and r["num_blocks"] == 10 * 2**30 // 655_360 == 16_384
    assert [s["layers"] for s in r["stages"]] == [9, 10, 9]
    # a request of 8,192 tokens: 512 blocks; 16,384 / 512 = 32.00x; int(32 × 8,192) tokens
    assert r["max_concurrency"] == 32.0 and r["gpu_kv_cache_tokens"] == 262_144
    # the least over stages, per stage budgets: stage 0 (9 layers, 589,824 B a block) with 1 GiB sets it
    r2 = vllm_kv_cache_report(g, 0, 8192, stage_available=[2**30, 10 * 2**30, 10 * 2**30])
    assert r2["num_blocks"] == 2**30 // (16 * Q06_LAYER_TOKEN * 9) == 1_820


def test_mla_tp2_pp2_pool_is_one_stages_not_every_layers():
    m = spec_from_config(DSV2_LITE, name="deepseek-v2-lite", source="test")
    g = KVGeometry(m, "bf16", tp=2, layout=VLLM(pipeline_parallel_size=2))
    # 27 layers over 2 stages: [14, 13]; stage 0's block: 16 × 1,152 × 14 = 258,048 B
    avail = 10 * 2**30
    r = vllm_kv_cache_report(g, avail, 32768)
    assert r["pool_bytes_per_block"] == 16 * DSV2_LAYER_TOKEN * 14 == 258_048
    assert r["num_blocks"] == avail // 258_048 == 41_610
    # every layer on every rank (kvgate before) gave 16 × 1,152 × 27 = 497,664 B a block: 21,575 blocks, 48% low
    assert avail // (16 * DSV2_LAYER_TOKEN * 27) == 21_575
    assert r["gpu_kv_cache_tokens"] == int(41_610 / 2048 * 32768) == 665_760


def _pp_log(nb_text: str, tokens: int, conc: str) -> str:
    """A TP 2 × PP 2 vLLM log in the process-tag form of vLLM 0.11 (no arguments line)."""
    return ("(Worker_PP0_TP0 pid=11) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
            "(Worker_PP0_TP1 pid=12) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 20.00 GiB\n"
            f"(Worker_PP1_TP0 pid=13) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: {nb_text} GiB\n"
            f"(Worker_PP1_TP1 pid=14) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: {nb_text} GiB\n"
            f"(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: {tokens:,} tokens\n"
            "(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens "
            f"per request: {conc}x\n")


def test_pp_log_from_tags_is_checked_stage_by_stage():
    # Qwen3-0.6B, TP 2 (4 KV heads a rank: 2,048 B per layer and token), PP 2: [14, 14] layers;
    # a block on either stage: 16 × 2,048 × 14 = 458,752 B. Stage 1 logged 19.00 GiB:
    # 19 × 2^30 // 458,752 = 44,470 blocks (at the printed centre), fewer than stage 0's 20 GiB gives
    nb = 19 * 2**30 // (16 * 2048 * 14)
    assert nb == 44_470
    # vLLM ≥ 0.20.1 prints int(nb / 512 × 8,192) = nb × 16 tokens, nb / 512 = 86.86x (44,470 / 512 = 86.855…)
    p = read_engine_log("pp.log", text=_pp_log("19.00", nb * 16, "86.86"))
    assert (p.tp, p.pp) == (2, 2)
    cc = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"), kv_format="bf16")
    assert cc["status"] == "agrees" and cc["expected"]["num_blocks"] == nb
    assert cc["pool_bytes"] == nb * 458_752 and "[14, 14]" in cc["lines"][0]
    # every layer on every rank would need 28-layer blocks: the same lines cannot agree then
    one = crosscheck(p, spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test"), kv_format="bf16", pp=1)
    assert one["status"] == "differs"
    assert any("pipeline parallel 2" in c for c in one["causes"])


# ------------------------------------------------------------------ decode context parallel

# Qwen3-235B-A22B, TP 8: 4 KV heads → 1 a rank; 128 × (K + V) × 2 B × 94 layers = 48,128 B a token,
# 16 tokens a block: 770,048 B a block
Q235_BLOCK = 16 * 128 * 2 * 2 * 94


def test_dcp_geometry_gives_the_logged_lines():
    m = spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test")
    # the log (vllm_qwen3-235b-a22b_tp8_dcp2.log): 1,723,584 tokens = 53,862 blocks × 16 × dcp 2
    avail = 53_862 * Q235_BLOCK
    g = KVGeometry(m, "bf16", tp=8, layout=VLLM(decode_context_parallel_size=2, version="0.11.0"))
    r = vllm_kv_cache_report(g, avail, 262_144)
    assert Q235_BLOCK == 770_048 and r["num_blocks"] == 53_862
    assert r["log_lines"] == ["Multiplying the GPU KV cache size by the dcp_world_size 2.",  # as the log
                              "GPU KV cache size: 1,723,584 tokens",
                              "Maximum concurrency for 262,144 tokens per request: 6.57x"]
    # one rank holds cdiv(262,144, 2) = 131,072 tokens of a request: 8,192 blocks
    assert g.slot_bytes(262_144) == 131_072 * Q235_BLOCK // 16 == 6_308_233_216


def test_dcp_log_of_the_concurrency_token_rule_is_checked_as_printed():
    # vLLM ≥ 0.20.1: no "Multiplying" line; tokens = int(nb / cdiv(cdiv(L, 2), 16) × L).
    # L = 100,001: cdiv(100,001, 2) = 50,001 → 3,126 blocks a request; nb = 53,862:
    # 53,862 × 100,001 / 3,126 = 1,723,049.8… → 1,723,049 tokens; 53,862 / 3,126 = 17.23x.
    # budget 53,862 × 770,048 B = 38.628… GiB → "38.63 GiB"
    assert 53_862 * 100_001 // 3_126 == 1_723_049
    text = ("INFO 01-01 00:00:00 [core.py:1] Initializing a V1 LLM engine (v0.20.1) with config: "
            "model='Qwen/Qwen3-235B-A22B', dtype=torch.bfloat16, max_seq_len=100001, tensor_parallel_size=8, "
            "pipeline_parallel_size=1, decode_context_parallel_size=2, kv_cache_dtype=auto\n"
            "INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: 38.63 GiB\n"
            "INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 1,723,049 tokens\n"
            "INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for 100,001 tokens per request: 17.23x\n")
    p = read_engine_log("dcp.log", text=text)
    cc = crosscheck(p, spec_from_config(QWEN3_235B, name="qwen3-235b-a22b", source="test"))
    assert cc["status"] == "agrees" and cc["expected"]["num_blocks"] == 53_862


def test_dcp_with_sliding_window_is_refused_as_vllm_does():
    m = spec_from_config(dict(QWEN3_06B, sliding_window=4096, use_sliding_window=True, max_window_layers=0,
                              layer_types=["sliding_attention"] * 28), name="s", source="test")
    with pytest.raises(GeometryError, match="DCP not support sliding window"):
        KVGeometry(m, "bf16", layout=VLLM(decode_context_parallel_size=2))


# ------------------------------------------------------------------ TP from the tags: the likely cause


def test_likely_cause_never_contradicts_the_tp_the_tags_show():
    # Qwen3-0.6B at TP 4 (Worker_TP0 … Worker_TP3): 2 KV heads a rank, 1,024 B per layer and token × 28
    # = 28,672 B; a block 458,752 B. bf16 at TP 4 has the bytes of fp8 at TP 2: a coincidence
    nb = 18 * 2**30 // 458_752
    tags = "".join(f"(Worker_TP{r} pid={20 + r}) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: "
                   "18.00 GiB\n" for r in range(4))
    text = tags + (f"(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: {nb * 16:,} "
                   "tokens\n(EngineCore_DP0 pid=10) INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for "
                   f"8,192 tokens per request: {nb / 512:.2f}x\n")
    p = read_engine_log("tp.log", text=text)
    assert p.tp == 4 and "process tags" in p.parallel["tp"]["source"]
    m = spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test")
    assert crosscheck(p, m, kv_format="bf16")["status"] == "agrees"
    cc = crosscheck(p, m, kv_format="bf16", tp=2)  # a wrong --tp: the log shows at least 4
    assert cc["status"] == "differs" and cc["causes"][0].startswith("agrees with kv format bf16, tp 4")
    assert not any("tp 2" in c or "tp 1," in c for c in cc["causes"])


# ------------------------------------------------------------------ the command line


def test_cli_geometry_and_fit_take_pp_and_dcp(capsys):
    import json  # noqa: PLC0415

    from kvgate.cli import main  # noqa: PLC0415

    assert main(["geometry", "qwen3-0.6b", "-pp", "3", "--max-model-len", "8192", "--json"]) == 0
    g = json.loads(capsys.readouterr().out)
    # stages [9, 10, 9]: one rank of the 10-layer stage, 10 × 8,192 × 4,096 B
    assert g["slot_bytes"] == 10 * 8192 * Q06_LAYER_TOKEN and g["layout"]["pipeline_parallel_size"] == 3
    # Qwen3-30B-A3B: 48 layers, 4 KV heads; -tp 8: 1 head a rank, 128 × 2 × 2 B × 48 = 24,576 B a token
    args = ["fit", "qwen3-30b-a3b", "--gpu", "H100", "-tp", "8", "--max-model-len", "32768", "--release", "0.11.0",
            "--json"]
    assert main(args + ["-dcp", "2"]) == 0
    f = json.loads(capsys.readouterr().out)
    # a request holds cdiv(32,768, 2) = 16,384 tokens on a rank: 16,384 × 24,576 B
    assert f["request_bytes"] == 16_384 * 128 * 2 * 2 * 48 == 402_653_184
    assert f["log_lines"]["low"][1] == "Multiplying the GPU KV cache size by the dcp_world_size 2."
    # vLLM's own check (ModelConfig.verify_with_parallel_config): -dcp at most tp // kv heads = 2
    assert main(args + ["-dcp", "4"]) == 2
    assert "tp // kv heads = 2" in capsys.readouterr().err


def test_hybrid_pp_keeps_the_whole_models_groups():
    from kvgate.model import load_model  # noqa: PLC0415

    m = load_model("gpt-oss-20b")  # 24 layers, sliding (128) at even indices, full at odd; 8 KV heads × 64
    g = KVGeometry(m, "bf16", layout=VLLM(pipeline_parallel_size=5))
    # page: 16 × 8 × 64 × 2 × 2 B = 32,768 B. The whole model's groups: 12 sliding + 12 full, group size 12
    # (get_kv_cache_groups on the merged specs). 24 over 5 stages: [5, 5, 5, 5, 4]; a 5-layer stage holds
    # 3 of one kind and 2 of the other: 3 layers share a block, 3 × 32,768 = 98,304 B
    r = vllm_kv_cache_report(g, 10 * 2**30, 8192)
    assert [s["bytes_per_block"] for s in r["stages"]] == [98_304] * 4 + [65_536]
    assert r["num_blocks"] == 10 * 2**30 // 98_304 == 109_226 and len(r["groups"]) == 2
    # a request: full cdiv(8,192, 16) = 512 blocks + sliding cdiv(min(127 + 2,048, 8,192), 16) + 1 = 137
    assert r["blocks_per_request"] == 649 and r["gpu_kv_cache_tokens"] == 109_226 * 8192 // 649 == 1_378_704
    # the per-rank slot: stage 1 (layers 5–9: full 5, 7, 9 and sliding 6, 8), whole blocks per layer
    assert g.slot_bytes(8192) == (3 * 512 * 16 + 2 * 137 * 16) * 2048 == 59_310_080


@pytest.mark.parametrize("release,fits", [("0.15.1", "no"), ("0.17.0", "yes"), ("0.13.0", "yes")])
def test_fit_pp_startup_check_follows_the_release(release, fits, capsys):
    """vLLM 0.14–0.16 checked one request of the WHOLE model against the least budget under
    PP (github.com/vllm-project/vllm/issues/34076: Qwen3-Coder-30B-A3B, -pp 2, "24.0 GiB KV
    cache is needed" at 262,144 tokens: 48 layers × 4 KV heads × 128 × 2 × 2 B × 262,144);
    0.17.0 checks each stage's own 24 layers (12 GiB), as 0.13 did."""
    import json  # noqa: PLC0415

    from kvgate.cli import main  # noqa: PLC0415

    assert 48 * 4 * 128 * 2 * 2 * 262_144 == 24 * 2**30  # the issue's figure, by vLLM 0.15's rule
    # the preset (Qwen3-30B-A3B, the same 48 × 4 × 128 attention) at its 40,960: the whole model
    # 48 × 2,048 B × 40,960 = 3.75 GiB, a stage of 24 layers 1.875 GiB; 3 GiB of KV cache given
    assert main(["fit", "qwen3-30b-a3b", "--gpu", "H100", "-pp", "2", "--max-model-len", "40960",
                 "--kv-cache-memory-bytes", str(3 * 2**30), "--release", release, "--json"]) == 0
    f = json.loads(capsys.readouterr().out)
    assert f["request_bytes"] == (48 if release == "0.15.1" else 24) * 2048 * 40960 and f["fits"] == fits


def test_pp_layer_partition_from_the_log_sets_the_stage():
    # VLLM_PP_LAYER_PARTITION=16,12 on Qwen3-0.6B (28 layers): stage 0 holds 16 layers; a block there
    # 16 × 4,096 × 16 = 1,048,576 B; 10 GiB → 10,240 blocks; 10,240 × 16 tokens (≥ 0.20.1); 10,240 / 512 = 20.00x
    nb = 10 * 2**30 // (16 * Q06_LAYER_TOKEN * 16)
    assert nb == 10_240
    text = ("$ VLLM_PP_LAYER_PARTITION=16,12 vllm serve Qwen/Qwen3-0.6B -pp 2 --max-model-len 8192\n"
            + "".join(f"(Worker_PP{p} pid={p + 1}) INFO 01-01 00:00:01 [gpu_worker.py:1] Available KV cache memory: "
                      "10.00 GiB\n" for p in range(2))
            + f"(EngineCore_DP0 pid=9) INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: {nb * 16:,} tokens\n"
            "(EngineCore_DP0 pid=9) INFO 01-01 00:00:02 [kv_cache_utils.py:1] Maximum concurrency for 8,192 tokens per "
            "request: 20.00x\n")
    p = read_engine_log("pp.log", text=text)
    assert p.pp == 2 and p.parsed["pp_layer_partition"] == [16, 12]
    m = spec_from_config(QWEN3_06B, name="qwen3-0.6b", source="test")
    cc = crosscheck(p, m, kv_format="bf16")
    assert cc["status"] == "agrees" and cc["expected"]["num_blocks"] == 10_240 and "[16, 12]" in cc["lines"][0]
    # vLLM's own split ([14, 14]) would give 10 GiB / 917,504 B = 11,702 blocks: not these lines
    without = read_engine_log("pp.log", text=text.replace("VLLM_PP_LAYER_PARTITION=16,12 ", ""))
    assert crosscheck(without, m, kv_format="bf16")["status"] == "differs"
    # the "unevenly partitioned" line gives vLLM's split and the pipeline size (28 over 3: [9, 10, 9])
    q = read_engine_log("pp3.log", text="(Worker_PP0 pid=1) INFO 01-01 00:00:00 [utils.py:1] Hidden layers were "
                                        "unevenly partitioned: [9,10,9]. This can be manually overridden using the "
                                        "VLLM_PP_LAYER_PARTITION environment variable\n"
                                        "INFO 01-01 00:00:02 [kv_cache_utils.py:1] GPU KV cache size: 1,000 tokens\n")
    assert q.pp == 3 and q.parsed["pp_layer_partition"] == [9, 10, 9]
