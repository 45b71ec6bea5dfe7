"""The C heap under torch's CPU tensors: glibc malloc tuned so large tensors reuse memory.

No torch import here: the ``tfm`` command calls this before anything is loaded.
"""

from __future__ import annotations

import ctypes
import os
import sys

# glibc's mallopt parameters (malloc.h).
_M_TRIM_THRESHOLD = -1
_M_MMAP_MAX = -4


def keep_freed_memory() -> bool:
    """Let glibc's malloc reuse freed memory for large tensors instead of handing it back to
    the kernel; returns whether it applied (glibc only; ``TFM_DEFAULT_MALLOC=1`` opts out).

    glibc serves every allocation over 32 MB with a fresh mmap and unmaps it on free, so a
    training step's large tensors (the (tokens, vocabulary) logits and their gradient) page-fault
    their memory in anew each time, which made steps markedly slower (docs/BENCHMARKS.md,
    "Training step before and after the CPU speed-ups"). With mmap off and a high
    trim threshold, freed blocks stay in the heap for the next step. The process keeps its
    peak memory until it exits, which a training or translation process does anyway. Called
    once by the ``tfm`` command before any work; library users may call it themselves."""
    if os.environ.get("TFM_DEFAULT_MALLOC") == "1" or not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):  # not glibc (musl has no mallopt)
        return False
    return bool(mallopt(_M_MMAP_MAX, 0)) and bool(mallopt(_M_TRIM_THRESHOLD, 1 << 30))
