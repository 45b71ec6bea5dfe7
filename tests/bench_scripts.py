"""bench/ is not a package: its scripts, loaded as modules for the tests of their parts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parent.parent / "bench"


def load(name: str) -> ModuleType:
    """bench/NAME.py as a module, imported with bench/ on sys.path as when its scripts run;
    sys.path is given back as it was (bench/ holds modules named data, model, serve...)."""
    if name in sys.modules:
        return sys.modules[name]
    saved = list(sys.path)
    sys.path.insert(0, str(BENCH))
    try:
        spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module
        spec.loader.exec_module(module)
    finally:
        sys.path[:] = saved
    return module
