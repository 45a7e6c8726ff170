"""vLLM's command-line flags as kvgate takes them (``vllm serve``'s spellings, from
``vllm/engine/arg_utils.py`` ``EngineArgs.add_cli_args``), and per kvgate command the ones
it takes with their help there. Data only, light: :mod:`kvgate.commands._flag_table` builds
the argparse options; the defaults' rules are in :mod:`kvgate.engines.vllm.flags`."""

from __future__ import annotations

from kvgate.engines.flag_help import Flag, FlagTable, Use

_DTYPES = ("auto", "half", "float16", "bfloat16", "float", "float32")
_FIT_KV = "vLLM and SGLang: auto (the model's dtype), fp8, fp8_e4m3, fp8_e5m2"
_FIT_DTYPE = ("vLLM and SGLang: the dtype the model runs in (default auto: the config's); --kv-cache-dtype auto "
              "and the loaded weights follow it")
_FIT_Q = ("the checkpoint's method (awq, gptq, fp8, ...; vLLM stops on another); on an unquantized checkpoint fp8 "
          "is priced as vLLM loads it, another method needs --weights-bytes (the loaded size)")

TABLE = FlagTable("vllm", flags=(
    Flag(("--gpu-memory-utilization",)),
    Flag(("--max-model-len",)),
    Flag(("--max-num-seqs",)),
    Flag(("--max-num-batched-tokens",)),
    Flag(("--tensor-parallel-size", "-tp")),
    Flag(("--pipeline-parallel-size", "-pp")),
    Flag(("--decode-context-parallel-size", "-dcp")),
    Flag(("--kv-cache-dtype",)),
    Flag(("--kv-cache-memory-bytes",)),
    Flag(("--dtype",), choices=_DTYPES),
    Flag(("--quantization", "-q"), short="--quantization"),
    Flag(("--enforce-eager",), action="store_true"),
    Flag(("--block-size",)),
    Flag(("--flashinfer-sampler",)),  # kvgate's: V1 samples with FlashInfer (the log says so) or not
    Flag(("--disable-hybrid-kv-cache-manager",), action="store_true"),
    Flag(("--enable-prefix-caching",), action="optional_bool"),
    Flag(("--speculative-config",)),
    Flag(("--vllm-version", "--release")),  # kvgate's: the release whose rules apply
    Flag(("--mamba-ssm-dtype",)),
    Flag(("--mamba-cache-dtype",)),
    Flag(("--kv-offloading-size",)),
), groups={
    "fit": "vLLM flags (vllm serve's spellings and defaults)",
    "layout": "vLLM flags (imply --layout vllm)",
}, uses={
    "fit": (
        Use("--gpu-memory-utilization", "gpu_memory_utilization", "share of the GPU vLLM takes (default 0.9; 0.92 "
            "from 0.20.0)", ("fraction",), "U"),
        Use("--max-model-len", "max_model_len", "tokens per request; 32k = 32,000 and 32K = 32,768 as vLLM reads "
            "them; auto = the largest that fits (default: the model's)", ("human_int_auto",), "L"),
        Use("--max-num-seqs", "max_num_seqs", "sequences per step (default 256, or 1024 on ≥ 70 GiB GPUs other than "
            "A100, V1)", ("human_int",), "N"),
        Use("--max-num-batched-tokens", "max_num_batched_tokens", "tokens per step: sizes the profile run's "
            "activation peak (default by release and GPU)", ("human_int",), "N"),
        Use("--tensor-parallel-size", "tp", "GPUs per model replica; auto: a table of TP 1, 2, 4, 8 (SGLang spells "
            "it so too)", ("tp_auto",), "N", default=1),
        Use("--pipeline-parallel-size", "pp", "pipeline stages", ("human_int",), "N", default=1),
        Use("--decode-context-parallel-size", "dcp", "ranks of the -tp group sharing one request's tokens",
            ("human_int",), "N", default=1),
        Use("--kv-cache-dtype", "kv_cache_dtype", _FIT_KV, metavar="DTYPE", default="auto", picks_engine=False),
        Use("--kv-cache-memory-bytes", "kv_cache_memory_bytes", "KV cache size per GPU, bypassing "
            "--gpu-memory-utilization", ("human_int",), "BYTES"),
        Use("--dtype", "dtype", _FIT_DTYPE, ("lower",), "DTYPE", picks_engine=False),
        Use("--quantization", "quantization", _FIT_Q, metavar="METHOD"),
        Use("--enforce-eager", "enforce_eager", "no CUDA graphs"),
        Use("--flashinfer-sampler", "flashinfer_sampler", "V1 samples with FlashInfer (its log: 'Using "
            "FlashInfer for top-p & top-k sampling') or not; default: the release's rule", ("yes_no",), "yes|no"),
        Use("--block-size", "block_size", "tokens per KV block (default 16)", ("human_int",), "N"),
    ),
    "fit_release": (
        Use("--vllm-version", "release", "engine release whose rules apply (default: the installed engine, else "
            "the newest modelled)", metavar="X.Y.Z", names=("--release", "--vllm-version"), picks_engine=False),
    ),
    "layout": (
        Use("--max-model-len", "vllm_max_model_len", "= --max-seq (vLLM's spelling: 32k = 32,000, 32K = 32,768)",
            ("vllm_int",), "L"),
        Use("--max-num-seqs", "vllm_max_num_seqs", "= --slots", ("vllm_int",), "N"),
        Use("--kv-cache-dtype", "vllm_kv_cache_dtype", "= --kv-format (auto: the model's dtype)", metavar="DTYPE"),
        Use("--tensor-parallel-size", "vllm_tp", "= --tp", ("positive_int",), "N"),
        Use("--pipeline-parallel-size", "vllm_pp", "pipeline stages: figures are one rank's of the stage that sets "
            "the pool", ("positive_int",), "N"),
        Use("--decode-context-parallel-size", "vllm_dcp", "ranks sharing one request's tokens (decode context "
            "parallel)", ("positive_int",), "N"),
        Use("--block-size", "block_size", "tokens per KV block (default 16)", ("positive_int",)),
        Use("--max-num-batched-tokens", "max_num_batched_tokens", "scheduler token budget (sliding-window blocks)",
            ("vllm_int",)),
        Use("--disable-hybrid-kv-cache-manager", "disable_hybrid_kv_cache_manager", "sliding layers allocated at "
            "full length"),
        Use("--enable-prefix-caching", "enable_prefix_caching", "prefix caching (changes Mamba state pages)"),
        Use("--speculative-config", "speculative_config", "JSON, as vLLM takes it", ("json_object",)),
        Use("--vllm-version", "vllm_version", "vLLM version X.Y.Z whose rules to apply", names=("--vllm-version",)),
        Use("--mamba-ssm-dtype", "mamba_ssm_dtype", "SSM state dtype"),
        Use("--mamba-cache-dtype", "mamba_cache_dtype", "Mamba conv state dtype"),
    ),
    "whatif": (
        Use("--gpu-memory-utilization", "whatif_util", "vLLM's share of the GPU", ("fraction",), "U"),
        Use("--max-model-len", "vllm_max_model_len", "vLLM's tokens per request (32k = 32,000, 32K = 32,768)",
            ("human_int",), "L"),
        Use("--tensor-parallel-size", "vllm_tp", "a what-if tensor parallel size (the log's own when the log does "
            "not state it)", ("positive_int",), "N", names=("-tp", "--tensor-parallel-size", "--tp-size")),
        Use("--pipeline-parallel-size", "vllm_pp", "vLLM's pipeline stages (the log's own when the log does not "
            "state it)", ("positive_int",), "N", names=("-pp", "--pipeline-parallel-size")),
        Use("--kv-cache-dtype", "vllm_kv_cache_dtype", "a what-if KV dtype (vLLM/SGLang: fp8, auto, ...; the log's "
            "own when it does not state it)", metavar="DTYPE"),
        Use("--vllm-version", "vllm_version", "the engine release when the log does not print it", metavar="X.Y.Z"),
    ),
    "whatif_gate": (
        Use("--gpu-memory-utilization", "whatif_util", "vLLM's share of the GPU", ("fraction",), "U"),
    ),
    "import_log": (
        Use("--block-size", "block_size", "vLLM block size when not the default 16", ("positive_int",)),
    ),
    "tier": (
        Use("--kv-offloading-size", "kv_offloading_size", "vLLM's CPU offload size in GiB (= --host-capacity)",
            ("real_open", 0.0, 2.0**34), "GiB"),
    ),
})
