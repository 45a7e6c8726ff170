"""What ``kvgate help engine-flags`` says of one engine flag, as each engine package writes
it (its ``flag_help.py``, next to the rules whose defaults it states). Light: no engine rules.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FlagHelp:
    """One engine flag: ``spellings`` as the engine takes them, the ``default`` (per
    release where it changed), what it ``changes``, and ``roles``: what it stands for in
    kvgate (``layout (= --slots)``: kvgate's own option of the same meaning)."""

    spellings: str
    default: str
    changes: str
    roles: str
    #: what the flag means next to an engine log (``import-log LOG``, ``gate --engine-log LOG``):
    #: the one rule for log commands applied to this flag; empty where the flag has no part in one
    with_a_log: str = ""


def log_rule(flag: str, own: str, what: str, *, whatif: bool = True, auto: bool = False) -> str:
    """The rule for log commands (``kvgate.commands._engine_flags.LOG_RULE``) for one engine
    ``flag`` whose kvgate spelling is ``own``."""
    differ = ("the what-if where it differs from the log's" if whatif
              else "refused where it differs from the log's (a what-if for it is not modelled)")
    text = (f"next to a log, {own} (kvgate's) describes the log when the log does not state its {what}; "
            f"{flag} is {differ}, and the log's own, with a note, where the log states none")
    return text + ("; with neither, a vLLM or SGLang log that states none ran auto: the model's dtype (noted)" if auto else "")


def release_text(version: tuple[int, ...]) -> str:
    """``(0, 20)`` as ``0.20.0``: the release a default changed at."""
    return ".".join(map(str, (*version, 0, 0)[:3]))
