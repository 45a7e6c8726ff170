"""Bad and hostile input, round 3 (a break-it pass over the vLLM parallel flags, the
what-ifs from a log, ``kvgate help``, and fit's flags): each is a clear ERROR (exit 2)
naming the flag, never a traceback or a silently accepted impossible setting."""

from __future__ import annotations

import json

import pytest

from kvgate.cli import main
from test_bad_input_new_commands import run_json  # one helper for the bad-input files


@pytest.mark.parametrize("topic", ["nosuch", "cli", "Fit", "../x"])
def test_help_unknown_command_is_an_error_not_a_traceback(topic, capsys):
    code, doc = run_json(["help", topic], capsys)
    assert code == 2 and topic in doc["error"]


QWEN3_8B = "tests/data/configs/qwen3-8b.json"  # 36 layers, 32 heads, 8 KV heads


@pytest.mark.parametrize("argv,needle", [
    (["-dcp", "3"], "-dcp 3"),                 # -dcp must divide -tp (1 here)
    (["-tp", "8", "-dcp", "16"], "-dcp 16"),   # larger than -tp
    (["-tp", "8", "-dcp", "2"], "-dcp 2"),     # GQA: -tp must exceed the 8 KV heads
    (["-pp", "37"], "-pp 37"),                 # more stages than the 36 layers
    (["-pp", "1000"], "-pp 1000"),
    (["-pp", "2", "-tp", "3"], "-tp 3"),       # 32 heads do not divide by 3
])
def test_geometry_vllm_refuses_parallel_splits_vllm_refuses(argv, needle, capsys):
    """geometry --layout vllm takes the split fit refuses (fit: vllm_fit.check_parallel)."""
    code, doc = run_json(["geometry", QWEN3_8B, "--layout", "vllm", *argv], capsys)
    assert code == 2 and needle in doc["error"]
    code, doc = run_json(["fit", QWEN3_8B, "--gpu", "H100", *argv], capsys)
    assert code == 2 and needle in doc["error"]


def test_geometry_vllm_takes_a_split_vllm_takes(capsys):
    code, doc = run_json(["geometry", QWEN3_8B, "--layout", "vllm", "-tp", "16", "-dcp", "2", "-pp", "4"], capsys)
    assert code == 0 and doc["bytes_per_token"] > 0


@pytest.mark.parametrize("bs", ["7", "24", "100"])
def test_fit_block_size_no_vllm_release_takes_is_refused(bs, capsys):
    """vLLM's CacheConfig.block_size was Literal[1, 8, 16, 32, 64, 128(, 256)] up to its
    later releases, which take any int > 0 but whose CUDA attention backends take only
    multiples of 16 (FlashAttention MultipleOf(16)): 7, 24, 100 start under no release."""
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--block-size", bs], capsys)
    assert code == 2 and "--block-size" in doc["error"]


@pytest.mark.parametrize("bs", ["16", "32", "256"])
def test_fit_block_size_vllm_takes_is_accepted(bs, capsys):
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--block-size", bs], capsys)
    assert code == 0 and doc["fits"] in ("yes", "no", "unknown")


@pytest.mark.parametrize("argv,needle", [(["--tp-size", "0"], "--tp-size"), (["--tp", "0"], "--tp-size"),
                                         (["--page-size", "0"], "--page-size")])
def test_fit_sglang_zero_is_refused_not_read_as_the_default(argv, needle, capsys):
    """--tp-size 0 / --page-size 0 were read as 1 (``or 1``): a silent answer for TP 1."""
    code, doc = run_json(["fit", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100", *argv], capsys)
    assert code == 2 and needle in doc["error"]


def _config(tmp_path, **fields) -> str:
    cfg = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 4096,
           "num_attention_heads": 32, "num_key_value_heads": 8, "num_hidden_layers": 32,
           "max_position_embeddings": 8192, "torch_dtype": "bfloat16", "vocab_size": 32000,
           "intermediate_size": 11008, **fields}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    return str(p)


@pytest.mark.parametrize("argv", [["geometry"], ["fit", "--gpu", "H100", "--engine", "sglang"],
                                  ["fit", "--gpu", "H100"]])
def test_negative_max_position_embeddings_is_named(tmp_path, argv, capsys):
    """A config with max_position_embeddings -1 gave SGLang fit '-428,337 requests of -1 tokens'."""
    cfg = _config(tmp_path, max_position_embeddings=-1)
    code, doc = run_json([argv[0], cfg, *argv[1:]], capsys)
    assert code == 2 and "max_position_embeddings" in doc["error"]


def test_implausible_max_position_embeddings_is_named(tmp_path, capsys):
    """10^30 positions crashed fit's flip-point search (OverflowError in bisect)."""
    cfg = _config(tmp_path, max_position_embeddings=10**30)
    code, doc = run_json(["fit", cfg, "--gpu", "H100"], capsys)
    assert code == 2 and "max_position_embeddings" in doc["error"]


def test_indexer_types_starting_shared_is_refused(tmp_path, capsys):
    """A 'shared' first layer has no earlier full indexer layer to reuse: transformers'
    GlmMoeDsaAttention raises "Shared DSA layers require top-k indices from a previous full
    indexer layer."; kvgate sized it with one indexer fewer."""
    cfg = json.loads(open("tests/data/configs/glm-5.2.json").read())
    n = cfg["num_hidden_layers"]
    for types in (["shared"] * n, ["shared"] + ["full"] * (n - 1)):
        p = tmp_path / "config.json"
        p.write_text(json.dumps({**cfg, "indexer_types": types}))
        code, doc = run_json(["geometry", str(p), "--max-seq", "4096"], capsys)
        assert code == 2 and "indexer_types" in doc["error"]


@pytest.mark.parametrize("dtype", ["q4_0", "int8-f32scale", "fp8garbage", "fp4_e2m1"])
def test_fit_sglang_kv_cache_dtype_sglang_has_not_is_refused(dtype, capsys):
    """SGLang's --kv-cache-dtype choices (server_args.py): auto, fp8_e5m2, fp8_e4m3, and from
    0.5 bf16, bfloat16, fp4_e2m1 (not modelled); q4_0 is llama.cpp's and was sized as such."""
    code, doc = run_json(["fit", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100", "--kv-cache-dtype", dtype],
                         capsys)
    assert code == 2 and "--kv-cache-dtype" in doc["error"]


def test_import_log_sglang_what_if_kv_cache_dtype_sglang_has_not_is_refused(capsys):
    log = "tests/data/logs/sglang_gemma3-4b.log"
    code, doc = run_json(["import-log", log, "--model", "tests/data/fit_logs/configs/gemma-3-4b-it.json",
                          "--gpu", "H200", "--kv-cache-dtype", "q4_0"], capsys)
    assert code == 2 and "--kv-cache-dtype" in doc["error"]


@pytest.mark.parametrize("dtype", ["auto", "fp8_e4m3", "fp8_e5m2", "bf16", "bfloat16", "fp8"])
def test_fit_sglang_kv_cache_dtype_sglang_has_is_accepted(dtype, capsys):
    code, doc = run_json(["fit", "llama-3.1-8b", "--engine", "sglang", "--gpu", "H100", "--kv-cache-dtype", dtype],
                         capsys)
    assert code == 0


SGL_LOG = "tests/data/logs/sglang_gemma3-4b.log"
GEMMA3_4B = "tests/data/fit_logs/configs/gemma-3-4b-it.json"
LCPP_LOG = "tests/data/fit_logs/llamacpp_b4459_pythia-2.8b-q4_0_v100_1.log"


@pytest.mark.parametrize("log,model", [(SGL_LOG, GEMMA3_4B), (LCPP_LOG, "tests/data/fit_logs/configs/pythia-2.8b.json")])
def test_import_log_pp_on_a_log_not_vllms_is_refused(log, model, capsys):
    """--pp is vLLM's pipeline-parallel size: on an SGLang / llama.cpp log it was shown in
    'TP / PP' and silently not used by the what-if."""
    code, doc = run_json(["import-log", log, "--model", model, "--gpu", "H200", "--pp", "2"], capsys)
    assert code == 2 and "--pp" in doc["error"]


def test_gate_engine_log_pp_on_an_sglang_log_is_refused(capsys):
    code, doc = run_json(["gate", "--engine-log", SGL_LOG, "--model", GEMMA3_4B, "--slots", "4", "--max-seq", "8192",
                          "-pp", "2", "--no-record"], capsys)
    assert code == 2 and "-pp" in doc["error"]


def test_gate_engine_log_sglang_names_a_kv_dtype_sglang_takes(capsys):
    """SGLang's --kv-cache-dtype has no plain 'fp8' (server_args.py choices): say fp8_e4m3."""
    assert main(["gate", "--engine-log", SGL_LOG, "--model", GEMMA3_4B, "--slots", "4", "--max-seq", "8192",
                 "--no-record"]) == 0
    out = capsys.readouterr().out
    assert "--kv-cache-dtype fp8_e4m3" in out and "--kv-cache-dtype fp8 " not in out


@pytest.mark.parametrize("dcp", ["2", "16"])
def test_gate_engine_log_dcp_the_log_does_not_have_is_refused(dcp, capsys):
    """-dcp on the engine-log gate was silently unused: the same answer at -dcp 1, 2 or 16."""
    code, doc = run_json(["gate", "--engine-log", "tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log",
                          "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "-tp", "8", "--slots", "4",
                          "--max-seq", "8192", "-dcp", dcp, "--no-record"], capsys)
    assert code == 2 and f"-dcp {dcp}" in doc["error"]


def test_gate_engine_log_dcp_the_log_has_is_accepted(capsys):
    code, doc = run_json(["gate", "--engine-log", "tests/data/logs/vllm_qwen3-235b-a22b_tp8_dcp2.log",
                          "--model", "tests/data/configs/qwen3-235b-a22b.json", "--kv-format", "bf16", "--slots", "4",
                          "--max-seq", "8192", "-dcp", "2", "--no-record"], capsys)
    assert code == 0, doc


@pytest.mark.parametrize("argv", [["--max-num-batched-tokens", "1"],
                                  ["--max-num-batched-tokens", "64", "--max-num-seqs", "256"]])
def test_fit_max_num_batched_tokens_below_max_num_seqs_is_vllms_refusal(argv, capsys):
    """vllm/config/scheduler.py SchedulerConfig._verify_args: "max_num_batched_tokens (1) must
    be greater than or equal to max_num_seqs (1024)." kvgate answered FITS."""
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", *argv], capsys)
    assert code == 2 and "--max-num-batched-tokens" in doc["error"] and "max_num_seqs" in doc["error"]


def test_fit_max_num_batched_tokens_equal_to_max_num_seqs_is_accepted(capsys):
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", "H100", "--max-num-batched-tokens", "256",
                          "--max-num-seqs", "256"], capsys)
    assert code == 0


def test_geometry_images_past_any_context_is_refused(capsys):
    """10^20 images per sequence (6.4·10^23 positions per cross-attention layer) was sized."""
    code, doc = run_json(["geometry", "tests/data/configs/llama-3.2-11b-vision-assembled.json", "--max-seq", "4096",
                          "--images", "99999999999999999999"], capsys)
    assert code == 2 and "images" in doc["error"]


@pytest.mark.parametrize("name,card", [("NVIDIA H100 80GB HBM3", "H100 80GB"), ("NVIDIA A100 80GB PCIe", "A100 80GB")])
def test_gpu_names_as_nvidia_smi_prints_them(name, card, capsys):
    """nvidia-smi's own names for these cards were 'unknown GPU'."""
    code, doc = run_json(["fit", "llama-3.1-8b", "--gpu", name], capsys)
    assert code == 0 and doc["gpu"]["name"] == card


@pytest.mark.parametrize("flag", ["--max-seq", "--max-model-len"])
def test_gate_engine_log_length_past_the_model_is_refused(flag, capsys):
    """4 sequences of 100,000,000 tokens on Qwen3-30B-A3B (max_position_embeddings 40,960):
    the gate offered '--max-model-len fits at up to 49,696' and CPU KV offload, both past what
    vLLM starts with."""
    code, doc = run_json(["gate", "--engine-log", "tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log",
                          "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--slots", "4", flag, "100000000",
                          "--no-record"], capsys)
    assert code == 2 and "max_position_embeddings" in doc["error"]


def test_gguf_more_kv_heads_than_heads_is_refused(tmp_path, capsys):
    """head_count_kv 8 over head_count 4 was sized as 8 KV heads (llama.cpp: n_gqa = 4 / 8 = 0)."""
    from gguf import GGUFWriter

    p = tmp_path / "m.gguf"
    w = GGUFWriter(str(p), "llama")
    w.add_block_count(4)
    w.add_embedding_length(256)
    w.add_head_count(4)
    w.add_head_count_kv(8)
    w.add_context_length(4096)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    code, doc = run_json(["geometry", str(p)], capsys)
    assert code == 2 and "head_count_kv" in doc["error"]


def test_gate_engine_log_pp_past_the_layers_names_pp(capsys):
    """-pp 1000 on a 48-layer model ended in 'the log gives no pool size in bytes; pass --model'
    with --model given."""
    code, doc = run_json(["gate", "--engine-log", "tests/data/logs/vllm_0.8.5_qwen3-30b-a3b_tp4.log",
                          "--model", "qwen3-30b-a3b", "--kv-format", "bf16", "--slots", "4", "--max-seq", "8192",
                          "-pp", "1000", "--no-record"], capsys)
    assert code == 2 and "-pp 1000" in doc["error"]
