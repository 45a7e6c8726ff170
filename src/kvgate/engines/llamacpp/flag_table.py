"""llama.cpp's command-line flags as kvgate takes them (``llama-server``'s spellings, from
``common/arg.cpp`` ``common_params_parser_init``), and per kvgate command the ones it takes
with their help there. Data only, light: :mod:`kvgate.commands._flag_table` builds the
argparse options; the defaults' rules are in :mod:`kvgate.engines.llamacpp.config`."""

from __future__ import annotations

from kvgate.engines.flag_help import Flag, FlagTable, Use

_ON_OFF_AUTO = ("on", "off", "auto")
#: llama.cpp reads its integer flags with ``std::stoi`` (``common/arg.cpp``, the ``int`` handlers
#: of ``common_arg``): a value above INT_MAX is refused there ("error while handling argument"),
#: so kvgate refuses it too rather than size a cache llama.cpp never starts with
INT_MAX = 2**31 - 1
_N = ("count", 0, INT_MAX)
_POS = ("count", 1, INT_MAX)
_PLAIN_N = ("plain_count", INT_MAX)
_PLAIN_POS = ("plain_positive", INT_MAX)

TABLE = FlagTable("llama.cpp", flags=(
    Flag(("-c", "--ctx-size")),
    Flag(("-np", "--parallel")),
    Flag(("--n-seq",)),  # kvgate's: the cache's sequences apart from --slots
    Flag(("-ctk", "--cache-type-k")),
    Flag(("-ctv", "--cache-type-v")),
    Flag(("-ngl", "--n-gpu-layers", "--gpu-layers")),
    Flag(("-fa", "--flash-attn"), choices=_ON_OFF_AUTO, nargs="?", const="on"),
    Flag(("-ub", "--ubatch-size", "--n-ubatch")),
    Flag(("-b", "--batch-size")),
    Flag(("-fit", "--fit"), choices=("on", "off")),
    Flag(("-fitt", "--fit-target")),
    Flag(("--host-memory",)),  # kvgate's: the host RAM llama.cpp's --fit counts on
    Flag(("-kvu", "--kv-unified"), action="store_true"),
    Flag(("--no-op-offload",), action="store_true"),
    Flag(("--swa-full",), action="store_true"),
    Flag(("--cache-ram", "-cram")),
    Flag(("--slot-prompt-similarity", "-sps")),
), groups={
    "fit": "llama.cpp flags (llama-server's spellings and defaults)",
    "layout": "llama.cpp flags (imply --layout llama.cpp)",
}, uses={
    "fit": (
        Use("-c", "ctx_size", "WHOLE context of all sequences (each gets -c / -np, padded to 256); default: the "
            "model's", _PLAIN_N, "N"),
        Use("-np", "parallel", "parallel sequences (default: llama-server's auto, 4 slots sharing one unified KV "
            "cache; 1 before ~b7000)", _PLAIN_POS, "N"),
        Use("-ctk", "cache_type_k", "K type (default f16)", metavar="TYPE"),
        Use("-ctv", "cache_type_v", "V type (default f16)", metavar="TYPE"),
        Use("-ngl", "n_gpu_layers", "layers on the GPU (default 999: all)", _PLAIN_N, "N"),
        Use("-fa", "flash_attn", "flash attention (default auto)"),
        Use("-ub", "ubatch_size", "physical batch (default 512)", _PLAIN_POS, "N",
            names=("-ub", "--ubatch-size")),
        Use("-b", "batch_size", "logical batch (default 2048)", _PLAIN_POS, "N"),
        Use("-fit", "fit", "llama.cpp's --fit: move layers to the CPU / shrink an unset -c to fit (default on from "
            "~b7400)"),
        Use("-fitt", "fit_target", "free memory --fit leaves on the GPU, MiB (default 1024)", ("plain_count",), "MiB"),
        Use("--host-memory", "host_memory", "host RAM for the layers and KV off the GPU (default: this machine's)",
            ("bytes",), "BYTES"),
        Use("-kvu", "kv_unified", "one KV cache for all sequences"),
        Use("--no-op-offload", "no_op_offload", "CPU layers' ops stay on the CPU (no weight copies in the GPU's "
            "compute buffer)"),
    ),
    "layout": (
        Use("-c", "lcpp_ctx_size", "WHOLE context of all sequences, as llama.cpp means it; per sequence: "
            "pad256(pad256(c) / -np) (0 = the model's)", _N, "N"),
        Use("-np", "lcpp_parallel", "parallel sequences: = --slots and the cache's sequences", _POS, "N"),
        Use("--n-seq", "n_seq", "the cache's sequences only (what-if: --slots apart)", ("positive_int",)),
        Use("-ctk", "lcpp_cache_type_k", "K type (default f16)", metavar="TYPE"),
        Use("-ctv", "lcpp_cache_type_v", "V type (default f16)", metavar="TYPE"),
        Use("-ub", "n_ubatch", "physical batch (default 512)", _POS, "N"),
        Use("-b", "n_batch", "logical batch (default 2048); llama.cpp clamps -ub to it", _POS, "N"),
        Use("-fa", "flash_attn", "flash attention on|off|auto"),
        Use("--swa-full", "swa_full", "full-size SWA cache"),
        Use("-kvu", "kv_unified", "one unified KV cache"),
    ),
    "whatif": (
        Use("-ngl", "whatif_ngl", "llama.cpp's layers on the GPU (default: the log's 'offloaded N/M layers')",
            _N, "N"),
        Use("-c", "lcpp_ctx_size", "llama.cpp's whole context", _N, "N"),
        Use("-np", "lcpp_parallel", "llama.cpp's parallel sequences", _POS, "N"),
        Use("-ctk", "lcpp_cache_type_k", "llama.cpp's K type (q8_0, q4_0, f16, ...)", metavar="TYPE"),
        Use("-ctv", "lcpp_cache_type_v", "llama.cpp's V type (default: the log's; -ctk alone leaves V as it is)",
            metavar="TYPE"),
        Use("-fa", "flash_attn", "llama.cpp's flash attention on|off|auto"),
    ),
    "whatif_gate": (
        Use("-ngl", "whatif_ngl", None, _N, "N"),
    ),
    "tier": (
        Use("--cache-ram", "cache_ram", "llama.cpp's host prompt cache in MiB (-1 no limit, 0 off; default 8192)",
            ("count", -1, 2**44), "MiB"),
        Use("--slot-prompt-similarity", "slot_prompt_similarity", "llama.cpp's, in [0, 1] (default 0.1)",
            ("real", 0.0, 1.0), default=0.1),
    ),
})
