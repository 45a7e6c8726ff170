"""llama.cpp's flags as ``kvgate help engine-flags`` states them: their defaults are the ones
:mod:`kvgate.engines.llamacpp.dtype`, :mod:`kvgate.engines.llamacpp.pool` and
:mod:`kvgate.engines.llamacpp.fit` apply."""

from __future__ import annotations

from kvgate.engines.flag_help import FlagHelp, log_rule
from kvgate.engines.llamacpp.dtype import DEFAULT_CACHE_TYPE
from kvgate.engines.llamacpp.fit import AUTO_SLOTS, AUTO_SLOTS_FROM
from kvgate.engines.llamacpp.pool import FLASH_ATTN_DEFAULT, N_BATCH, N_UBATCH

FLAGS: tuple[FlagHelp, ...] = (
    FlagHelp("-c, --ctx-size N", "0 = the model's context (n_ctx_train)", "the WHOLE context of all "
             "sequences: each of -np gets -c / -np cells, padded to 256", "fit, layout, what-if"),
    FlagHelp("-np, --parallel N", f"llama-server from ~b{AUTO_SLOTS_FROM[0]}: auto = {AUTO_SLOTS} slots sharing one "
             "unified KV cache (what fit takes); 1 in older builds, and for the KV layout (= --slots)",
             "parallel sequences (streams) sharing -c", "fit, layout (= --slots), "
             "what-if"),
    FlagHelp("-ctk, --cache-type-k TYPE", f"{DEFAULT_CACHE_TYPE}; q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, bf16, f32", "bytes "
             "per cached K row (ggml blocks)", "fit, layout, what-if",
             log_rule("-ctk", "--kv-format", "K cache type") + "; -ctk alone changes K only"),
    FlagHelp("-ctv, --cache-type-v TYPE", f"{DEFAULT_CACHE_TYPE} (a quantized V needs -fa)", "bytes per cached V row",
             "fit, layout, what-if", log_rule("-ctv", "--kv-format", "V cache type")),
    FlagHelp("-ngl, --n-gpu-layers N", "999 = all (recent builds); unset, --fit picks it", "layers (and their KV) on the GPU",
             "fit"),
    FlagHelp("-fa, --flash-attn on|off|auto", FLASH_ATTN_DEFAULT, "off pads V to the KV block; the compute buffer's "
             "KQ scores", "fit, layout"),
    FlagHelp("-ub, --ubatch-size N", str(N_UBATCH), "the compute buffer; iSWA cache cells", "fit, layout"),
    FlagHelp("-b, --batch-size N", str(N_BATCH), "the logical batch (-ub is clamped to it)", "fit, layout"),
    FlagHelp("-fit, --fit on|off", "on (builds from ~b7400; before: no such flag)", "without -ngl, moves "
             "layers to the CPU (and, without -c, shrinks the context) until 1024 MiB stay free", "fit"),
    FlagHelp("-kvu, --kv-unified", f"off; on with llama-server's auto -np (from ~b{AUTO_SLOTS_FROM[0]})", "one KV cache for all sequences instead of one stream each",
             "fit, layout"),
    FlagHelp("--swa-full", "off", "sliding-window layers at full size", "layout"),
)
