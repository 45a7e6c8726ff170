"""Reading engine logs as people paste them: process tags, timestamps, terminal wraps.

A startup log reaches kvgate after passing through a terminal, ``docker compose``,
``journalctl`` or a GitHub issue. This module turns such text into *logical lines*
(one log record each) tagged with the rank that wrote them, and holds the one type every
figure read from a log is kept in: :class:`Logged`, an int of bytes with the interval
the printed rounding cannot undo.

Prefixes removed (any number, in any order, each optional):

- ANSI colour codes and ``\\r`` progress-bar rewrites;
- ``docker compose`` service columns ``qwen3-1  | `` (the service is kept: two services
  are two servers) and e-mail quotes ``> ``;
- ISO timestamps in brackets ``[2025-08-12T08:42:32Z]``;
- systemd journal heads ``Sep 11 01:16:15 host ollama[1884]:``;
- vLLM process tags ``(VllmWorker rank=0 pid=105)``, ``(Worker_TP1 pid=26348)``,
  ``(Worker_PP1_TP0 pid=…)``, ``(Worker_TP0_DCP0_EP0 pid=…)``, ``(EngineCore_DP0 pid=26283)``,
  ``(APIServer pid=1)``, Ray's ``(RayWorkerWrapper pid=4041, ip=172.17.0.2)``; the process
  name, its rank and its pid are kept;
- llama.cpp's ``[47161] 0.14.912.338 I `` timestamps of ``--log-timestamps``.

A line holding a run of more than :data:`MAX_LOG_DIGITS` digits is refused
(:class:`LogNumberError`): no engine prints such a number, and Python refuses to convert
one (``sys.get_int_max_str_digits``); a figure kvgate reads has at most
:data:`MAX_FIGURE_DIGITS` digits.

A physical line that carries no record head (and does not start a shell command) (``INFO 05-01 12:00:00``,
``[2025-… TP0]``, ``llama_context:``-style ``name:``) continues the previous record: a
terminal hard-wraps at its width, so the pieces are joined without a separator.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from kvgate.errors import KvgateError

GIB = 1 << 30
MIB = 1 << 20

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_COMPOSE = re.compile(r"^(?P<service>[A-Za-z0-9_.\-]+)\s+\|\s?")
_QUOTE = re.compile(r"^>\s?")
_ISO = re.compile(r"^\[\d{4}-\d\d-\d\dT[\d:.]+Z?\]\s*")
_JOURNAL = re.compile(r"^[A-Z][a-z]{2}\s+\d+\s+\d\d:\d\d:\d\d\s+\S+\s+[\w.\-]+\[\d+\]:\s*")
_VLLM_TAG = re.compile(r"^\((?P<who>[A-Za-z_]+[A-Za-z0-9_]*(?:\s+[A-Z]+\d+(?:_[A-Z]+\d+)*)?)"
                       r"(?:\s+rank=(?P<rank>\d+))?,?\s+pid=(?P<pid>\d+)(?:,\s*ip=[\w.:\-]+)?\)\s*")
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
    re.compile(r"^\[[A-Za-z][\w.\- ]*\]\s"),  # a bracketed program tag: "[WASI-NN] llama.cpp: …"
    re.compile(r"^(?:size|KV self size)\s*=\s*\d"),  # a llama.cpp cache line whose prefix an excerpt dropped
)

# A line that starts a shell command (a second log pasted after the first begins with its
# launch command) is never the wrapped tail of the record before it.
_COMMAND = re.compile(r"^(?:\$\s|(?:[A-Z_][A-Z0-9_]*=\S*\s+)+|(?:python3? -m |vllm serve\b|\S*llama-server\b|docker ))")

MAX_LOG_DIGITS = 4300  # Python's default int-max-str-digits
MAX_FIGURE_DIGITS = 30  # more than any byte / token / cell count an engine prints
_TOO_LONG = re.compile(r"\d{" + str(MAX_LOG_DIGITS + 1) + ",}")


class LogNumberError(KvgateError):
    """A number in a log too long to be a real figure (and too long for Python's ``int``)."""


@dataclass(frozen=True)
class Line:
    """One logical log record. ``rank`` is the tensor-parallel rank when a tag named it
    (``rank=3``, ``Worker_TP3``, SGLang ``TP3``), else ``None``; ``number`` is the
    1-based physical line it starts on; ``service`` the ``docker compose`` service column
    (``vllm-a-1``) or ``None``; ``who`` the vLLM process tag (``Worker_PP1_TP0``,
    ``EngineCore_DP0``, ``VllmWorker``) or ``None``, ``pid`` its process id."""

    text: str
    rank: int | None
    number: int
    service: str | None = None
    who: str | None = None
    pid: int | None = None


def _strip(raw: str) -> tuple[str, int | None, str | None, str | None, int | None]:
    s = _ANSI.sub("", raw).rstrip("\n")
    if "\r" in s:
        s = s.split("\r")[-1]
    rank = None
    service = who = None
    pid = None
    for _ in range(6):
        before = s
        for rx in (_QUOTE, _COMPOSE, _ISO, _JOURNAL, _LLAMA_TS, _LLAMA_PID, _LLAMA_DEBUG):
            m = rx.match(s)
            if not m:
                continue
            if rx is _COMPOSE:
                if _head(s):
                    continue  # "llama_context: n_ctx | …" is not a compose column
                service = service or m.group("service")
            s = s[m.end():]
        m = _VLLM_TAG.match(s)
        if m:
            who = re.sub(r"\s+", "_", m.group("who"))
            pid = int(m.group("pid")[:18])
            if m.group("rank") is not None:
                rank = int(m.group("rank"))
            else:
                t = re.search(r"(?:^|_)TP(\d+)", who)
                if t:
                    rank = int(t.group(1))
            s = s[m.end():]
        if s == before:
            break
    m = re.match(r"^\[\d{4}-\d\d-\d\d [\d:]+ (?:DP\d+ )?TP(\d+)", s)
    if m:
        rank = int(m.group(1))
    return s.strip(), rank, service, who, pid


def _head(s: str) -> bool:
    return any(rx.match(s) for rx in _HEADS)


def logical_lines(text: str) -> list[Line]:
    """Logical records of a pasted log (module docstring); empty lines dropped. A wrapped
    piece joins the previous record of the same ``docker compose`` service (a piece with no
    service column: the previous record).

    Raises:
        LogNumberError: a record holds a run of more than :data:`MAX_LOG_DIGITS` digits.
    """
    out: list[Line] = []
    last: dict[str | None, int] = {}  # service -> index of its last record in out
    for n, raw in enumerate(text.splitlines(), start=1):
        s, rank, service, who, pid = _strip(raw)
        if not s:
            continue
        # a piece without a compose column (a terminal wrap) continues the last record
        i = last.get(service) if service is not None else (len(out) - 1 if out else None)
        if (i is not None and not _head(s) and rank is None and who is None and _head(out[i].text)
                and not _COMMAND.match(s)):
            prev = out[i]
            out[i] = Line(prev.text + s, prev.rank, prev.number, prev.service, prev.who, prev.pid)
            continue
        last[service] = len(out)
        out.append(Line(s, rank, n, service, who, pid))
    for ln in out:
        m = _TOO_LONG.search(ln.text)
        if m:
            raise LogNumberError(f"line {ln.number} of the log holds a number of {m.end() - m.start():,} digits: "
                                 f"no engine prints one (kvgate reads figures of at most {MAX_FIGURE_DIGITS} digits)",
                                 hint="pass the engine's own startup log; the file may be corrupt")
    return out


def check_digits(number: str, what: str = "figure") -> str:
    """``number`` (digits, separators, one decimal point) when it has at most
    :data:`MAX_FIGURE_DIGITS` digits.

    Raises:
        LogNumberError: a longer number (no engine prints one; Python's ``int`` refuses
            more than 4,300 digits).
    """
    digits = sum(c.isdigit() for c in number)
    if digits > MAX_FIGURE_DIGITS:
        raise LogNumberError(f"the log's {what} has {digits:,} digits ({number[:20]}…): more than any engine prints "
                             f"(at most {MAX_FIGURE_DIGITS} read)", hint="pass the engine's own startup log")
    return number


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
    value = Fraction(check_digits(number, unit_name + " figure"))
    decimals = len(number.split(".")[1]) if "." in number else 0
    half = Fraction(1, 2 * 10 ** decimals)
    lo = (value - half) * unit_bytes
    hi = (value + half) * unit_bytes
    # the printer rounds half-to-even or half-up: keep both ends (ceil/floor, inclusive)
    return Logged(round(value * unit_bytes), max(0, -(-lo.numerator // lo.denominator)),
                  hi.numerator // hi.denominator, f"{number} {unit_name}")


def to_int(s: str, what: str = "figure") -> int:
    """``"75,840"`` → 75840.

    Raises:
        LogNumberError: more than :data:`MAX_FIGURE_DIGITS` digits.
        ValueError: not an integer.
    """
    return int(check_digits(str(s), what).replace(",", "").replace("_", ""))


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
