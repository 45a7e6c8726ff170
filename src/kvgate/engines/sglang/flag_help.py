"""SGLang's flags as ``kvgate help engine-flags`` states them: their defaults are the ones
:mod:`kvgate.engines.sglang.flags` and :mod:`kvgate.engines.sglang.swa` apply."""

from __future__ import annotations

from kvgate.engines.flag_help import FlagHelp, log_rule
from kvgate.engines.sglang.swa import DEFAULT_SWA_FULL_TOKENS_RATIO

FLAGS: tuple[FlagHelp, ...] = (
    FlagHelp("--mem-fraction-static F", "0.4 series, by TP: 0.88 (1), 0.87 (2+), 0.85 (4+), 0.81 (8+), "
             "0.79 (16+), × 0.95 for multimodal models; computed from the GPU from 0.4.7 (give the logged value)",
             "the share of free memory at start for weights + KV pool: max_total_num_tokens", "fit, what-if"),
    FlagHelp("--context-length L", "the model's length as SGLang derives it (get_context_length); above it "
             "refused unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "tokens per request; requests are "
             "capped at max_total_num_tokens − 1", "fit, what-if"),
    FlagHelp("--dtype DTYPE", "auto: the config's dtype, float32 models in float16 (bfloat16 for Gemma)",
             "the model's dtype: --kv-cache-dtype auto and the loaded weights follow it", "fit"),
    FlagHelp("--max-running-requests N", "computed by SGLang", "requests at once (the pool is unchanged; "
             "more than fit wait in the queue)", "fit"),
    FlagHelp("--tp-size, --tensor-parallel-size N", "1; auto: a table of 1, 2, 4, 8", "KV heads and weights "
             "split over N GPUs; must split the attention heads (SGLang asserts it)", "fit (what-if: -tp)",
             log_rule("-tp (or --tp-size)", "--tp", "tensor parallel size")),
    FlagHelp("--kv-cache-dtype DTYPE", "auto (the model's dtype); fp8_e4m3, fp8_e5m2", "bytes per cached "
             "K/V element", "fit, what-if", log_rule("--kv-cache-dtype", "--kv-format", "KV cache dtype", auto=True)),
    FlagHelp("--page-size N", "1", "max_total_num_tokens rounded down to whole pages", "fit"),
    FlagHelp("--chunked-prefill-size N", "by GPU", "prefill chunk (the pool is unchanged)", "fit"),
    FlagHelp("--swa-full-tokens-ratio R", f"{DEFAULT_SWA_FULL_TOKENS_RATIO}", "hybrid sliding-window models (SWAKVPool, by release): "
             "SWA-layer tokens per full-layer token, the budget split between the two pools", "fit"),
)
