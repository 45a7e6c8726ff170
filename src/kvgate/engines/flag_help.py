"""How an engine package states its flags, light (no engine rules, no argparse):

- :class:`FlagHelp`: what ``kvgate help engine-flags`` says of one flag (the package's
  ``flag_help.py``, next to the rules whose defaults it states);
- :class:`Flag`, :class:`Use`, :class:`FlagTable`: its command-line flags as data, declared
  once (the package's ``flag_table.py``), which :mod:`kvgate.commands._flag_table` turns into
  every command's argparse options.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


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


@dataclass(frozen=True)
class Flag:
    """One engine flag as the engine spells it, declared once in its package's
    ``flag_table.py``: every spelling it takes (``names``) and what its value may be. Data
    only: :mod:`kvgate.commands._flag_table` turns it into argparse options.

    Attributes:
        names: the spellings, the engine's own first.
        short: the spelling messages name it by (default: the shortest of ``names``).
        choices, nargs, const: as argparse means them.
        action: ``store_true`` (a switch), ``optional_bool`` (``--[no-]x``) or ``None`` (a value).
    """

    names: tuple[str, ...]
    short: str = ""
    choices: tuple[str, ...] | None = None
    nargs: str | None = None
    const: str | None = None
    action: str | None = None

    @property
    def key(self) -> str:
        return self.names[0]

    @property
    def said(self) -> str:
        """The spelling messages use."""
        return self.short or min(self.names, key=len)


@dataclass(frozen=True)
class Use:
    """How one kvgate command takes a :class:`Flag` (by its :attr:`Flag.key`).

    Attributes:
        dest: the Namespace attribute it fills.
        help: its ``--help`` line there (``None``: hidden).
        type: ``(converter, *args)`` by name (:data:`kvgate.commands._flag_table.CONVERTERS`);
            ``()``: the text as given.
        metavar, default: as argparse means them (``None`` default: not given).
        names: the spellings taken there, when not all of :attr:`Flag.names` in their order.
        picks_engine: giving it names its engine (``False``: vLLM's and SGLang's both).
    """

    flag: str
    dest: str
    help: str | None
    type: tuple[Any, ...] = ()
    metavar: str | None = None
    default: Any = None
    names: tuple[str, ...] = ()
    picks_engine: bool = True


@dataclass(frozen=True)
class FlagTable:
    """An engine's flags (:class:`Flag`) and, per kvgate command, the ones it takes in
    ``--help`` order (:class:`Use`) and the title of their group there (``groups``): ``fit`` (before launch), ``layout`` (the KV layout:
    ``geometry``, ``gate``, ``run``, ``replay``, ``tier``), ``whatif`` (``import-log``),
    ``whatif_gate`` (``gate --engine-log``), ``tier``, ``import_log``."""

    engine: str
    flags: tuple[Flag, ...]
    uses: dict[str, tuple[Use, ...]]
    #: use -> the title of the engine's own group of flags in that command's ``--help``
    groups: dict[str, str]

    def flag(self, key: str) -> Flag:
        return next(f for f in self.flags if f.key == key)
