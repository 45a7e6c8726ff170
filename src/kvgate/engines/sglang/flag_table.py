"""SGLang's command-line flags as kvgate takes them (``sglang.launch_server``'s spellings,
from ``sglang/srt/server_args.py`` ``ServerArgs.add_cli_args``), and per kvgate command the
ones it takes with their help there. Data only, light: :mod:`kvgate.commands._flag_table`
builds the argparse options; the defaults' rules are in :mod:`kvgate.engines.sglang.flags`.
Its ``--kv-cache-dtype``, ``--dtype`` and ``--tensor-parallel-size`` are vLLM's spellings
too: kvgate declares them once, in :mod:`kvgate.engines.vllm.flag_table`."""

from __future__ import annotations

from kvgate.engines.flag_help import Flag, FlagTable, Use

TABLE = FlagTable("sglang", flags=(
    Flag(("--mem-fraction-static",)),
    Flag(("--context-length",)),
    Flag(("--max-running-requests",)),
    Flag(("--tp-size", "--tp"), short="--tp-size"),
    Flag(("--page-size",)),
    Flag(("--chunked-prefill-size",)),
    Flag(("--swa-full-tokens-ratio",)),
    Flag(("--hicache-ratio",)),
    Flag(("--hicache-size",)),
), groups={"fit": "SGLang flags (sglang.launch_server's spellings and defaults)"}, uses={
    "fit": (
        Use("--mem-fraction-static", "mem_fraction_static", "share of free memory for weights + KV pool (default by "
            "TP: 0.88 … 0.79)", ("fraction",), "F"),
        Use("--context-length", "context_length", "tokens per request (default: the model's)", ("plain_count",), "L"),
        Use("--max-running-requests", "max_running_requests", "requests running at once", ("plain_count",), "N"),
        Use("--tp-size", "sglang_tp", "tensor parallel size; auto: a table of TP 1, 2, 4, 8", ("plain_tp_auto",),
            "N"),
        Use("--page-size", "page_size", "tokens per page (default 1)", ("plain_count",), "N"),
        Use("--chunked-prefill-size", "chunked_prefill_size", "prefill chunk (does not change the pool)",
            ("plain_count",), "N"),
        Use("--swa-full-tokens-ratio", "swa_full_tokens_ratio", "hybrid sliding-window models: SWA tokens per "
            "full-layer token (default 0.8)", ("fraction",), "R"),
    ),
    "whatif": (
        Use("--mem-fraction-static", "whatif_mfs", "SGLang's share of free memory", ("fraction",), "F"),
        Use("--context-length", "whatif_context_length", "SGLang's tokens per request", ("positive_int",), "L"),
    ),
    "whatif_gate": (
        Use("--mem-fraction-static", "whatif_mfs", "SGLang's share of free memory", ("fraction",), "F"),
        Use("--context-length", "whatif_context_length", "SGLang's tokens per request", ("positive_int",), "L"),
        # SGLang's spelling of the target sequences (its --context-length is the target length)
        Use("--max-running-requests", "sglang_max_running_requests", None, ("positive_int",), "N"),
    ),
    "tier": (
        Use("--hicache-ratio", "hicache_ratio", "SGLang HiCache host pool as a multiple of one rank's device pool "
            "(= --host-capacity)", ("real_open", 0.0, 2.0**20)),
        Use("--hicache-size", "hicache_size", "SGLang HiCache host pool per rank in GB (10^9 B); overrides "
            "--hicache-ratio, as in SGLang", ("count", 1, 2**40), "GB"),
    ),
})
