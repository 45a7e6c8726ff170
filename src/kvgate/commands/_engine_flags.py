"""The engine flags kvgate accepts, documented once: each engine's spelling, its default
per release, what it changes, and which kvgate commands take it (``kvgate help
engine-flags [vllm|sglang|llama.cpp]``).

Each engine states its flags in its own package (``engines/<name>/flag_help.py``, asked through
:meth:`kvgate.engines.base.Engine.flag_help`), their defaults taken from the rules that use them.
Commands: ``fit`` (before launch), ``layout`` (``geometry``, ``gate``, ``run``, ``replay``:
the engine's KV layout, kvgate's ``--max-seq``/``--slots``/``--kv-format``/``--tp`` by their
engine names), ``what-if`` (``import-log`` and ``gate --engine-log``: the engine's answer
for settings other than the log's). The commands column is read from the parsers.
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass

from kvgate.engines.flag_help import FlagHelp
from kvgate.engines.registry import engines, get_engine
from kvgate.errors import KvgateError


@dataclass(frozen=True)
class EngineFlag(FlagHelp):
    """One engine flag as its engine states it (:class:`kvgate.engines.flag_help.FlagHelp`:
    spellings, default, what it changes, roles, its part next to a log), with the kvgate
    commands taking it read from the parsers (:func:`commands_taking`), never written by hand."""

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


#: engine name -> its flags, as its package states them (:meth:`kvgate.engines.base.Engine.flag_help`)
FLAGS: dict[str, list[EngineFlag]] = {e.name: [EngineFlag(**vars(f)) for f in e.flag_help()] for e in engines()}

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
    out += textwrap.wrap(COMMANDS_NOTE, width, break_on_hyphens=False)  # never "--kv-" / "format"
    out += [""] + textwrap.wrap(LOG_RULE, width, break_on_hyphens=False)
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
                out += textwrap.wrap(f"{label}: {text}", width, initial_indent="      ", subsequent_indent="        ",
                                     break_on_hyphens=False)
    return "\n".join(out)


def engine_flags_dict(engine: str | None = None) -> dict[str, list[dict[str, str | None]]]:
    """The ``--json`` form: ``{engine: [{spellings, default, changes, commands, kvgate_name}, ...]}``."""
    if engine is not None and engine not in FLAGS:
        raise KvgateError(f"no engine {engine!r}", hint=f"one of: {', '.join(FLAGS)}")
    return {e: [{"spellings": f.spellings, "default": f.default, "changes": f.changes, "commands": f.commands,
                 "kvgate_name": f.alias or None, "with_a_log": f.with_a_log or None}
                for f in FLAGS[e]] for e in ([engine] if engine else FLAGS)}
