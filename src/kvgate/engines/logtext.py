"""Reading engine logs as people paste them: process tags, timestamps, terminal wraps.

A startup log reaches kvgate after passing through a terminal, ``docker compose``,
``journalctl`` or a GitHub issue. This module turns such text into *logical lines*
(one log record each) tagged with the rank that wrote them, and holds the one type every
figure read from a log is kept in: :class:`Logged`, an int of bytes with the interval
the printed rounding cannot undo.

Prefixes removed (any number, in any order, each optional):

- ANSI colour codes and ``\\r`` progress-bar rewrites;
- ``docker compose`` service columns ``qwen3-1  | `` and e-mail quotes ``> ``;
- ISO timestamps in brackets ``[2025-08-12T08:42:32Z]``;
- systemd journal heads ``Sep 11 01:16:15 host ollama[1884]:``;
- vLLM process tags ``(VllmWorker rank=0 pid=105)``, ``(Worker_TP1 pid=26348)``,
  ``(EngineCore_DP0 pid=26283)``, ``(APIServer pid=1)``; the rank is kept;
- llama.cpp's ``[47161] 0.14.912.338 I `` timestamps of ``--log-timestamps``.

A physical line that carries no record head (``INFO 05-01 12:00:00``,
``[2025-… TP0]``, ``llama_context:``-style ``name:``) continues the previous record: a
terminal hard-wraps at its width, so the pieces are joined without a separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

GIB = 1 << 30
MIB = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_COMPOSE = re.compile(r"^[A-Za-z0-9_.\-]+\s+\|\s?")
_QUOTE = re.compile(r"^>\s?")
_ISO = re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s*")
_JOURNAL = re.compile(r"^[A-Z][a-z]{2}\s+\d+\s+\d\d:\d\d:\d\d\s+\S+\s+[\w.\-]+\[\d+\]:\s*")
_VLLM_TAG = re.compile(r"^\((?P<who>[A-Za-z_]+[A-Za-z0-9_]*)(?:\s+rank=(?P<rank>\d+))?\s+pid=\d+\)\s*")
_LLAMA_TS = re.compile(r"^(?:\[\d+\]\s+)?\d+\.\d\d\.\d{3}\.\d{3}\s+[IWEDT]\s+(?:(?:srv|cmn|slot|que|res|ctx|log)\s+)?")
_LLAMA_PID = re.compile(r"^\[\d+\]\s+")
_LLAMA_DEBUG = re.compile(r"^\[llama (?:Debug|Info|Warning|Error)\]:\s*")

# A record head: vLLM's "INFO 05-01 12:00:00", SGLang's "[2025-03-27 21:33:30 TP0]",
# llama.cpp's "llama_context:" / "print_info:", Python logging "2025-10-08 06:07:53,528".
_HEADS = (
    re.compile(r"^(?:INFO|WARNING|DEBUG|ERROR|CRITICAL|WARN)\s+\d\d-\d\d\s"),
    re.compile(r"^\[\d{4}-\d\d-\d\d[ T][\d:]+(?:\s[A-Z0-9 ]+)?\]"),
    re.compile(r"^\d{4}-\d\d-\d\d[ T][\d:,.]+"),
    re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:\s"),
    re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*:\s*$"),
    re.compile(r"^(?:main|build|system_info|srv|slot|que|init)\b"),
)


@dataclass(frozen=True)
class Line:
    """One logical log record. ``rank`` is the tensor-parallel rank when a tag named it
    (``rank=3``, ``Worker_TP3``, SGLang ``TP3``), else ``None``; ``number`` is the
    1-based physical line it starts on."""

    text: str
    rank: int | None
    number: int


def _strip(raw: str) -> tuple[str, int | None]:
    s = _ANSI.sub("", raw).rstrip("\n")
    if "\r" in s:
        s = s.split("\r")[-1]
    rank = None
    for _ in range(6):
        before = s
        for rx in (_QUOTE, _COMPOSE, _ISO, _JOURNAL, _LLAMA_TS, _LLAMA_PID, _LLAMA_DEBUG):
            s2 = rx.sub("", s, count=1)
            if s2 != s and rx is _COMPOSE and _head(s):
                continue  # "llama_context: n_ctx | …" is not a compose column
            s = s2
        m = _VLLM_TAG.match(s)
        if m:
            who = m.group("who")
            if m.group("rank") is not None:
                rank = int(m.group("rank"))
            else:
                t = re.search(r"TP(\d+)", who)
                if t:
                    rank = int(t.group(1))
            s = s[m.end():]
        if s == before:
            break
    m = re.match(r"^\[\d{4}-\d\d-\d\d [\d:]+ (?:DP\d+ )?TP(\d+)", s)
    if m:
        rank = int(m.group(1))
    return s.strip(), rank


def _head(s: str) -> bool:
    return any(rx.match(s) for rx in _HEADS)


def logical_lines(text: str) -> list[Line]:
    """Logical records of a pasted log (module docstring); empty lines dropped."""
    out: list[Line] = []
    for n, raw in enumerate(text.splitlines(), start=1):
        s, rank = _strip(raw)
        if not s:
            continue
        if out and not _head(s) and rank is None and _head(out[-1].text):
            prev = out[-1]
            out[-1] = Line(prev.text + s, prev.rank, prev.number)
            continue
        out.append(Line(s, rank, n))
    return out


@dataclass(frozen=True)
class Logged:
    """A byte count read from a log, with the interval its printed rounding allows.

    ``bytes`` is the printed value × unit rounded to the nearest byte; the true value
    lies in ``[low, high]`` (both ints, inclusive): the printed decimals are half a last
    digit either way (``5.98 GiB`` → 5.975 … 5.985 GiB). ``text`` is what was printed.
    """

    bytes: int
    low: int
    high: int
    text: str

    def contains(self, n: int) -> bool:
        return self.low <= n <= self.high

    def to_dict(self) -> dict[str, Any]:
        return {"bytes": self.bytes, "low": self.low, "high": self.high, "text": self.text}


def logged(number: str, unit_bytes: int, unit_name: str) -> Logged:
    """``Logged`` for a printed decimal ``number`` in a unit of ``unit_bytes``.

    >>> logged("2.30", 1 << 30, "GiB").low
    2464237487
    """
    value = Fraction(number)
    decimals = len(number.split(".")[1]) if "." in number else 0
    half = Fraction(1, 2 * 10 ** decimals)
    lo = (value - half) * unit_bytes
    hi = (value + half) * unit_bytes
    # the printer rounds half-to-even or half-up: keep both ends (ceil/floor, inclusive)
    return Logged(round(value * unit_bytes), max(0, -(-lo.numerator // lo.denominator)),
                  hi.numerator // hi.denominator, f"{number} {unit_name}")


def to_int(s: str) -> int:
    """``"75,840"`` → 75840."""
    return int(s.replace(",", "").replace("_", ""))


_LAUNCH = re.compile(r"(?:vllm serve|sglang\.launch_server|llama-server|vllm\.entrypoints\.openai\.api_server)\b(.*)")


def launch_flags(text: str) -> dict[str, str]:
    """``--flag value`` pairs of a launch command pasted with the log (``vllm serve M
    --tensor-parallel-size 4``, ``python -m sglang.launch_server --tp 4``,
    ``llama-server -c 8192 -np 4``); a flag without a value maps to ``"true"``; a
    positional model after ``vllm serve`` to ``"model"``. Continuation backslashes are
    joined first."""
    joined = re.sub(r"\\\s*\n", " ", text)
    out: dict[str, str] = {}
    for m in _LAUNCH.finditer(joined):
        toks = m.group(1).split()
        i = 0
        if "vllm serve" in m.group(0) and toks and not toks[0].startswith("-"):
            out["model"] = toks[0]
            i = 1
        while i < len(toks):
            t = toks[i]
            if t.startswith("-"):
                key = t.lstrip("-").replace("-", "_")
                if "=" in key:
                    key, val = key.split("=", 1)
                    out[key] = val
                elif i + 1 < len(toks) and not toks[i + 1].startswith("-"):
                    out[key] = toks[i + 1].strip("'\"")
                    i += 1
                else:
                    out[key] = "true"
            i += 1
    return out
