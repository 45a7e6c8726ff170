"""Outputs of a measured run: checked writable before the workload, never lost after it.

An hour of workload must not end in "cannot write". So, before the workload starts,
:func:`probe_writable` creates and removes a small file (4 KiB, fsync'ed: a full disk
fails the fsync) where each output will go — the measurement, the plot, the record and
its Markdown — which catches a read-only or missing-permission directory, a path through
a regular file and most full disks. If writing still fails at the end (the disk filled
up meanwhile, the directory was removed, another run took the name), :func:`save_json`
(and :func:`kvgate.gate.record.save_record` through :func:`save_with_fallback`) write to a
fallback place and say where:

1. the same directory under a unique name, when only the name was taken;
2. ``$XDG_STATE_HOME/kvgate/`` (default ``~/.local/state/kvgate/``), the XDG place for
   state data that should persist;
3. ``<temp dir>/kvgate-<uid>/`` (:func:`tempfile.gettempdir`);
4. as a last resort the JSON document is printed to standard error, so a measurement is
   never lost.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvgate.atomicio import OutputExistsError, check_writable, write_json_atomic
from kvgate.errors import KvgateError

PROBE_BYTES = 4096


@dataclass
class Saved:
    """Where an output went: ``path`` (``None``: only printed to stderr) and, when that is
    not where it was asked to go, ``warning`` saying why and where."""

    path: str | None
    warning: str | None = None


def fallback_dirs() -> list[Path]:
    """The fallback directories, in order (see the module docstring)."""
    state = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    uid = os.getuid() if hasattr(os, "getuid") else "user"
    return [Path(state) / "kvgate", Path(tempfile.gettempdir()) / f"kvgate-{uid}"]


def probe_writable(path: str | os.PathLike[str], *, option: str, force: bool = False) -> None:
    """Check that ``path`` can be written: it must not exist (unless ``force``), and a
    4 KiB file created, fsync'ed and removed in its directory must succeed. Directories
    that do not exist yet are created for the probe and removed again.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
        KvgateError: the directory cannot be created or written, naming ``option``.
    """
    p = check_writable(path, force=force)
    if p.is_dir():
        raise KvgateError(f"{option} {p} is a directory, not a file", hint="give a file name")
    created: list[Path] = []
    d = p.parent if str(p.parent) else Path(".")
    try:
        missing = []
        q = d
        while not q.exists():
            missing.append(q)
            q = q.parent
        for m in reversed(missing):
            m.mkdir()
            created.append(m)
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".probe", dir=d)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(b"\0" * PROBE_BYTES)
                fh.flush()
                os.fsync(fh.fileno())
        finally:
            os.unlink(tmp)
    except OSError as exc:
        raise KvgateError(f"{option} {p}: cannot write in {d}: {exc.strerror or exc}",
                          hint="choose a writable place for it; nothing was run") from exc
    finally:
        for m in reversed(created):
            try:
                m.rmdir()
            except OSError:
                pass


def unique_name(path: Path) -> Path:
    """``path`` with a random suffix before the extension (``m.json`` → ``m-3f9a1c.json``)."""
    return path.with_name(f"{path.stem}-{secrets.token_hex(3)}{path.suffix}")


def save_with_fallback(write: Callable[[Path], Any], path: Path, *, what: str) -> Saved:
    """Try ``write(path)``, then the fallbacks (module docstring); ``write`` writes one
    file and returns its path, raising KvgateError on failure. ``Saved.path`` is ``None``
    when no place could be written (the caller prints the document then)."""
    try:
        return Saved(str(write(path)))
    except OutputExistsError as exc:
        first = exc.message
        tries = [unique_name(path)] + [d / path.name for d in fallback_dirs()]
    except KvgateError as exc:
        first = exc.message
        tries = [d / path.name for d in fallback_dirs()]
    for t in tries:
        for cand in (t, unique_name(t)):
            try:
                got = str(write(cand))
            except KvgateError:
                continue
            return Saved(got, f"{first}: the {what} was saved to {got} instead")
    return Saved(None, f"{first}; no fallback place could be written either: the {what} follows on standard error")


def save_json(path: str | os.PathLike[str], obj: Any, *, force: bool = False, what: str = "measurement") -> Saved:
    """Write ``obj`` as JSON to ``path`` (atomically), else to a fallback place (module
    docstring); as a last resort print it to stderr. Never raises for an I/O failure."""
    saved = save_with_fallback(lambda p: write_json_atomic(p, obj, force=force and p == Path(path)), Path(path), what=what)
    if saved.path is None:
        sys.stderr.write(json.dumps(obj, indent=2) + "\n")
    return saved
