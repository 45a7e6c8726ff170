"""One log, several servers: separate the startups and services a pasted log holds.

A log file can hold more than one engine startup: ``docker compose logs`` interleaves two
services (``vllm-a-1  | …``, ``vllm-b-1  | …``); a server restarted after a crash or a
config change appends a second startup to the same file; two logs get concatenated. Each
startup built its own KV pool: summing or mixing their figures gives a pool no engine
built. This module splits the logical lines (:func:`kvgate.engines.logtext.logical_lines`)
into services, and each service into startups, then picks one:

- **services**: by the ``docker compose`` column. One service with pool lines is read
  alone; several need ``service=NAME`` (else :class:`StartupError` lists them): two
  services are two servers, and no default is safe.
- **startups**: a new startup begins at a *start line* of the engine (below) when the
  current one already holds a pool line or already holds a start line of the same kind
  from the same process (name, rank and pid of its tag: a restart before the pool was
  built, or an untagged excerpt pasted twice). The default is the last
  *complete* startup (one with a pool line), as a restarted server runs with it; any
  other is chosen with ``startup=N`` (1-based, as listed).

Start lines, per engine (the lines each prints once per startup, before its pool):

- vLLM: the launch command (``vllm serve``, ``vllm.entrypoints.openai.api_server``), the
  banner ``vLLM API server version``, ``non-default args:`` (``entrypoints/utils.py``),
  ``Initializing a V1 LLM engine`` (``v1/engine/core.py``, one per engine core: a data
  parallel ``EngineCore_DP1`` is not a restart; V0: ``Initializing a V0 LLM engine``, before
  0.7 ``Initializing an LLM engine``), and, once per rank, ``Available KV cache
  memory`` and the pool lines ``GPU KV cache size`` / ``# GPU blocks`` (an excerpt that
  kept only these still splits where a rank prints them a second time). A pool line that
  follows the previous one with nothing of its process between but the pair's other lines
  (``Maximum concurrency for``, ``Multiplying the GPU KV cache size``, padding, overrides)
  is the next worker's report of the same startup: vLLM 0.9–0.10's engine core logs one
  pair per worker before it unifies them (``get_kv_cache_config`` per worker, then
  ``unify_kv_cache_configs``, ``vllm/v1/core/kv_cache_utils.py`` v0.10.0).
- SGLang: ``sglang.launch_server``, ``server_args=ServerArgs(``; pool: ``KV Cache is
  allocated``.
- llama.cpp: the build line (``build: N (hash)``, ``main: build = N``,
  ``common_params_print_info: build``), ``llama_model_loader: loaded meta data``, the
  context's ``n_ctx = N`` line (``llama_context`` / ``llama_new_context_with_model``);
  pool: the KV and recurrent ``size = … MiB`` lines; a second KV line of a context that no
  ``llama_kv_cache_iswa: creating (non-)SWA KV cache`` line announced is a second startup
  (an excerpt pasted twice). A model loaded after a line that names a draft model
  (speculative decoding) belongs to the same startup.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from kvgate.engines.logtext import Line
from kvgate.errors import KvgateError

_START: dict[str, tuple[tuple[str, re.Pattern[str]], ...]] = {
    "vllm": (("command", re.compile(r"(?:^|[\s$])(?:vllm serve|vllm\.entrypoints\.openai\.api_server)\b")),
             ("banner", re.compile(r"vLLM API server version|█\s+version\s")),
             ("args", re.compile(r"non-default args: \{")),
             ("engine", re.compile(r"Initializing (?:a V[01] |an )LLM engine")),
             # per rank, once per startup, before the pool: two from one rank = two startups
             ("budget", re.compile(r"Available KV cache memory: ")),
             ("pool", re.compile(r"GPU KV cache size: [\d,]+ tokens|# (?:GPU|cuda|CUDA|npu|NPU|xpu|XPU) blocks: \d"))),
    "sglang": (("command", re.compile(r"(?:^|[\s$])(?:python3? -m )?sglang\.launch_server\b")),
               ("args", re.compile(r"server_args=ServerArgs\("))),
    "llama.cpp": (("build", re.compile(r"(?:^build: \d+ \(|\bmain: build = \d+|\bcommon_params_print_info: build \d+)")),
                  ("load", re.compile(r"llama_model_loader: loaded meta data")),
                  ("context", re.compile(r"(?:llama_context(?:_unified|_base)?|llama_new_context_with_model|llama_init_from_model):"
                                         r"\s+n_ctx\s+=\s"))),
}
_POOL = {
    "vllm": re.compile(r"GPU KV cache size: [\d,]+ tokens|# (?:GPU|cuda|CUDA|npu|NPU|xpu|XPU) blocks: \d"),
    "sglang": re.compile(r"KV Cache is allocated\."),
    "llama.cpp": re.compile(r"(?:size|KV self size)\s*=\s*\d+(?:\.\d+)? MiB.*\b[KR] \(\w+\):\s*\d"),
}
# the lines of one vLLM "GPU KV cache size" report (kv_cache_utils.py): a pool line after
# only these, from the same process, is the next worker's report, not a restart
_VLLM_REPORT = re.compile(r"GPU KV cache size: |Maximum concurrency for |Multiplying the GPU KV cache size|"
                          r"Add \d+ padding layers|Overriding num_gpu_blocks|# (?:GPU|cuda|CUDA) blocks: ")
_DRAFT = re.compile(r"draft", re.I)
_ISWA = re.compile(r"creating\s+(?:non-SWA|SWA) KV cache")


class StartupError(KvgateError):
    """A log with several services or startups where kvgate cannot tell which one to read."""


@dataclass
class Startup:
    """One engine startup in a log: its lines, 1-based ``index`` within its service, the
    physical line numbers it spans, and whether it reached its pool line (``complete``)."""

    index: int
    service: str | None
    lines: list[Line] = field(default_factory=list)
    complete: bool = False

    @property
    def first_line(self) -> int:
        return self.lines[0].number if self.lines else 0

    @property
    def last_line(self) -> int:
        return self.lines[-1].number if self.lines else 0

    def describe(self) -> str:
        return (f"startup {self.index} (lines {self.first_line:,}–{self.last_line:,}"
                + ("" if self.complete else ", no pool line") + ")")

    def to_dict(self) -> dict[str, Any]:
        return {"index": self.index, "service": self.service, "first_line": self.first_line,
                "last_line": self.last_line, "complete": self.complete}


def services(lines: list[Line]) -> list[str | None]:
    """The ``docker compose`` services in order of first appearance (``[None]`` when the
    log has no service column)."""
    seen: list[str | None] = []
    for ln in lines:
        if ln.service not in seen:
            seen.append(ln.service)
    return seen or [None]


def split_startups(lines: list[Line], engine: str) -> list[Startup]:
    """The startups of one service's lines (module docstring); lines before the first
    start line belong to the first startup."""
    starts, pool = _START[engine], _POOL[engine]
    out = [Startup(1, lines[0].service if lines else None)]
    kinds: set[tuple[str, str | None, int | None, int | None]] = set()
    draft_after_pool = swa_next = False
    report_of: tuple[str | None, int | None] | None = None  # the process whose vLLM report runs
    for ln in lines:
        kind = next((k for k, rx in starts if rx.search(ln.text)), None)
        if engine == "vllm":
            kind, report_of = _vllm_report(kind, ln, report_of)
        is_pool = bool(pool.search(ln.text))
        if engine == "llama.cpp":
            if _ISWA.search(ln.text):
                swa_next = True
            elif is_pool and kind is None and re.search(r"\bK \(", ln.text) and not swa_next:
                # a KV cache line not announced by llama_kv_cache_iswa: one per context, so a
                # second one (an excerpt pasted twice) is a second startup
                kind = "plain-kv"
        cur = out[-1]
        if kind is not None:
            repeat = (kind, ln.who, ln.rank, ln.pid) in kinds
            opens = repeat or (cur.complete and kind not in ("pool", "budget", "plain-kv"))
            if opens and not (engine == "llama.cpp" and draft_after_pool):
                if cur.lines:
                    out.append(Startup(len(out) + 1, ln.service))
                    cur = out[-1]
                    kinds = set()
            kinds.add((kind, ln.who, ln.rank, ln.pid))
        if is_pool:
            cur.complete = True
            draft_after_pool = swa_next = False
        elif cur.complete and _DRAFT.search(ln.text):
            draft_after_pool = True
        cur.lines.append(ln)
    return [s for s in out if s.lines]


def _vllm_report(kind: str | None, ln: Line,
                 report_of: tuple[str | None, int | None] | None) -> tuple[str | None, tuple[str | None, int | None] | None]:
    """``(kind, report_of)`` for a vLLM line: a pool line inside a run of report lines of
    the same process (module docstring) is no start line (kind ``None``); the run goes on
    through that process's report lines and ends at any other line of it."""
    proc = (ln.who, ln.pid)
    if kind == "pool":
        if report_of == proc:
            kind = None  # the next worker's pair, printed by the same engine core
        return kind, proc
    if report_of == proc and not _VLLM_REPORT.search(ln.text):
        return kind, None
    return kind, report_of


def pool_services(lines: list[Line], engine: str) -> list[str | None]:
    """Services whose lines hold a pool line of ``engine`` (``None``: lines without a
    service column)."""
    pool = _POOL[engine]
    return [s for s in services(lines) if any(ln.service == s and pool.search(ln.text) for ln in lines)]


def foreign_runs(lines: list[Line], engine: str) -> list[tuple[int, int]]:
    """In a log with ``docker compose`` service columns, the runs of consecutive lines
    without one that hold a pool line of ``engine``: another log pasted into the file
    (``docker compose logs`` prefixes every line), never part of a service's startup.
    Returned as ``(first, last)`` physical line numbers; empty when the log has no
    service column."""
    if not any(ln.service is not None for ln in lines):
        return []
    pool, out = _POOL[engine], []
    run: list[Line] = []
    for ln in [*lines, None]:
        if ln is not None and ln.service is None:
            run.append(ln)
            continue
        if run and any(pool.search(r.text) for r in run):
            out.append((run[0].number, run[-1].number))
        run = []
    return out


def select_startup(lines: list[Line], engine: str, *, startup: int | None = None,
                   service: str | None = None) -> tuple[list[Line], dict[str, Any]]:
    """The lines of one startup of one service, and what was chosen and why.

    Args:
        lines: the log's logical lines.
        engine: ``vllm``, ``sglang`` or ``llama.cpp``.
        startup: 1-based startup within the service (default: the last complete one, or
            the last when none is complete).
        service: the ``docker compose`` service (default: the only service with pool lines).

    Returns:
        ``(lines, info)``; ``info`` has ``service``, ``services`` (all in the log),
        ``startup`` (the index read), ``startups`` (each one's ``to_dict``) and ``notes``
        (sentences for the user; empty for a plain one-startup log).

    Raises:
        StartupError: several services hold pools and none was named; a service or
            startup that is not in the log.
    """
    all_services = services(lines)
    named = [s for s in all_services if s is not None]
    notes: list[str] = []
    foreign = foreign_runs(lines, engine)
    if foreign:
        # an untagged log pasted with a compose log: a server of its own, never merged into a
        # service's startups nor read under a service's name
        where = ", ".join(f"lines {lo:,}–{hi:,}" for lo, hi in foreign)
        inside = [ln.service is None and any(lo <= ln.number <= hi for lo, hi in foreign) for ln in lines]
        tagged = [ln for ln, f in zip(lines, inside) if not f]
        pools = [s for s in pool_services(tagged, engine) if s is not None]
        if service is None and pools:
            raise StartupError(
                f"the log holds a KV pool in lines without a docker compose service column ({where}) and "
                f"{len(pools)} docker compose service(s) with a KV pool: {', '.join(pools)} (two servers: kvgate "
                "reads one)", hint="choose a service with --service NAME, or split the file to read the other log")
        if service is None:
            notes.append(f"{where} (no docker compose service column) are read: the services "
                         f"{', '.join(named)} hold no KV pool")
            lines, named = [ln for ln, f in zip(lines, inside) if f], []
        else:
            notes.append(f"{where} have no docker compose service column and hold a KV pool of their own "
                         f"(another log): not read as service {service}")
            lines = tagged
    if service is not None:
        if service not in named:
            raise StartupError(f"service {service!r} is not in the log",
                               hint="services in the log: " + (", ".join(named) or "none (no docker compose column)"))
        chosen: str | None = service
    else:
        with_pool = pool_services(lines, engine)
        if len([s for s in with_pool if s is not None]) > 1:
            raise StartupError(
                f"the log holds {len(with_pool)} services with a KV pool: "
                + ", ".join(str(s) for s in with_pool) + " (two servers: kvgate reads one)",
                hint="choose one with --service NAME (library: read_engine_log(service=NAME))")
        chosen = with_pool[0] if with_pool else (named[0] if len(named) == 1 else None)
        if chosen is not None and len(named) > 1:
            notes.append(f"docker compose service {chosen} read; the log also holds "
                         + ", ".join(s for s in named if s != chosen) + " (no KV pool lines)")
    mine = [ln for ln in lines if ln.service == chosen or ln.service is None] if named else lines
    ups = split_startups(mine, engine)
    if not ups:  # several services, none with a pool line, and no lines outside them: none to choose
        raise StartupError(f"the log's {engine} lines belong to {len(named)} docker compose services "
                           f"({', '.join(str(s) for s in named)}), none with a KV pool line: no startup to read",
                           hint="choose one with --service NAME, or pass the log of the startup that printed its pool")
    if startup is not None:
        if not 1 <= startup <= len(ups):
            raise StartupError(f"startup {startup} is not in the log: it holds {len(ups)} startup(s)",
                               hint="; ".join(s.describe() for s in ups))
        pick = ups[startup - 1]
    else:
        complete = [s for s in ups if s.complete]
        pick = complete[-1] if complete else ups[-1]
    if len(ups) > 1:
        how = "chosen" if startup is not None else ("the last complete one" if pick.complete else "the last")
        notes.append(f"the log holds {len(ups)} startups: " + "; ".join(s.describe() for s in ups)
                     + f"; {how}, startup {pick.index}, is read (never their sum); choose another with --startup N")
    info = {"service": chosen, "services": named, "startup": pick.index,
            "startups": [s.to_dict() for s in ups], "notes": notes}
    return pick.lines, info


def engines_with_pools(text: str) -> list[str]:
    """Engines whose pool lines appear in the raw text (two: two logs concatenated)."""
    return [e for e, rx in _POOL.items() if rx.search(text)]
