"""Checksums of the files a directory holds, so that a file damaged after it was written (a copy
cut short, a bad sector, a bit flipped) is found before it is used, not trusted.

``manifest.json`` in a model or run directory records, for every file tfm wrote there, its size
and sha256 (hashlib's; its speed on the CPUs measured: docs/FAULTS.md). A file is written
in three steps: its entry is dropped from the manifest, the file is written atomically, its new
entry is recorded; so a kill at any moment leaves a file either checkable or not yet recorded,
never recorded with another file's checksum. A file with no entry (a directory made before
manifests, or a write cut short) is not checked: it loads as before.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tfm.atomic import atomic_write_bytes
from tfm.errors import ModelError
from tfm.layout import MANIFEST_FILE

__all__ = ["Manifest", "digest"]

MANIFEST_VERSION = 1


def digest(data: bytes) -> str:
    """The sha256 of ``data``, in hex."""
    return hashlib.sha256(data).hexdigest()


@dataclass
class Manifest:
    """The recorded files of ``root``, by path relative to it."""

    root: Path
    files: dict[str, dict[str, Any]] = field(default_factory=dict)

    @property
    def path(self) -> Path:
        return Path(self.root) / MANIFEST_FILE

    @classmethod
    def read(cls, root: Path, strict: bool = True) -> Manifest:
        """The manifest of ``root`` (empty where there is none). A manifest that cannot be read
        is refused with ModelError, or (``strict`` False, for a writer that will replace it)
        read as empty."""
        manifest = cls(Path(root))
        try:
            data = json.loads(manifest.path.read_text(encoding="utf-8"))
            files = data["files"]
            if not isinstance(files, dict) or not all(
                    isinstance(v, dict) and {"size", "sha256"} <= v.keys()
                    for v in files.values()):
                raise ValueError("malformed entries")
        except FileNotFoundError:
            return manifest
        except (OSError, ValueError, KeyError, TypeError) as e:
            if not strict:
                return manifest
            raise ModelError(f"{manifest.path}: unreadable ({str(e)[:100]}), so the files it "
                             "records cannot be checked; restore it, or delete it to load the "
                             "directory unchecked") from e
        manifest.files = dict(files)
        return manifest

    def name(self, path: Path | str) -> str:
        """``path`` as the manifest names it: relative to the root, with /."""
        path = Path(path)
        try:
            path = path.relative_to(self.root)
        except ValueError:
            pass
        return path.as_posix()

    def forget(self, paths: Iterable[Path | str]) -> bool:
        """Drop the entries of ``paths``; whether there were any."""
        names = [self.name(p) for p in paths]
        dropped = [n for n in names if self.files.pop(n, None) is not None]
        return bool(dropped)

    def record(self, path: Path | str, data: bytes | None = None,
               sha256: str | None = None) -> None:
        """Record ``path`` as written with ``data`` (None: read it from the disk), whose
        digest is ``sha256`` where the caller has it already."""
        name = self.name(path)
        if data is None:
            data = (Path(self.root) / name).read_bytes()
        self.files[name] = {"size": len(data), "sha256": sha256 or digest(data)}

    def save(self) -> None:
        data = {"format_version": MANIFEST_VERSION, "algorithm": "sha256",
                "files": dict(sorted(self.files.items()))}
        atomic_write_bytes(self.path, (json.dumps(data, indent=1) + "\n").encode())

    def damage(self, path: Path | str, data: bytes | None = None) -> str | None:
        """What is wrong with ``path`` (whose bytes are ``data``, None: read them) against its
        entry, in a few words ("truncated: 1,234 of 5,678 bytes"); None when it is intact or
        has no entry."""
        name = self.name(path)
        entry = self.files.get(name)
        if entry is None:
            return None
        if data is None:
            try:
                data = (Path(self.root) / name).read_bytes()
            except FileNotFoundError:
                return "missing"
        size = entry["size"]
        if len(data) < size:
            return f"truncated: {len(data):,} of {size:,} bytes"
        if len(data) > size:
            return f"{len(data):,} bytes where {size:,} were written"
        if digest(data) != entry["sha256"]:
            return "its content differs from what was written (sha256 mismatch)"
        return None
