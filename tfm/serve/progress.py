"""How far a document's translation has gone, for the page's count while it waits.

The client names its POST /v1/document with an id of its own choosing (``progress=``, random:
the page takes ``crypto.randomUUID()``) and asks GET /v1/document/{id}/progress as often as it
likes, while the POST is out: the sentences done of the document's total, read from the
batcher's jobs (each counts its sentences still to translate). Nothing is kept once the POST is
answered, and nothing but two numbers is told, so an id needs no owner: this is the cheapest
honest channel (no job store, no streaming format for clients to parse)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager

from starlette.exceptions import HTTPException

from tfm.serve.batcher import Job

_IDENT = re.compile(r"[A-Za-z0-9-]{8,64}")


class Progress:
    """The documents being translated that asked for progress, by id: their batcher jobs."""

    def __init__(self) -> None:
        self._jobs: dict[str, list[Job]] = {}

    def check(self, ident: str | None) -> None:
        """Refuse an id that is malformed (422) or already counting another document (409)."""
        if ident is None:
            return
        if not _IDENT.fullmatch(ident):
            raise _error(422, "invalid request: progress: 8 to 64 letters, digits or '-'")
        if ident in self._jobs:
            raise _error(409, f"progress {ident} is counting another document: choose "
                         "another id")

    @contextmanager
    def watching(self, ident: str | None, jobs: list[Job]) -> Iterator[None]:
        """Count ``jobs``' sentences under ``ident`` (None: not asked) while in the block."""
        if ident is None:
            yield
            return
        self.check(ident)
        self._jobs[ident] = jobs
        try:
            yield
        finally:
            del self._jobs[ident]

    def count(self, ident: str) -> dict[str, int]:
        """``done`` of ``total`` sentences of the document counted under ``ident``; 404 for
        an id counting none."""
        jobs = self._jobs.get(ident)
        if jobs is None:
            raise _error(404, f"progress {ident[:64]}: no document is being translated under "
                         "this id (not yet queued, or already answered)")
        total = sum(len(job.sentences) for job in jobs)
        left = sum(job.remaining if not job.done else 0 for job in jobs)
        return {"done": total - left, "total": total}


def _error(status: int, message: str) -> HTTPException:
    """An error the app answers as JSON (its handler of HTTPException)."""
    return HTTPException(status, message)
