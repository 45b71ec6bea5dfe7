"""Atomic file writes: a reader sees the old file or the new one, never a part of one.

Kept apart from the model code so that commands that only write text or JSON (tokenizer
training, prepare) do not import torch.
"""

from __future__ import annotations

import errno
import os
import tempfile
from pathlib import Path

from tfm.errors import ResourceError

__all__ = ["atomic_write_bytes", "remove_stale_temporaries"]


def atomic_write_bytes(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that a reader sees the old file or the new one, never a
    part: write a temporary file in the same directory, fsync it, then rename over ``path``.
    A full disk raises ResourceError and leaves any previous file untouched."""
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as e:
        if e.errno in _NO_SPACE:
            raise _disk_full(path) from e
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
        if e.errno in _NO_SPACE:
            raise _disk_full(path) from e
        raise
    except BaseException:
        _remove_quietly(tmp)
        raise
    _fsync_dir(path.parent)


_NO_SPACE = (errno.ENOSPC, errno.EDQUOT)


def _disk_full(path: Path) -> ResourceError:
    return ResourceError(f"{path}: no space left on the device; the previous file is intact. "
                         "Free some disk space and try again.")


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
