"""vLLM's flags as ``kvgate help engine-flags`` states them: their defaults per release are the
ones :mod:`kvgate.engines.vllm.flags` and :mod:`kvgate.engines.vllm.pool` apply."""

from __future__ import annotations

from kvgate.engines.flag_help import FlagHelp, log_rule, release_text
from kvgate.engines.vllm.flags import UTIL_092_FROM
from kvgate.engines.vllm.pool import DEFAULT_BLOCK_SIZE
from kvgate.fit.release import NEWEST

FLAGS: tuple[FlagHelp, ...] = (
    FlagHelp("--gpu-memory-utilization U", f"0.9; 0.92 from {release_text(UTIL_092_FROM)}",
             "the share of the GPU's CUDA total vLLM takes; the KV cache pool is what is left after weights, "
             "the profile run's activation peak, non-torch memory and (0.20+) the CUDA graph pool",
             "fit, what-if"),
    FlagHelp("--max-model-len L", "the model's length as vLLM derives it (max_position_embeddings, × the "
             "rope_scaling factor; longrope from 0.12: original_max_position_embeddings); above it refused "
             "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; 32k = 32,000, 32K = 32,768, auto = the largest that fits", "tokens per request: one request must fit the pool; \"Maximum "
             "concurrency\" is counted at L", "fit, layout (= --max-seq), what-if"),
    FlagHelp("--max-num-seqs N", "256; V1 (0.8+) on GPUs of 70 GiB or more other than A100: 1024",
             "sequences per step: the sampler's share of the activation peak; requests beyond the pool's "
             "concurrency wait in the queue", "fit, layout (= --slots)"),
    FlagHelp("--max-num-batched-tokens N", "V0: max(L, 2048), or 2048 with chunked prefill above L = 32,768 "
             "(512 before 0.6.4); V1: 2048, or 8192 on GPUs of 70 GiB or more other than A100",
             "tokens per step: the profile run's activation peak; sliding-window blocks", "fit, layout"),
    FlagHelp("--dtype DTYPE", "auto: the config's dtype, float32 models downcast (bfloat16, float16 before "
             "compute capability 8.0)", "the model's dtype: --kv-cache-dtype auto and the loaded weights "
             "follow it (float32 doubles both); float16 refused for gemma2/gemma3/glm4", "fit"),
    FlagHelp("-tp, --tensor-parallel-size N", "1; auto: a table of 1, 2, 4, 8", "KV heads and weights split over "
             "N GPUs (MLA latents are not split)", "fit, layout (= --tp), what-if", log_rule("-tp", "--tp", "tensor parallel size")),
    FlagHelp("-pp, --pipeline-parallel-size N", "1", "layers split over N stages", "fit",
             log_rule("-pp", "--pp", "pipeline parallel size", whatif=False)),
    FlagHelp("--kv-cache-dtype DTYPE", "auto (the model's dtype); fp8, fp8_e4m3, fp8_e5m2",
             "bytes per cached K/V element", "fit, layout (= --kv-format), what-if",
             log_rule("--kv-cache-dtype", "--kv-format", "KV cache dtype", auto=True)),
    FlagHelp("--kv-cache-memory-bytes B", "not set", "the KV pool per GPU, bypassing "
             "--gpu-memory-utilization", "fit"),
    FlagHelp("--quantization, -q METHOD", "the checkpoint's quant_method", "must match the checkpoint "
             "(gptq/awq also take their marlin kernels); on an unquantized checkpoint vLLM quantizes while "
             "loading: fp8 is priced (linears and experts 1 B), others need --weights-bytes; never the KV "
             "dtype", "fit"),
    FlagHelp("--enforce-eager", "off", "no CUDA graphs: their pool is 0", "fit"),
    FlagHelp("--flashinfer-sampler yes|no", "the release's rule", "V1's top-k/top-p sampler in the profile run: "
             "FlashInfer's (b+12 … b+16 B a logit) or PyTorch's sort (b+26 … b+36); the startup log says which",
             "fit"),
    FlagHelp("--block-size N", f"{DEFAULT_BLOCK_SIZE} on CUDA", "tokens per KV block: the pool is whole blocks", "fit, layout, "
             "import-log"),
    FlagHelp("--disable-hybrid-kv-cache-manager", "off", "sliding-window layers kept at full length", "layout"),
    FlagHelp("--[no-]enable-prefix-caching", "on (V1)", "Mamba state pages of hybrid models", "layout"),
    FlagHelp("--speculative-config JSON", "not set", "a draft model's KV beside the target's", "layout"),
    FlagHelp("--mamba-ssm-dtype, --mamba-cache-dtype", "the model's", "recurrent state bytes", "layout"),
    FlagHelp("--vllm-version, --release X.Y.Z", f"the installed vLLM, else the newest modelled ({NEWEST['vllm']})",
             "which release's defaults and rules apply (V0 up to 0.7, V1 from 0.8; the CUDA graph pool "
             "subtracted from 0.20)", "fit, layout, what-if"),
)
