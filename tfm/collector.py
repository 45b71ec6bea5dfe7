"""Python's cyclic garbage collector, told that what a command imports is there to stay.

A full collection walks every object the collector tracks. A ``tfm`` command imports torch
and its other libraries as it goes (some only when first used: the optimizer imports
torch._dynamo, the learning curve matplotlib), and the full collections in between walk the
modules imported so far again each time, though none of their objects will ever be garbage:
a short command spent a good part of its time there (docs/BENCHMARKS.md, "The garbage
collector and the imports").

No torch import here: the ``tfm`` command calls this before anything is loaded.
"""

from __future__ import annotations

import gc
import os
import sys
from collections.abc import Callable


def keep_imports_out_of_collections() -> bool:
    """From now on, after a full collection during which modules were imported, move what
    survived it to the collector's permanent generation (``gc.freeze``), which later
    collections skip; returns whether it applied (``TFM_DEFAULT_GC=1`` opts out).

    Only a collection that follows imports freezes: once a process has loaded what it needs
    (a training loop, a server answering requests) no more modules come and the collector
    works as usual, so objects made by the work itself are still collected. What a freeze
    keeps for good is what was alive at that moment, mostly the modules. Idempotent; called
    once by the ``tfm`` command before any work; library users may call it themselves."""
    if os.environ.get("TFM_DEFAULT_GC") == "1":
        return False
    if not any(getattr(c, "freezes_after_imports", False) for c in gc.callbacks):
        gc.callbacks.append(_freezing_after_imports())
    return True


def _freezing_after_imports() -> Callable[[str, dict], None]:
    """The collector's callback: freeze after a full collection (the oldest generation) if
    the number of imported modules changed since the last one."""
    modules_seen = len(sys.modules)

    def after_collection(phase: str, info: dict) -> None:
        nonlocal modules_seen
        if phase == "stop" and info.get("generation") == 2 and len(sys.modules) != modules_seen:
            modules_seen = len(sys.modules)
            gc.freeze()

    after_collection.freezes_after_imports = True
    return after_collection
