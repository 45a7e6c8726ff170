"""The engine flags kvgate accepts, documented once: each engine's spelling, its default
per release, what it changes, and which kvgate commands take it (``kvgate help
engine-flags [vllm|sglang|llama.cpp]``).

The defaults are the ones the rules use, with their sources: :mod:`kvgate.engines.vllm.flags`
(vLLM, per release), :mod:`kvgate.engines.sglang.flags` (SGLang 0.4 series),
:mod:`kvgate.engines.llamacpp.fit` (llama.cpp), :mod:`kvgate.engines.vllm.pool` (the block size).
Commands: ``fit`` (before launch), ``layout`` (``geometry``, ``gate``, ``run``, ``replay``:
the engine's KV layout, kvgate's ``--max-seq``/``--slots``/``--kv-format``/``--tp`` by their
engine names), ``what-if`` (``import-log`` and ``gate --engine-log``: the engine's answer
for settings other than the log's). The commands column is read from the parsers.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from kvgate.engines.registry import get_engine
from kvgate.errors import KvgateError
from kvgate.fit.release import NEWEST


@dataclass(frozen=True)
class EngineFlag:
    """One engine flag: ``spellings`` as the engine takes them, the ``default`` (per
    release where it changed), what it ``changes``, and ``roles``: what it stands for in
    kvgate (``layout (= --slots)``: kvgate's own option of the same meaning). The commands
    taking it are read from the parsers (:func:`commands_taking`), never written by hand."""

    spellings: str
    default: str
    changes: str
    roles: str
    #: what the flag means next to an engine log (``import-log LOG``, ``gate --engine-log LOG``):
    #: :data:`LOG_RULE` applied to this flag; empty where the flag has no part in a log command
    with_a_log: str = ""

    @property
    def options(self) -> list[str]:
        """The option strings of :attr:`spellings` (``--[no-]x`` gives ``--x`` and ``--no-x``)."""
        out = []
        for s in re.findall(r"(?<![\w\]-])(-{1,2}(?:\[no-\])?[a-z][a-z0-9-]*)", self.spellings):
            out += [s.replace("[no-]", ""), s.replace("[no-]", "no-")] if "[no-]" in s else [s]
        return out

    @property
    def commands(self) -> str:
        """The kvgate commands whose parser takes one of :attr:`options`, comma-separated;
        ``gate`` also with ``--engine-log`` (the engine-log gate reads the same options)."""
        cmds = [c for c, opts in _parser_options().items() if set(self.options) & opts]
        return ", ".join("gate (also with --engine-log)" if c == "gate" else c for c in cmds)

    @property
    def alias(self) -> str:
        """kvgate's own options of the same meaning (``--slots`` …), from :attr:`roles`."""
        return ", ".join(re.findall(r"= (--[a-z-]+)", self.roles))


_OPTIONS: dict[str, set[str]] = {}


def _parser_options() -> dict[str, set[str]]:
    """``{command: its option strings}`` of every kvgate command, sorted by name (read once
    from :func:`kvgate.cli.build_parser`; this module sits with the commands for that)."""
    if not _OPTIONS:
        from kvgate.cli import build_parser  # noqa: PLC0415

        # the subcommands' action: the one whose choices map names to parsers
        choices = next(a.choices for a in build_parser()._actions if isinstance(a.choices, dict))
        for name in sorted(choices):
            _OPTIONS[name] = {o for a in choices[name]._actions for o in a.option_strings}
    return _OPTIONS



#: the one rule for log commands (``import-log LOG``, ``gate --engine-log LOG``), as
#: ``import-log --help`` and the README ("What if, from an engine log") state it;
#: kvgate.commands._engine_log.resolve_log_settings applies it
LOG_RULE = ("with a log (import-log LOG, gate --engine-log LOG), one rule: kvgate's own spellings (--tp, --kv-format, "
            "--pp) describe the LOG where it does not say; the engine's spellings (-tp, --kv-cache-dtype, -ctk/-ctv, "
            "--max-model-len, -c, ...) are a WHAT-IF where they differ from what the log states, and are taken as the "
            "log's own, with a note, where the log does not state the value (unless the log's own numbers decide: "
            "the cross-check then makes the flag the what-if, and says so)")


def _log_rule(flag: str, own: str, what: str, *, whatif: bool = True, auto: bool = False) -> str:
    """:data:`LOG_RULE` for one engine ``flag`` whose kvgate spelling is ``own``."""
    differ = ("the what-if where it differs from the log's" if whatif
              else "refused where it differs from the log's (a what-if for it is not modelled)")
    text = (f"next to a log, {own} (kvgate's) describes the log when the log does not state its {what}; "
            f"{flag} is {differ}, and the log's own, with a note, where the log states none")
    return text + ("; with neither, a vLLM or SGLang log that states none ran auto: the model's dtype (noted)" if auto else "")


FLAGS: dict[str, list[EngineFlag]] = {
    "vllm": [
        EngineFlag("--gpu-memory-utilization U", "0.9; 0.92 from 0.20.0",
                   "the share of the GPU's CUDA total vLLM takes; the KV cache pool is what is left after weights, "
                   "the profile run's activation peak, non-torch memory and (0.21+) the CUDA graph pool",
                   "fit, what-if"),
        EngineFlag("--max-model-len L", "the model's length as vLLM derives it (max_position_embeddings, × the "
                   "rope_scaling factor; longrope from 0.12: original_max_position_embeddings); above it refused "
                   "unless VLLM_ALLOW_LONG_MAX_MODEL_LEN=1; 32k = 32,000, 32K = 32,768, auto = the largest that fits", "tokens per request: one request must fit the pool; \"Maximum "
                   "concurrency\" is counted at L", "fit, layout (= --max-seq), what-if"),
        EngineFlag("--max-num-seqs N", "256; V1 (0.8+) on GPUs of 70 GiB or more other than A100: 1024",
                   "sequences per step: the sampler's share of the activation peak; requests beyond the pool's "
                   "concurrency wait in the queue", "fit, layout (= --slots)"),
        EngineFlag("--max-num-batched-tokens N", "V0: max(L, 2048), or 2048 with chunked prefill above L = 32,768 "
                   "(512 before 0.6.4); V1: 2048, or 8192 on GPUs of 70 GiB or more other than A100",
                   "tokens per step: the profile run's activation peak; sliding-window blocks", "fit, layout"),
        EngineFlag("--dtype DTYPE", "auto: the config's dtype, float32 models downcast (bfloat16, float16 before "
                   "compute capability 8.0)", "the model's dtype: --kv-cache-dtype auto and the loaded weights "
                   "follow it (float32 doubles both); float16 refused for gemma2/gemma3/glm4", "fit"),
        EngineFlag("-tp, --tensor-parallel-size N", "1; auto: a table of 1, 2, 4, 8", "KV heads and weights split over "
                   "N GPUs (MLA latents are not split)", "fit, layout (= --tp), what-if", _log_rule("-tp", "--tp", "tensor parallel size")),
        EngineFlag("-pp, --pipeline-parallel-size N", "1", "layers split over N stages", "fit",
                   _log_rule("-pp", "--pp", "pipeline parallel size", whatif=False)),
        EngineFlag("--kv-cache-dtype DTYPE", "auto (the model's dtype); fp8, fp8_e4m3, fp8_e5m2",
                   "bytes per cached K/V element", "fit, layout (= --kv-format), what-if",
                   _log_rule("--kv-cache-dtype", "--kv-format", "KV cache dtype", auto=True)),
        EngineFlag("--kv-cache-memory-bytes B", "not set", "the KV pool per GPU, bypassing "
                   "--gpu-memory-utilization", "fit"),
        EngineFlag("--quantization, -q METHOD", "the checkpoint's quant_method", "must match the checkpoint "
                   "(gptq/awq also take their marlin kernels); on an unquantized checkpoint vLLM quantizes while "
                   "loading: give --weights-bytes; never the KV dtype", "fit"),
        EngineFlag("--enforce-eager", "off", "no CUDA graphs: their pool is 0", "fit"),
        EngineFlag("--block-size N", "16 on CUDA", "tokens per KV block: the pool is whole blocks", "fit, layout, "
                   "import-log"),
        EngineFlag("--disable-hybrid-kv-cache-manager", "off", "sliding-window layers kept at full length", "layout"),
        EngineFlag("--[no-]enable-prefix-caching", "on (V1)", "Mamba state pages of hybrid models", "layout"),
        EngineFlag("--speculative-config JSON", "not set", "a draft model's KV beside the target's", "layout"),
        EngineFlag("--mamba-ssm-dtype, --mamba-cache-dtype", "the model's", "recurrent state bytes", "layout"),
        EngineFlag("--vllm-version, --release X.Y.Z", f"the installed vLLM, else the newest modelled ({NEWEST['vllm']})",
                   "which release's defaults and rules apply (V0 up to 0.7, V1 from 0.8; the CUDA graph pool "
                   "subtracted from 0.21)", "fit, layout, what-if"),
    ],
    "sglang": [
        EngineFlag("--mem-fraction-static F", "0.4 series, by TP: 0.88 (1), 0.87 (2+), 0.85 (4+), 0.81 (8+), "
                   "0.79 (16+), × 0.95 for multimodal models; computed from the GPU from 0.4.7 (give the logged value)",
                   "the share of free memory at start for weights + KV pool: max_total_num_tokens", "fit, what-if"),
        EngineFlag("--context-length L", "the model's length as SGLang derives it (get_context_length); above it "
                   "refused unless SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1", "tokens per request; requests are "
                   "capped at max_total_num_tokens − 1", "fit, what-if"),
        EngineFlag("--dtype DTYPE", "auto: the config's dtype, float32 models in float16 (bfloat16 for Gemma)",
                   "the model's dtype: --kv-cache-dtype auto and the loaded weights follow it", "fit"),
        EngineFlag("--max-running-requests N", "computed by SGLang", "requests at once (the pool is unchanged; "
                   "more than fit wait in the queue)", "fit"),
        EngineFlag("--tp-size, --tensor-parallel-size N", "1; auto: a table of 1, 2, 4, 8", "KV heads and weights "
                   "split over N GPUs; must split the attention heads (SGLang asserts it)", "fit (what-if: -tp)",
                   _log_rule("-tp (or --tp-size)", "--tp", "tensor parallel size")),
        EngineFlag("--kv-cache-dtype DTYPE", "auto (the model's dtype); fp8_e4m3, fp8_e5m2", "bytes per cached "
                   "K/V element", "fit, what-if", _log_rule("--kv-cache-dtype", "--kv-format", "KV cache dtype",
                                                            auto=True)),
        EngineFlag("--page-size N", "1", "max_total_num_tokens rounded down to whole pages", "fit"),
        EngineFlag("--chunked-prefill-size N", "by GPU", "prefill chunk (the pool is unchanged)", "fit"),
        EngineFlag("--swa-full-tokens-ratio R", "0.8", "hybrid sliding-window models (SWAKVPool, by release): "
                   "SWA-layer tokens per full-layer token, the budget split between the two pools", "fit"),
    ],
    "llama.cpp": [
        EngineFlag("-c, --ctx-size N", "0 = the model's context (n_ctx_train)", "the WHOLE context of all "
                   "sequences: each of -np gets -c / -np cells, padded to 256", "fit, layout, what-if"),
        EngineFlag("-np, --parallel N", "1", "parallel sequences (streams) sharing -c", "fit, layout (= --slots), "
                   "what-if"),
        EngineFlag("-ctk, --cache-type-k TYPE", "f16; q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, bf16, f32", "bytes "
                   "per cached K row (ggml blocks)", "fit, layout, what-if",
                   _log_rule("-ctk", "--kv-format", "K cache type") + "; -ctk alone changes K only"),
        EngineFlag("-ctv, --cache-type-v TYPE", "f16 (a quantized V needs -fa)", "bytes per cached V row",
                   "fit, layout, what-if", _log_rule("-ctv", "--kv-format", "V cache type")),
        EngineFlag("-ngl, --n-gpu-layers N", "999 = all (recent builds); unset, --fit picks it", "layers (and their KV) on the GPU",
                   "fit"),
        EngineFlag("-fa, --flash-attn on|off|auto", "auto", "off pads V to the KV block; the compute buffer's "
                   "KQ scores", "fit, layout"),
        EngineFlag("-ub, --ubatch-size N", "512", "the compute buffer; iSWA cache cells", "fit, layout"),
        EngineFlag("-b, --batch-size N", "2048", "the logical batch (-ub is clamped to it)", "fit, layout"),
        EngineFlag("-fit, --fit on|off", "on (builds from ~b7400; before: no such flag)", "without -ngl, moves "
                   "layers to the CPU (and, without -c, shrinks the context) until 1024 MiB stay free", "fit"),
        EngineFlag("-kvu, --kv-unified", "off", "one KV cache for all sequences instead of one stream each",
                   "fit, layout"),
        EngineFlag("--swa-full", "off", "sliding-window layers at full size", "layout"),
    ],
}

COMMANDS_NOTE = ("commands (read from each command's parser): fit = before launch; geometry, gate, run, replay = the "
                 "engine's KV layout; import-log LOG and gate --engine-log LOG = the engine's answer for other settings "
                 "than the log's, its non-KV terms carried over")


def render_engine_flags(engine: str | None = None, width: int = 100) -> str:
    """The flags of ``engine`` (``vllm``, ``sglang``, ``llama.cpp``; ``None``: all three)
    as text: one block per flag (spellings; default; what it changes; commands).

    Raises:
        KvgateError: an unknown engine name.
    """
    if engine is not None and engine not in FLAGS:
        raise KvgateError(f"no engine {engine!r}", hint=f"one of: {', '.join(FLAGS)}")
    out = ["Engine flags kvgate accepts, spelled as each engine spells them (one engine at a time).", ""]
    out += textwrap.wrap(COMMANDS_NOTE, width)
    out += [""] + textwrap.wrap(LOG_RULE, width)
    for e in [engine] if engine else list(FLAGS):
        out += ["", get_engine(e).launcher]
        for f in FLAGS[e]:
            out.append(f"  {f.spellings}")
            rows = [("default", f.default), ("changes", f.changes), ("commands", f.commands or "none")]
            if f.with_a_log:
                rows.append(("with a log", f.with_a_log))
            if f.alias:
                rows.append(("kvgate's own name", f.alias))
            for label, text in rows:
                out += textwrap.wrap(f"{label}: {text}", width, initial_indent="      ", subsequent_indent="        ")
    return "\n".join(out)


def engine_flags_dict(engine: str | None = None) -> dict[str, list[dict[str, str | None]]]:
    """The ``--json`` form: ``{engine: [{spellings, default, changes, commands, kvgate_name}, ...]}``."""
    if engine is not None and engine not in FLAGS:
        raise KvgateError(f"no engine {engine!r}", hint=f"one of: {', '.join(FLAGS)}")
    return {e: [{"spellings": f.spellings, "default": f.default, "changes": f.changes, "commands": f.commands,
                 "kvgate_name": f.alias or None, "with_a_log": f.with_a_log or None}
                for f in FLAGS[e]] for e in ([engine] if engine else FLAGS)}
