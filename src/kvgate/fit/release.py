"""Which engine release the answer is for: given, read from the installed engine, or the
newest one modelled (and said so)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib import metadata

from kvgate.engines.registry import ENGINES, get_engine
from kvgate.errors import KvgateError

#: Each engine's releases whose rules the code models, with where (its ``releases``): the
#: newest of them is the default when the engine is neither installed nor given
#: (:data:`NEWEST`). ``tests/test_fit_gguf_offload_bands_and_json.py`` checks that no
#: release threshold in the engine's modules is newer than its entry here.
MODELLED: dict[str, tuple[tuple[str, str], ...]] = {e: get_engine(e).releases for e in ENGINES}
#: the installed package each engine's version is read from (its ``dist``)
_DIST = {e: get_engine(e).dist for e in ENGINES}

#: Each engine's oldest release whose rules the code models, with where (its
#: ``oldest_release``): a release given below it is refused (:func:`resolve_release`), as
#: kvgate has no rule older than it.
OLDEST: dict[str, tuple[str, str]] = {e: get_engine(e).oldest_release for e in ENGINES}


@dataclass(frozen=True)
class Release:
    """An engine release: ``text`` as given/found, ``version`` as a tuple of ints, and
    ``how`` it was chosen (``given``, ``installed``, ``newest modelled``)."""

    engine: str
    text: str
    version: tuple[int, ...]
    how: str
    note: str | None = None

    def at_least(self, *v: int) -> bool:
        """True when this release is ``v`` or later."""
        return self.version >= v

    def to_dict(self) -> dict[str, str]:
        out = {"engine": self.engine, "release": self.text, "how": self.how}
        if self.note:
            out["note"] = self.note
        return out


def parse_version(text: str) -> tuple[int, ...]:
    """``"0.6.5"``, ``"v0.24.0"``, ``"0.15.2rc1.dev93+g11a4c9d30"`` → ints of the leading
    dotted numbers; ``"b4343"`` (llama.cpp build) → ``(4343,)``.

    Raises:
        KvgateError: no leading number.
    """
    t = text.strip().lower().lstrip("v")
    m = re.match(r"b?(\d+(?:\.\d+)*)", t)
    if not m:
        raise KvgateError(f"cannot read an engine release from {text!r}", hint="e.g. 0.11.0 (vLLM), b4343 (llama.cpp)")
    return tuple(int(x) for x in m.group(1).split("."))


def resolve_release(engine: str, given: str | None, flag: str = "--release") -> Release:
    """The release to model: ``given``, else the installed engine's package version,
    else :data:`NEWEST`.

    A release newer than :data:`NEWEST` is modelled by the newest rules, and says so in
    ``how`` and ``note``; an installed ``llama-cpp-python`` is not read as a llama.cpp build
    (its version, e.g. 0.3.36, is the binding's, not the ``bNNNN`` build it vendors).

    Raises:
        KvgateError: ``given`` (passed as ``flag``) is not a release, is not a llama.cpp
            build number (``bNNNN``) for llama.cpp, or is older than :data:`OLDEST`.
    """
    if given:
        return _given(engine, given, flag)
    note = None
    try:
        v = metadata.version(_DIST[engine])
        if not _builds(engine):
            return _above_newest(Release(engine, v, parse_version(v), "installed"), "the installed release")
        note = (f"llama-cpp-python {v} is installed: its version is the Python binding's, not a llama.cpp "
                f"build number, so it is not read as one; rules of {NEWEST[engine]} used (the newest kvgate "
                "models); pass --release bNNNN for the build it vendors")
    except (metadata.PackageNotFoundError, KeyError, KvgateError):
        pass
    return Release(engine, NEWEST[engine], parse_version(NEWEST[engine]),
                   "newest modelled (not installed, not given)" if note is None else
                   "newest modelled (llama-cpp-python's version is not a build number)", note)


def _given(engine: str, given: str, flag: str) -> Release:
    t = given.strip()
    if _builds(engine) and not re.fullmatch(r"[bB]?\d+", t):
        raise KvgateError(f"{flag} {given!r} is not a llama.cpp build number",
                          hint=f"a build as llama.cpp names it, e.g. b4343; kvgate models {OLDEST[engine][0]} … "
                               f"{NEWEST[engine]} (llama-cpp-python's own version, e.g. 0.3.36, is not a build)")
    if not _builds(engine) and not re.fullmatch(r"[vV]?\d+(\.\d+)*([.+-]?[0-9A-Za-z.+-]*)?", t):
        raise KvgateError(f"{flag} {given!r} is not a {_NAME.get(engine, engine)} release",
                          hint=f"e.g. {NEWEST.get(engine, '0.11.0')}; kvgate models {OLDEST[engine][0]} … {NEWEST[engine]}"
                          if engine in OLDEST else "e.g. 0.11.0")
    try:
        v = parse_version(t)
    except KvgateError:
        raise KvgateError(f"{flag} {given!r} is not an engine release", hint="e.g. 0.11.0 (vLLM), b4343 (llama.cpp)") from None
    if engine in OLDEST and _pad(v) < _pad(parse_version(OLDEST[engine][0])):
        lo, why = OLDEST[engine]
        raise KvgateError(f"{flag} {given} is older than any {_NAME[engine]} release kvgate models "
                          f"({lo} … {NEWEST[engine]})",
                          hint=f"pass a release from {lo} on ({why}), or leave {flag} out for the installed "
                               "engine, else the newest modelled")
    return _above_newest(Release(engine, given, v, "given"), f"{flag} {given}")


def _above_newest(r: Release, what: str) -> Release:
    """``r`` modelled by the newest rules when it is newer than :data:`NEWEST` (said in
    ``how`` and ``note``)."""
    if r.engine not in NEWEST or _pad(r.version) <= _pad(parse_version(NEWEST[r.engine])):
        return r
    new = NEWEST[r.engine]
    return Release(r.engine, r.text, parse_version(new), f"{r.how}; rules of {new} used, the newest kvgate models",
                   f"{what} is newer than any {_NAME[r.engine]} release kvgate models: rules of {new} used "
                   "(the newest kvgate models); what changed after it is not modelled")


def _pad(v: tuple[int, ...]) -> tuple[int, ...]:
    """``v`` with zeros up to three parts, so that 0.4 and 0.4.0 compare equal."""
    return v + (0,) * (3 - len(v))


#: each engine's own spelling (its ``display``)
_NAME = {e: get_engine(e).display for e in ENGINES}


def _builds(engine: str) -> bool:
    """The engine's releases are build numbers (``bNNNN``, llama.cpp's), not versions."""
    return engine in ENGINES and get_engine(engine).release_is_build


def _newest(engine: str) -> str:
    return max((r for r, _ in MODELLED[engine]), key=parse_version)


#: newest release of each engine whose rules are modelled here (from :data:`MODELLED`)
NEWEST = {e: _newest(e) for e in MODELLED}
