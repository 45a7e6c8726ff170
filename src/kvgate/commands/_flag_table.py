"""The one builder of engine flags: each engine declares its flags once, as data, in its
package (``engines/<name>/flag_table.py``: :class:`~kvgate.engines.flag_help.FlagTable`);
here they become argparse options (:func:`add_engine_table_flags`), and a parsed Namespace
says which engine's flags were given (:func:`given_engine_flags`)."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterable
from typing import Any

from kvgate.commands._types import _arg, count, nonneg_int, positive_int, real, vllm_int
from kvgate.engines.flag_help import Flag, FlagTable, Use
from kvgate.errors import KvgateError


def _human_int(flag: str, allow_auto: bool = False) -> Callable[[str], int]:
    """vLLM's ``human_readable_int`` (:mod:`kvgate.fit.humanint`); ``auto`` (``allow_auto``) is -1."""
    def parse(text: str) -> int:
        from kvgate.fit.humanint import human_readable_int  # noqa: PLC0415

        v = human_readable_int(text, flag=flag, allow_auto=allow_auto)
        return -1 if v is None else v  # auto / -1
    return _arg(parse)


_unit_fraction = real(0.0, 1.0, open_min=True)


def fraction(text: str) -> float:
    """A share in (0, 1] (``--gpu-memory-utilization``, ``--mem-fraction-static``)."""
    return _unit_fraction(text)


def _plain_int(convert: Callable[[str], Any], engine: str) -> Callable[[str], Any]:
    """``convert`` with the engine's rule said on a bad value: its integer flags take plain
    numbers, no ``k`` suffix (SGLang's ``server_args.py`` ``type=int``, llama.cpp's
    ``common/arg.cpp`` ``std::stoi``); ``engine`` is the registry's name, shown as the engine
    spells itself."""
    def parse(text: str) -> Any:
        try:
            return convert(text)
        except argparse.ArgumentTypeError as exc:
            if not str(exc).startswith(("not a number", "must be a whole number")):
                raise
            from kvgate.engines.registry import get_engine  # noqa: PLC0415  (only on a bad value)

            raise argparse.ArgumentTypeError(f"{exc} ({get_engine(engine).display} takes plain numbers)") from None
    return parse


def _tp_or_auto(convert: Callable[[str], int | None]) -> Callable[[str], int | None]:
    """A TP size, or ``auto`` (-1): the table over TP 1, 2, 4, 8 (:mod:`kvgate.fit.tp_table`)."""
    def parse(text: str) -> int | None:
        return -1 if text.strip().lower() == "auto" else convert(text)
    return parse



def _yes_no(flag: str) -> Callable[[str], bool]:
    """``yes``/``no`` (also on/off, true/false, 1/0) as a bool."""
    def parse(text: str) -> bool:
        t = text.strip().lower()
        if t in ("yes", "on", "true", "1"):
            return True
        if t in ("no", "off", "false", "0"):
            return False
        raise argparse.ArgumentTypeError(f"{flag} takes yes or no, got {text!r}")
    return parse


def _parse_bytes(text: str) -> int:
    from kvgate.units import parse_bytes  # noqa: PLC0415

    return parse_bytes(text)


parse_bytes_arg = _arg(_parse_bytes)


def _json_object(text: str) -> dict[str, Any]:
    from kvgate.guarded import loads_json  # noqa: PLC0415

    v = loads_json(text, what="the value")  # depth and digits guarded: never a traceback
    if not isinstance(v, dict):
        raise KvgateError("must be a JSON object, e.g. '{\"method\": \"ngram\", \"num_speculative_tokens\": 4}'")
    return v


json_object = _arg(_json_object)


#: :attr:`Use.type`'s converter names: ``(flag as messages name it, *args) -> argparse type``
CONVERTERS: dict[str, Callable[..., Callable[[str], Any]]] = {
    "fraction": lambda said: fraction,
    "human_int": lambda said: _human_int(said),
    "human_int_auto": lambda said: _human_int(said, allow_auto=True),
    "tp_auto": lambda said: _tp_or_auto(_human_int(said)),
    "plain_count": lambda said, hi=None: count(0, hi) if hi else nonneg_int,  # plain_*: _add names the engine
    "plain_positive": lambda said, hi=None: count(1, hi) if hi else positive_int,
    "plain_tp_auto": lambda said: _tp_or_auto(nonneg_int),
    "bytes": lambda said: parse_bytes_arg,
    "lower": lambda said: str.lower,
    "yes_no": lambda said: _yes_no(said),
    "vllm_int": lambda said: vllm_int,
    "positive_int": lambda said: positive_int,
    "nonneg_int": lambda said: nonneg_int,
    "json_object": lambda said: json_object,
    "count": lambda said, lo, hi: count(lo, hi),
    "real": lambda said, lo, hi: real(lo, hi),
    "real_open": lambda said, lo, hi: real(lo, hi, open_min=True),
}


def tables() -> list[FlagTable]:
    """Every engine's flag table, in the registry's order."""
    from kvgate.engines.registry import ENGINES, flag_table  # noqa: PLC0415

    return [flag_table(e) for e in ENGINES]


def _add(p: Any, flag: Flag, use: Use, engine: str) -> None:
    kw: dict[str, Any] = {"dest": use.dest, "default": use.default,
                          "help": argparse.SUPPRESS if use.help is None else use.help}
    if flag.action == "optional_bool":
        kw["action"] = argparse.BooleanOptionalAction
    elif flag.action:
        kw["action"] = flag.action
        del kw["default"]
    if use.metavar is not None:
        kw["metavar"] = use.metavar
    if use.type:
        kw["type"] = CONVERTERS[use.type[0]](flag.said, *use.type[1:])
        if use.type[0].startswith("plain_"):
            kw["type"] = _plain_int(kw["type"], engine)
    for k in ("choices", "nargs", "const"):
        if getattr(flag, k) is not None:
            kw[k] = getattr(flag, k)
    p.add_argument(*(use.names or flag.names), **kw)


def add_engine_table_flags(p: Any, use: str, engines: Iterable[str] | None = None) -> None:
    """The flags that the engines (``None``: all, in the registry's order) declare for the
    command kind ``use``, onto ``p`` (a parser or a group)."""
    for t in tables():
        if engines is None or t.engine in engines:
            for u in t.uses.get(use, ()):
                _add(p, t.flag(u.flag), u, t.engine)


def given_engine_flags(args: argparse.Namespace, use: str, *, joined: bool = False) -> dict[str, list[str]]:
    """``{engine: its flags given}`` over every engine's flags of ``use`` (an engine with
    none given still has its empty list): a flag counts as given when its value is neither
    ``None``, ``False`` nor its default. Each is named by :attr:`Flag.said`, or with
    ``joined`` by its first two spellings (``-c/--ctx-size``, ``--[no-]enable-prefix-caching``)."""
    a = vars(args)
    out: dict[str, list[str]] = {}
    for t in tables():
        out[t.engine] = []
        for u in t.uses.get(use, ()):
            v = a.get(u.dest)
            if not u.picks_engine or v is None or v is False or v == u.default:
                continue
            f = t.flag(u.flag)
            names = u.names or f.names
            said = ("--[no-]" + names[0][2:] if f.action == "optional_bool" else "/".join(names[:2])) if joined \
                else f.said
            out[t.engine].append(said)
    return out


def add_engine_groups(p: argparse.ArgumentParser, use: str) -> None:
    """One group per engine that declares flags for ``use``, titled as it says, in the
    registry's order."""
    for t in tables():
        if t.uses.get(use):
            add_engine_table_flags(p.add_argument_group(t.groups[use]), use, [t.engine])
