"""The threads that decode, and torch's CPU threads, owned in one place.

A decoding step of a batch of a few hundred sentences leaves one of two cores idle much of the
time (small matrices, Python between the operations): two single-threaded workers, each
decoding its own batches, keep both busy (docs/BENCHMARKS.md, "Decoding workers"). A process
has one ``Workers`` per loaded model: ``Translator.translate`` shares the batches of a call
among its threads, and the server's batcher runs its jobs on the same threads (``executor``),
where a call decodes its batches in the thread it runs in.

Nothing here imports torch until a pool of more than one thread is made: a CTranslate2 export
decodes with CTranslate2's own threads, in one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from typing import Any, TypeVar

from tfm.errors import UsageError

T = TypeVar("T")
R = TypeVar("R")


def cpu_threads() -> int:
    """The CPU threads decoding may use: OMP_NUM_THREADS where it is set (torch reads it too),
    else the cores this process may run on. Not torch's current count: a ``Workers`` of more
    than one sets that to 1 in the thread that makes it, and a second model loaded there would
    find one thread, so that the order models load in would decide how they decode."""
    value = os.environ.get("OMP_NUM_THREADS", "").strip()
    if value.isdigit() and int(value) > 0:
        return int(value)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def default_count(device_type: str) -> int:
    """How many workers decode when the user does not say: on a CPU with two threads or
    more, 2; else 1 (on CUDA one keeps the GPU busy; more than two were not measured)."""
    if device_type != "cpu":
        return 1
    return 2 if cpu_threads() >= 2 else 1


class Workers:
    """``count`` decoding threads, each with its share of torch's CPU threads.

    Made with more than one, it shares the CPU threads (``cpu_threads``) at once: the thread
    that makes it keeps one torch thread, and each worker takes its share when it starts. torch's
    CPU threads (OpenMP) are set up per calling thread, so had this thread kept all of them
    (loading the model, say), their pool and the workers' would share the cores and contend
    for them (docs/BENCHMARKS.md). So it is made before the model is loaded
    (tfm.decoding.engines.load_translator does), and only there."""

    def __init__(self, count: int = 1, share_cpu_threads: bool = True) -> None:
        """``share_cpu_threads``: False for work that does not run torch (a test's)."""
        if count < 1:
            raise UsageError(f"--workers {count}: give 1 or more")
        self.count = count
        self._threads_each: int | None = None
        self._callers_threads: int | None = None  # what the making thread had, for ``close``
        if count > 1 and share_cpu_threads:
            import torch

            self._threads_each = max(1, cpu_threads() // count)
            self._callers_threads = torch.get_num_threads()
            torch.set_num_threads(1)
        self._executor: ThreadPoolExecutor | None = None
        self._mine = threading.local()  # set in the pool's threads

    @classmethod
    def for_device(cls, requested: int | None, device_type: str) -> Workers:
        """``requested`` workers, or the default for the device (None)."""
        return cls(default_count(device_type) if requested is None else requested)

    def _start_thread(self) -> None:
        self._mine.worker = True
        if self._threads_each is not None:
            import torch

            torch.set_num_threads(self._threads_each)

    @property
    def executor(self) -> ThreadPoolExecutor:
        """The pool of ``count`` threads, started on first use."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(self.count, thread_name_prefix="tfm-decode",
                                                initializer=self._start_thread)
        return self._executor

    def on_worker(self) -> bool:
        """Whether the calling thread is one of this pool's."""
        return getattr(self._mine, "worker", False)

    def map(self, fn: Callable[[T], R], items: Sequence[T]) -> Iterator[tuple[T, R]]:
        """(item, fn(item)) for each item. With several workers (and when not called from one
        of them), the items are decoded side by side, the last first (the caller orders them
        shortest first, so the last to start are the shortest and the workers end at about
        the same time), and each comes back as it ends, so that a failure stops the items not
        yet started."""
        if self.count == 1 or self.on_worker():
            for item in items:
                yield item, fn(item)
            return
        futures = {self.executor.submit(fn, item): item for item in reversed(items)}
        try:
            for future in as_completed(futures):
                yield futures[future], future.result()
        finally:  # stopped early (an error, Ctrl-C): items not started are never decoded
            for future in futures:
                future.cancel()

    def close(self, **shutdown: Any) -> None:
        """Stop the threads (``shutdown``: ThreadPoolExecutor.shutdown's arguments) and, called
        from the thread that made the pool, give it back the CPU threads it had: what the
        process does next in it (a training after a teacher's translation, a model decoding
        alone) runs on all of them, not on the one the pool left it."""
        if self._executor is not None:
            self._executor.shutdown(**shutdown)
            self._executor = None
        if self._callers_threads is not None:
            import torch

            torch.set_num_threads(self._callers_threads)
            self._callers_threads = None
