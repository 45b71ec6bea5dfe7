"""The HTTP/1.1 protocol ``tfm serve`` speaks: uvicorn's (httptools), with a deadline for reading
each request.

uvicorn times out only a keep-alive connection that sends nothing after an answer: a client that
connects and sends nothing, or sends a request's headers or body a byte at a time (slowloris),
holds its connection, and a file descriptor, for ever. Here a connection is closed when it has
not sent a whole request within ``request_timeout_s`` of connecting, of the request's first
byte, or of its previous answer, as nginx's client_header_timeout and client_body_timeout do. A
request read in full is never cut: the deadline stops while the server answers it.
"""

from __future__ import annotations

import asyncio
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol


def protocol_with_deadline(request_timeout_s: float) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol class, with this read deadline (for ``uvicorn.Config``'s
    ``http``)."""
    return type("DeadlineHttpToolsProtocol", (_DeadlineProtocol,),
                {"request_timeout_s": request_timeout_s})


class _DeadlineProtocol(HttpToolsProtocol):
    request_timeout_s = 30.0

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._reading = False  # between a request's first byte and its last
        self._unanswered = 0  # requests read in full and not answered yet

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        self._arm()

    def on_message_begin(self) -> None:
        self._reading = True
        self._arm()
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._reading = False
        self._unanswered += 1
        self._disarm()
        super().on_message_complete()

    def on_response_complete(self) -> None:
        self._unanswered = max(0, self._unanswered - 1)
        super().on_response_complete()
        if not self.transport.is_closing():
            # The client's turn again: its next request (or the rest of one it is sending).
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expire(self) -> None:
        self._deadline = None
        # Never under a request the server is still answering (pipelined requests): the
        # deadline starts again when it has answered.
        if self._unanswered == 0 and not self.transport.is_closing():
            self.transport.close()
