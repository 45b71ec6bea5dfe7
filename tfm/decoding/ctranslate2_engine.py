"""CTranslate2 as a Translator engine: decodes a ``tfm export --to ctranslate2`` directory.

(Stub until the export lands: recognises no directory.)
"""

from __future__ import annotations

from pathlib import Path


def is_export(path: Path) -> bool:
    """Whether ``path`` is a CTranslate2 export written by tfm."""
    return False
