"""A lock on a directory that a command writes, so that two commands never write into one
directory at once (eight `tfm train` into one --output overwrote each other's checkpoints).

The lock is ``flock`` on a file beside the directory, ``.NAME.lock`` in its parent: beside, not
inside, because the directory may not exist yet, and because ``prepare`` and ``export`` replace
it whole by a rename (a lock inside would go with the old directory). The file holds who took it
(command, process id, host, since when), for the one line that refuses a second command. The
kernel drops the lock when its process ends, however it ends: after a kill -9 the file stays,
unlocked, and the next command takes it; a clean release deletes it. A file system that cannot
lock (some network file systems) still works, unlocked, with a warning.
"""

from __future__ import annotations

import errno
import fcntl
import json
import os
import socket
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from pathlib import Path

from tfm.atomic import write_error
from tfm.errors import UsageError

__all__ = ["DirectoryInUse", "directory_lock", "lock_file"]

# flock's answers on a file system that does not lock (NFS without lockd, some FUSE mounts).
_NO_LOCKING = {errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.EINVAL, errno.ENOSYS}


class DirectoryInUse(UsageError):
    """Another process writes into the directory (exit 2, as a usage error)."""


def lock_file(directory: Path) -> Path:
    """The lock file of ``directory``: ``.NAME.lock`` beside it, symbolic links resolved so that
    every spelling of one directory names one lock."""
    real = Path(os.path.realpath(directory))
    if real.parent == real:  # the root has no parent to hold it
        return real / ".tfm.lock"
    return real.parent / f".{real.name}.lock"


@contextmanager
def directory_lock(directory: Path, command: str,
                   warn: Callable[[str], None] | None = None) -> Iterator[Path]:
    """Hold the lock of ``directory`` while the block runs, for ``command`` (e.g. "tfm train");
    raises DirectoryInUse naming the holder when another process has it. ``warn`` receives the
    one-line warning of a file system without locking (default: stderr)."""
    path = lock_file(directory)
    fd = _acquire(path, Path(directory), command, warn or _to_stderr)
    try:
        yield path
    finally:
        if fd is not None:
            _release(path, fd)


def _acquire(path: Path, directory: Path, command: str,
             warn: Callable[[str], None]) -> int | None:
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise (write_error(path.parent, e, kept="nothing was written") or e) from e
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
        except OSError as e:
            raise (write_error(path, e, kept="nothing was written") or e) from e
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise DirectoryInUse(f"{directory} is in use by {holder}; wait for it to end, or "
                                 "stop it, or write to another directory") from None
        except OSError as e:
            os.close(fd)
            if e.errno in _NO_LOCKING:
                warn(f"{directory} cannot be locked on its file system ({e.strerror}); "
                     "make sure no other tfm command writes into it meanwhile")
                return None
            raise
        # The holder before may have deleted the file between our open and our lock: then
        # the lock is on a file nobody else will open; take the one at ``path`` instead.
        try:
            same = os.path.samestat(os.fstat(fd), os.stat(path))
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)
    record = {"command": command, "pid": os.getpid(), "host": socket.gethostname(),
              "since": datetime.now().astimezone().isoformat(timespec="seconds")}
    try:
        os.ftruncate(fd, 0)
        os.pwrite(fd, (json.dumps(record) + "\n").encode(), 0)
    except OSError:  # a disk too full for 100 bytes: the lock holds all the same
        pass
    return fd


def _holder(fd: int) -> str:
    """Who holds the lock, as its file says ("tfm train (process 123, since 14:03:22)"); the
    holder writes it just after locking, so an empty file is read again for a moment."""
    record = None
    for _ in range(40):
        try:
            record = json.loads(os.pread(fd, 4096, 0).decode())
            break
        except (OSError, ValueError):
            time.sleep(0.05)
    if not isinstance(record, dict):
        return "another process"
    since = str(record.get("since", "?"))
    try:
        when = datetime.fromisoformat(since)
        since = when.strftime("%H:%M:%S" if when.date() == datetime.now().date()
                              else "%Y-%m-%d %H:%M:%S")
    except ValueError:
        pass
    where = f" on {record['host']}" if record.get("host") not in (None, socket.gethostname()) \
        else ""
    return f"{record.get('command', 'another command')} (process {record.get('pid', '?')}" \
           f"{where}, since {since})"


def _release(path: Path, fd: int) -> None:
    """Delete the lock file while still holding it (a process waiting on the old file then
    sees it is gone and retries), then let go."""
    try:
        if os.path.samestat(os.fstat(fd), os.stat(path)):
            os.unlink(path)
    except OSError:
        pass
    os.close(fd)


def _to_stderr(message: str) -> None:
    print(f"warning: {message}", file=sys.stderr)
