"""Optional runtimes (ctranslate2, transformers, fastapi, sacremoses, ...): imported on demand,
and when missing, one line that names the extra which installs them (pyproject.toml)."""

from __future__ import annotations

import importlib
from types import ModuleType

from tfm.errors import UsageError


def require(module: str, extra: str) -> ModuleType:
    """Import an optional runtime, or say in one line which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError as e:
        raise UsageError(f"this needs the {module} package: pip install \"tfm[{extra}]\" "
                         f"(or pip install {module})") from e
