"""Dynamic batching: sentences from concurrent requests decoded together.

Requests put their sentences in one bounded queue (``Batcher.enqueue``) and await their job.
A worker (an asyncio task with a decoding thread of its own) gathers what waits, oldest first,
and hands it as one batch to its thread, so the event loop keeps answering (health checks, new
requests, metrics) while the model runs. With several workers, the sentences waiting are shared
among the workers free to take them (each takes its share, the oldest first), so that they
decode side by side. A batch of a few dozen sentences leaves CPU threads idle (a second thread
on the same batch buys little), so two single-threaded workers, each on its own batch, use the
cores better (docs/BENCHMARKS.md, "tfm serve under concurrent clients").

Gathering is greedy: a worker goes as soon as the waiting sentences fill ``max_batch_tokens``
(source tokens x beam), or ``max_wait`` after the oldest sentence arrived or the worker became
free, whichever is later; while one batch decodes the next one forms, and the short wait after
it lets the clients just answered join it. Only sentences with the same decoding options share
a batch; the oldest sentence always goes next, so none starves. A request's sentences may be
spread over several batches; it is answered once all of them are done.

Each sentence's translation is the one it would get alone: tfm's search is batch-invariant
(padding and neighbours change nothing), so batching changes only the throughput.

A job cancelled before its sentences are taken (its client went away) costs no decoding: its
sentences are dropped from the queue. A full queue refuses new jobs at once (``QueueFull``,
with a retry estimate) instead of letting them wait without bound.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import astuple, dataclass, field
from typing import Any

from tfm.config import SearchOptions
from tfm.decoding.translator import Translation
from tfm.decoding.workers import Workers
from tfm.serve.metrics import ServeMetrics

DecodeFn = Callable[[list[str], SearchOptions], list[Translation]]
CountFn = Callable[[list[str]], list[int]]


class QueueFull(Exception):
    """The queue has no room for a job's sentences; try again in ``retry_after`` seconds."""

    def __init__(self, retry_after: int) -> None:
        super().__init__(f"the translation queue is full; retry in {retry_after} s")
        self.retry_after = retry_after


class ShuttingDown(Exception):
    """The server is stopping and takes no new work."""


@dataclass(eq=False)
class Job:
    """One request's sentences, their results as they come, and the future it awaits."""

    sentences: list[str]
    options: SearchOptions
    costs: list[int]  # source tokens x beam, per sentence
    future: asyncio.Future[list[Translation]]
    key: tuple[Any, ...]  # the options as a tuple: equal keys may share a batch
    enqueued: float  # event-loop time
    results: list[Translation | None] = field(default_factory=list)
    remaining: int = 0  # sentences not yet translated
    queued: int = 0  # sentences still in the queue
    queued_cost: int = 0

    @property
    def done(self) -> bool:
        """Answered, failed or cancelled: nothing more to decode for it."""
        return self.future.done()


@dataclass
class _Item:
    job: Job
    index: int  # of the sentence in its job


class Batcher:
    """Gathers queued sentences into batches and decodes them one batch at a time, off the
    event loop. ``decode``: sentences and options to translations (Translator.translate);
    ``count_tokens``: each sentence's source tokens, as the model will see them."""

    def __init__(self, decode: DecodeFn, count_tokens: CountFn, *, max_batch_tokens: int,
                 max_wait: float, max_queue: int, metrics: ServeMetrics | None = None,
                 workers: Workers | None = None) -> None:
        """``workers``: the decoding threads (the translator's, tfm.decoding.workers): as many
        batches are decoded at once, each in a thread of its own. None: one."""
        workers = workers or Workers(1)
        self.decode = decode
        self.count_tokens = count_tokens
        self.max_batch_tokens = max_batch_tokens
        self.max_wait = max_wait  # seconds
        self.max_queue = max_queue  # sentences
        self.metrics = metrics or ServeMetrics()
        self._queue: deque[_Item] = deque()
        self._queued = 0  # sentences of live jobs in the queue
        self._queued_cost = 0
        self._queued_jobs = 0
        self._wake = asyncio.Event()
        self._stopping = False
        self.workers = workers.count
        self._tasks: list[asyncio.Task[None]] = []
        self._threads = workers
        self._gathering = 0  # workers waiting for a batch: they share what is queued
        self._rate = 0.0  # sentences per second of one worker, a moving average: Retry-After
        self.decoding = 0  # sentences in the batches being decoded
        self._decoding_jobs: dict[int, list[Job]] = {}  # by worker

    def start(self) -> None:
        """Start the workers (in the running event loop)."""
        loop = asyncio.get_running_loop()
        self._tasks = [loop.create_task(self._run(i), name=f"tfm-batcher-{i}")
                       for i in range(self.workers)]

    @property
    def queued(self) -> int:
        """Sentences waiting for a batch."""
        return self._queued

    def enqueue(self, sentences: list[str], options: SearchOptions) -> Job:
        """Queue ``sentences`` to be translated with ``options``; await ``job.future`` for
        their translations in order. Raises QueueFull or ShuttingDown at once."""
        if self._stopping or not self._tasks:
            raise ShuttingDown("the server is shutting down")
        if any(task.done() for task in self._tasks):  # a bug stopped one: say so, never hang
            raise ShuttingDown("a decoding worker has stopped; restart the server")
        n = len(sentences)
        if self._queued + self.decoding + n > self.max_queue:
            raise QueueFull(self.retry_after(n))
        loop = asyncio.get_running_loop()
        future: asyncio.Future[list[Translation]] = loop.create_future()
        if n == 0:
            future.set_result([])
            return Job(sentences, options, [], future, (), loop.time())
        costs = [tokens * options.beam for tokens in self.count_tokens(sentences)]
        job = Job(sentences, options, costs, future, astuple(options), loop.time(),
                  [None] * n, n, n, sum(costs))
        self._queue.extend(_Item(job, i) for i in range(n))
        self._queued += n
        self._queued_cost += job.queued_cost
        self._queued_jobs += 1
        self._show_queue()
        self._wake.set()
        return job

    def cancel(self, job: Job) -> None:
        """Give up on ``job``: its sentences not yet in a batch are never decoded."""
        if job.queued:
            self.metrics.cancelled.inc(job.queued)
        self._drop(job)
        job.future.cancel()

    def retry_after(self, incoming: int = 1) -> int:
        """Seconds until the queue has likely made room for ``incoming`` more sentences."""
        if self._rate <= 0:
            return 1
        return max(1, min(60, math.ceil((self._queued + self.decoding + incoming)
                                        / (self._rate * self.workers))))

    async def stop(self, timeout: float) -> None:
        """Refuse new jobs, finish those queued (no waiting for more), stop the workers. Jobs
        still unfinished after ``timeout`` seconds fail with ShuttingDown."""
        self._stopping = True
        self._wake.set()
        if self._tasks:
            try:
                await asyncio.wait_for(asyncio.shield(asyncio.gather(*self._tasks)), timeout)
            except asyncio.TimeoutError:
                for task in self._tasks:
                    task.cancel()
                decoding = [job for jobs in self._decoding_jobs.values() for job in jobs]
                for job in [*decoding, *(item.job for item in self._queue)]:
                    if not job.done:
                        job.future.set_exception(ShuttingDown("the server stopped"))
        self._threads.close(wait=False, cancel_futures=True)

    # The workers.

    async def _run(self, worker: int) -> None:
        loop = asyncio.get_running_loop()
        free_since = 0.0  # loop time this worker's last batch ended
        while True:
            self._gathering += 1
            try:
                if not await self._gather(free_since):
                    return
                # What is queued is shared among the workers waiting for it, this one included.
                batch = self._take(share=self._gathering)
            finally:
                self._gathering -= 1
            if batch:
                await self._decode(batch, worker)
                free_since = loop.time()

    async def _gather(self, free_since: float) -> bool:
        """Wait until a batch should go: False once stopping with nothing left to do."""
        loop = asyncio.get_running_loop()
        while (head := self._head()) is None:
            if self._stopping:
                return False
            self._wake.clear()
            await self._wake.wait()
        # Wait up to max_wait for more, counted from when the oldest sentence arrived or the
        # worker became free, whichever is later: under load, the clients answered by the
        # last batch send their next sentences within a few milliseconds, and they join this
        # batch instead of waiting for the next one.
        deadline = max(head.job.enqueued, free_since) + self.max_wait
        while not self._stopping and self._queued_cost < self.max_batch_tokens:
            delay = deadline - loop.time()
            if delay <= 0:
                break
            self._wake.clear()
            try:
                await asyncio.wait_for(self._wake.wait(), delay)
            except asyncio.TimeoutError:
                break
        return True

    def _head(self) -> _Item | None:
        """The oldest sentence of a live job (dropping those of finished jobs before it)."""
        while self._queue and self._queue[0].job.done:
            self._queue.popleft()
        return self._queue[0] if self._queue else None

    def _take(self, share: int = 1) -> list[_Item]:
        """The oldest sentence and those after it with the same options, in order, while
        their cost fits in max_batch_tokens and in 1/``share`` of the queued cost (the oldest
        goes whatever its cost)."""
        head = self._head()
        if head is None:
            return []
        limit = min(self.max_batch_tokens, math.ceil(self._queued_cost / share))
        key = head.job.key
        taken: list[_Item] = []
        kept: deque[_Item] = deque()
        cost = 0
        full = False
        for item in self._queue:
            job = item.job
            if job.done:
                continue
            if job.key != key or full:
                kept.append(item)
                continue
            item_cost = job.costs[item.index]
            if taken and cost + item_cost > limit:
                full = True
                kept.append(item)
                continue
            taken.append(item)
            cost += item_cost
            job.queued -= 1
            job.queued_cost -= item_cost
            if job.queued == 0:
                self._queued_jobs -= 1
        self._queue = kept
        self._queued -= len(taken)
        self._queued_cost -= cost
        self._show_queue()
        return taken

    async def _decode(self, batch: list[_Item], worker: int) -> None:
        loop = asyncio.get_running_loop()
        sentences = [item.job.sentences[item.index] for item in batch]
        options = batch[0].job.options
        jobs = list({id(item.job): item.job for item in batch}.values())
        self.decoding += len(batch)
        self._decoding_jobs[worker] = jobs
        start = time.perf_counter()
        try:
            results = await loop.run_in_executor(self._threads.executor, self.decode, sentences,
                                                 options)
        except Exception as e:  # a bug or out of memory: the requests fail, the server stays
            for job in jobs:
                self._drop(job)
                if not job.done:
                    job.future.set_exception(e)
            return
        finally:
            self.decoding -= len(batch)
            self._decoding_jobs.pop(worker, None)
        seconds = time.perf_counter() - start
        for item, result in zip(batch, results):
            job = item.job
            job.results[item.index] = result
            job.remaining -= 1
            if job.remaining == 0 and not job.done:
                job.future.set_result(job.results)  # type: ignore[arg-type]
        self._observe(batch, jobs, results, seconds)

    def _observe(self, batch: list[_Item], jobs: list[Job], results: list[Translation],
                 seconds: float) -> None:
        m = self.metrics
        m.batch_sentences.observe(len(batch))
        m.batch_requests.observe(len(jobs))
        m.batch_seconds.observe(seconds)
        m.sentences.inc(len(batch))
        beam = batch[0].job.options.beam
        m.source_tokens.inc(sum(item.job.costs[item.index] for item in batch) // beam)
        m.target_tokens.inc(sum(r.target_tokens for r in results))
        rate = len(batch) / max(seconds, 1e-6)
        self._rate = rate if self._rate == 0 else 0.8 * self._rate + 0.2 * rate

    def _drop(self, job: Job) -> None:
        """Take ``job``'s queued sentences off the books (their items are skipped later)."""
        if job.queued:
            self._queued -= job.queued
            self._queued_cost -= job.queued_cost
            self._queued_jobs -= 1
            job.queued = 0
            job.queued_cost = 0
            self._show_queue()

    def _show_queue(self) -> None:
        self.metrics.queue_sentences.set(self._queued)
        self.metrics.queue_requests.set(self._queued_jobs)
