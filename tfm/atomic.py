"""Atomic file writes: a reader sees the old file or the new one, never a part of one; and
the one wording of a write that failed for want of room or rights (``write_error``).

Kept apart from the model code so that commands that only write text or JSON (tokenizer
training, prepare) do not import torch.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from tfm.errors import WriteError

__all__ = ["WRITE_FAULTS", "AppendLog", "atomic_write_bytes", "link_over",
           "remove_stale_temporaries", "write_error"]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a
    part: write a temporary file in the same directory, fsync it, then rename over ``path``.
    A full disk, a read-only file system or a missing permission raises WriteError (naming the
    file and the room it needed) and leaves any previous file untouched."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        fault = write_error(path, e, len(data))
        if fault is not None:
            raise fault from e
        raise
    try:
        with os.fdopen(fd, "wb") as f:
            os.fchmod(f.fileno(), 0o644)  # mkstemp makes 0600; a model directory is shared
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as e:
        _remove_quietly(tmp)
        fault = write_error(path, e, len(data))
        if fault is not None:
            raise fault from e
        raise
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(path.parent)


# The errors of a write that the user, not tfm, must fix: room (a full disk, a quota) or rights
# (a read-only file system, a missing permission).
WRITE_FAULTS = (errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EACCES)
# How a full disk reads in errors that carry no errno: the C library's text (pyarrow, C++),
# Rust's (safetensors).
_NO_SPACE_TEXTS = ("No space left on device", "StorageFull")


def write_error(path: Path, error: BaseException, needed: int | None = None,
                kept: str = "the previous file is intact") -> WriteError | None:
    """The one-line WriteError for an OSError of WRITE_FAULTS while writing ``path`` (None for
    any other error): which file, why, how much room it needed (``needed`` bytes, where known)
    and how much there was, and what is ``kept``. Libraries that write through their own code
    (pyarrow, safetensors, CTranslate2) may raise other types; their full-disk errors are
    recognised by their text."""
    code = getattr(error, "errno", None)
    if code is None and any(text in str(error) for text in _NO_SPACE_TEXTS):
        code = errno.ENOSPC
    if code not in WRITE_FAULTS:
        return None
    if code in (errno.ENOSPC, errno.EDQUOT):
        room = [f"it needed {_size(needed)}"] if needed is not None else []
        free = _free_space(Path(path))
        if free is not None:
            room.append(f"{_size(free)} free")
        if code == errno.EDQUOT:
            room.append("disk quota exceeded")
        detail = f" ({', '.join(room)})" if room else ""
        return WriteError(f"{path}: no space left on the device; {kept}{detail}. Free some "
                          "disk space and try again.")
    why = "the file system is read-only" if code == errno.EROFS else "permission denied"
    return WriteError(f"{path}: {why}; {kept}. Write somewhere you may write, or fix the "
                      "directory's permissions.")


def _size(n: int) -> str:
    for unit in ("bytes", "KB", "MB", "GB"):
        if n < 1000 or unit == "GB":
            return f"{n:,} bytes" if unit == "bytes" else f"{n:.1f} {unit}"
        n /= 1000
    raise AssertionError


def _free_space(path: Path) -> int | None:
    """Bytes free to an unprivileged writer on the file system of ``path`` (or of its nearest
    existing parent)."""
    for where in (path, *path.parents):
        if where.exists():
            try:
                stats = os.statvfs(where)
            except OSError:
                return None
            return stats.f_bavail * stats.f_frsize
    return None


class AppendLog:
    """A log file appended to one whole line at a time (metrics.jsonl): a line that does not
    fit on the disk is taken back, so the file never ends in half a line."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            self._fd: int | None = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT
                                           | os.O_CLOEXEC, 0o644)
        except OSError as e:
            fault = write_error(self.path, e, kept="nothing was written")
            if fault is not None:
                raise fault from e
            raise

    def write_line(self, line: str) -> None:
        assert self._fd is not None, "closed"
        data = (line + "\n").encode("utf-8")
        start = os.fstat(self._fd).st_size
        try:
            done = 0
            while done < len(data):
                done += os.write(self._fd, data[done:])
        except OSError as e:
            try:
                os.ftruncate(self._fd, start)
            except OSError:
                pass
            fault = write_error(self.path, e, len(data), kept="the lines before are intact")
            if fault is not None:
                raise fault from e
            raise

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def link_over(source: Path, target: Path) -> None:
    """Make ``target`` a second name of ``source``'s file (no copy; a copy where the file
    system has no hard links), atomically: a reader sees the old ``target`` or the new."""
    source, target = Path(source), Path(target)
    staged = target.with_name(f".{target.name}.link.tmp")
    staged.unlink(missing_ok=True)
    try:
        os.link(source, staged)
        os.replace(staged, target)
    except OSError as e:
        _remove_quietly(str(staged))
        if e.errno in WRITE_FAULTS:
            raise (write_error(target, e) or e) from e
        atomic_write_bytes(target, source.read_bytes())


def remove_stale_temporaries(directory: Path) -> list[Path]:
    """Delete the temporary files (``.NAME.XXXX.tmp``) that a write interrupted by a kill left
    in ``directory`` and below; the files they were to replace are intact."""
    removed = []
    for tmp in Path(directory).rglob(".*.tmp"):
        if tmp.is_file():
            _remove_quietly(str(tmp))
            removed.append(tmp)
    return removed


def _remove_quietly(path: str) -> None:
    try:
        os.unlink(path)
    except OSError:
        pass


def _fsync_dir(directory: Path) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
