"""Atomic, non-clobbering file output for records, measurements and plots.

Every file kvgate writes goes through :func:`write_atomic`: the bytes go to a temporary
file in the same directory, are flushed and fsync'ed, then renamed over the target
(``os.replace`` is atomic on POSIX within one file system). A reader never sees half a
record, and a crash leaves either the old file or the new one.
"""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kvgate.errors import KvgateError
from kvgate.guarded import MAX_JSON_DEPTH, MAX_JSON_FILE_BYTES, json_depth, loads_json, read_regular

__all__ = ["MAX_JSON_DEPTH", "OutputExistsError", "check_writable", "encode_text", "json_depth", "loads_json",
           "read_json", "write_atomic", "write_files_atomic", "write_json_atomic", "write_json_text"]


#: what to do when the file system refuses a write (no such folder, no permission, a full disk)
CANNOT_WRITE_HINT = "give a path in a folder you can write to, on a disk with room"


class OutputExistsError(KvgateError):
    """The target exists and ``force`` was not given."""


def check_writable(path: str | os.PathLike[str], *, force: bool = False) -> Path:
    """Fail early (before any work) if ``path`` exists and ``force`` is false.

    Raises:
        KvgateError: ``path`` is a directory (``--force`` would not help: say so first).
        OutputExistsError: the file exists and would be overwritten.
    """
    p = Path(path)
    if p.is_dir():
        raise KvgateError(f"{p} is a directory, not a file",
                          hint=f"give a file name, e.g. {p / ('out' + (p.suffix or '.json'))}")
    if p.exists() and not force:
        raise OutputExistsError(f"{p} exists; not overwriting it", hint="pass --force to replace it")
    return p


def write_atomic(path: str | os.PathLike[str], data: bytes | str, *, force: bool = False) -> Path:
    """Write ``data`` to ``path`` atomically (temp file + fsync + rename).

    Parent directories are created. Without ``force`` an existing file is an error and
    is left untouched. A ``str`` is written as UTF-8; characters UTF-8 cannot hold (the
    lone surrogates Python uses for the bytes of a non-UTF-8 file name) are written as
    ``\\udcff`` escapes, never a traceback.

    Raises:
        OutputExistsError: ``path`` exists and ``force`` is false.
        KvgateError: the directory is not writable.
    """
    return write_files_atomic([(path, data)], force=force)[0]


def encode_text(data: bytes | str) -> bytes:
    """UTF-8 bytes of ``data``; lone surrogates (undecodable file-name bytes) become
    backslash escapes so the result is always valid UTF-8."""
    return data if isinstance(data, bytes) else data.encode("utf-8", errors="backslashreplace")


def write_files_atomic(items: list[tuple[str | os.PathLike[str], bytes | str]], *,
                       force: bool = False) -> list[Path]:
    """Write several files as one: all of them or none (a record's ``.json`` and ``.md``).

    1. Every file is encoded, written to a temporary file beside its target and fsync'ed
       before any target is touched; a failure then leaves every target as it was.
    2. Without ``force`` each target is *created exclusively*: the temporary file is
       hard-linked to the target name (``os.link`` fails if the name exists, atomically,
       so of two writers racing for one name exactly one wins; where the file system has
       no hard links the name is first reserved with ``O_CREAT | O_EXCL``). A target that
       appeared since the start is an :class:`OutputExistsError` and is left alone.
    3. With ``force`` an existing target is first hard-linked to a backup name; if a
       later target cannot be replaced, every target already replaced in this call gets
       its old content back (or is removed when it did not exist), so the pair is still
       all-or-nothing.
    4. The renames of one call happen under an exclusive lock on each target directory
       (``flock`` of the directory itself: no lock file is left), so two ``--force``
       writers of one record never leave a ``.json`` of one run beside the ``.md`` of the
       other: each pair lands whole, the last one wins both files.

    Raises:
        OutputExistsError: a target exists and ``force`` is false (nothing written).
        KvgateError: a directory is not writable, or a target is a directory (nothing
            left behind).
    """
    paths = [check_writable(p, force=force) for p, _ in items]  # a directory is refused there
    blobs = [encode_text(d) for _, d in items]
    temps: list[tuple[str, Path]] = []
    done: list[tuple[Path, str | None]] = []  # (target, backup of its old content or None: it was new)
    current: Path | None = None
    locks = contextlib.ExitStack()
    try:
        for p, blob in zip(paths, blobs):
            current = p
            try:
                p.parent.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
            except (OSError, ValueError) as exc:
                raise KvgateError(f"cannot write {p}: {getattr(exc, 'strerror', None) or exc}",
                                  hint=CANNOT_WRITE_HINT) from exc
            temps.append((tmp, p))
            os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
            with os.fdopen(fd, "wb") as fh:
                fh.write(blob)
                fh.flush()
                os.fsync(fh.fileno())
        locks.enter_context(_dir_locks(paths))
        for tmp, p in temps:
            current = p
            if force:
                backup = _backup(p)
                try:
                    os.replace(tmp, p)
                except BaseException:
                    if backup is not None:  # p still holds its old content
                        _unlink_quiet(backup)
                    raise
                done.append((p, backup))
            else:
                _create_exclusive(tmp, p)
                done.append((p, None))
        _fsync_dirs(paths)
    except BaseException as exc:
        for tmp, _ in temps:
            _unlink_quiet(tmp)
        for p, backup in reversed(done):  # both or neither
            if backup is not None:
                try:
                    os.replace(backup, p)
                except OSError:
                    pass
            else:
                _unlink_quiet(p)
        if isinstance(exc, FileExistsError):
            raise OutputExistsError(f"{current} appeared while writing; not overwriting it",
                                    hint="another kvgate run wrote it first; pass --force to replace it") from exc
        if isinstance(exc, OSError):
            raise KvgateError(f"cannot write {current or paths[0]}: {exc.strerror or exc}",
                              hint=CANNOT_WRITE_HINT) from exc
        raise
    finally:
        locks.close()
    for _, backup in done:
        if backup is not None:
            _unlink_quiet(backup)
    return paths


@contextlib.contextmanager
def _dir_locks(paths: list[Path]) -> Iterator[None]:
    """An exclusive ``flock`` on each distinct parent directory of ``paths`` (in sorted
    order: two writers never deadlock), held while the names are given; where the platform
    or file system has no ``flock`` the write goes on unlocked (best effort)."""
    try:
        import fcntl  # noqa: PLC0415
    except ImportError:  # pragma: no cover - not POSIX
        yield
        return
    fds: list[int] = []
    try:
        for d in sorted({str(p.parent.resolve()) for p in paths}):
            try:
                fd = os.open(d, os.O_RDONLY)
            except OSError:
                continue
            fds.append(fd)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:
                pass
        yield
    finally:
        for fd in fds:
            os.close(fd)  # closing the descriptor releases its lock


def _create_exclusive(tmp: str, p: Path) -> None:
    """Give the finished temporary file ``tmp`` the name ``p`` only if ``p`` does not exist.

    Raises:
        FileExistsError: ``p`` exists (another writer won; ``tmp`` is left for the caller).
    """
    try:
        os.link(tmp, p)
    except FileExistsError:
        raise
    except OSError:  # no hard links here (some network / FAT file systems): reserve the name
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
        os.close(fd)
        try:
            os.replace(tmp, p)
        except BaseException:
            _unlink_quiet(p)  # our own reservation: never leave an empty file behind
            raise
        return
    os.unlink(tmp)


def _backup(p: Path) -> str | None:
    """A hard link to the current content of ``p`` (``None`` when ``p`` does not exist),
    so a failed multi-file write can put it back."""
    if not p.exists():
        return None
    fd, name = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".old", dir=p.parent)
    os.close(fd)
    os.unlink(name)
    try:
        os.link(p, name)
    except OSError:  # no hard links: a copy
        import shutil  # noqa: PLC0415

        shutil.copy2(p, name)
    return name


def _fsync_dirs(paths: list[Path]) -> None:
    """fsync each target's directory, so the new names survive a crash (best effort)."""
    for d in dict.fromkeys(p.parent for p in paths):
        try:
            fd = os.open(d, os.O_RDONLY)
        except OSError:
            continue
        try:
            os.fsync(fd)
        except OSError:
            pass
        finally:
            os.close(fd)


def _unlink_quiet(path: str | Path) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_json_text(obj: Any) -> str:
    """``obj`` as kvgate writes JSON: indented, keys in their order, ASCII (any file-name
    character survives as an escape), trailing newline."""
    return json.dumps(obj, indent=2, sort_keys=False) + "\n"


def write_json_atomic(path: str | os.PathLike[str], obj: Any, *, force: bool = False) -> Path:
    """Serialize ``obj`` as indented JSON (trailing newline) and write it atomically."""
    return write_atomic(path, write_json_text(obj), force=force)


def read_json(path: str | os.PathLike[str], *, what: str = "file", allow_nan: bool = False,
              max_bytes: int = MAX_JSON_FILE_BYTES) -> Any:
    """Read a JSON file with errors that name the file (see :func:`loads_json`); only a
    regular file of at most ``max_bytes`` (:func:`kvgate.guarded.read_regular`).

    Raises:
        KvgateError: missing file, a directory, a FIFO or device, larger than
            ``max_bytes``, unreadable, not UTF-8, or JSON that does not parse (with line
            and column), nests too deep or holds a too-long number.
    """
    p = Path(path)
    try:
        if p.is_dir():
            raise KvgateError(f"{what} is a directory, not a JSON file: {p}")
    except (OSError, ValueError) as exc:  # ValueError: a NUL in the path
        raise KvgateError(f"cannot read {what} {p}: {getattr(exc, 'strerror', None) or exc}") from exc
    raw = read_regular(p, what=what, max_bytes=max_bytes)
    return loads_json(raw, what=what, where=str(p), allow_nan=allow_nan)
