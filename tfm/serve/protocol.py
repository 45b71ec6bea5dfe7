"""The HTTP/1.1 protocol ``tfm serve`` speaks: uvicorn's (httptools), with a deadline for reading
each request and a limit on its headers.

uvicorn times out only a keep-alive connection that sends nothing after an answer: a client that
connects and sends nothing, or sends a request's headers or body a byte at a time (slowloris),
holds its connection, and a file descriptor, for ever. Here a connection is closed when it has
not sent a whole request within ``request_timeout_s`` of connecting, of the request's first
byte, or of its previous answer, as nginx's client_header_timeout and client_body_timeout do. A
request read in full is never cut: the deadline stops while the server answers it. Reading
the answer has the same deadline: a client that stops reading (its answer waits in the
server's buffers) is disconnected once it has read nothing for ``request_timeout_s``.

Nor does uvicorn bound a request's headers: httptools gathers a header of any length in memory,
so that one huge header grows the server by more than its own size. Here headers past
``MAX_HEADER_BYTES`` get 431 and the connection is closed.

An answer given before the request's body was read (413 from Content-Length, 401, 431), on a
connection that then closes, closes lingering (RFC 9112 section 9.6): the server stops writing
(FIN after the answer) and reads and throws away what the client still sends, until the client
closes, ``LINGER_BYTES`` have come or ``request_timeout_s`` has passed. Closed at once, the
unread bytes would make the kernel reset the connection, and a client that reads only once it
has sent its whole body (Python's urllib, http.client) would get "Connection reset by peer" or
"Broken pipe" instead of the answer.

Nor the number of connections: a client that opens idle connections until the process has no
file descriptors left shuts every other client out (even /health is refused until they
close). Here at most ``max_connections`` are open; a new one past it closes the connection
that has waited longest for its client (idle, or sending a request it has not finished), and
only when every open connection has a request being answered is the new one refused, with 503.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from tfm.serve.app import error_body

# A request line and headers longer than this are refused (nginx takes 4 x 8 KiB by default).
MAX_HEADER_BYTES = 64 * 1024
# The most bytes read and thrown away after such an early answer: a body a client has begun
# sending is taken up to this size; a connection that sends more is cut.
LINGER_BYTES = 256 * 1024 * 1024


def http_protocol(request_timeout_s: float, max_connections: int | None = None
                  ) -> type[asyncio.Protocol]:
    """uvicorn's httptools protocol class with this read deadline, the header limit and at most
    ``max_connections`` open at once (None: no limit), for ``uvicorn.Config``'s ``http``. Each
    call makes a class of its own, whose connections are counted together: one per server."""
    return type("TfmHttpProtocol", (_GuardedProtocol,),
                {"request_timeout_s": request_timeout_s, "max_connections": max_connections,
                 "open_connections": set()})


class _GuardedProtocol(HttpToolsProtocol):
    request_timeout_s = 30.0
    max_connections: int | None = None
    open_connections: set[_GuardedProtocol]  # of this server: http_protocol makes the set

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._deadline: asyncio.TimerHandle | None = None
        self._waiting_since = 0.0  # loop time the client's turn began (it owes a request)
        # Bytes read while a request's headers are incomplete (None once they are), and the
        # count of headers and requests read in full.
        self._header_bytes: int | None = 0
        self._events = 0
        self._stalled: asyncio.TimerHandle | None = None  # while the write buffer is full
        self._unsent = 0  # bytes of answers not yet taken by the client, at the last deadline
        self._discarded: int | None = None  # bytes thrown away while closing (None: not)

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        if not self._make_room():
            self._refuse(503, "Service Unavailable", "the server has as many connections open "
                         f"as it takes ({self.max_connections}), each with a request being "
                         "answered; retry shortly", limit="max_connections",
                         value=self.max_connections, retry_after=1)
            return
        self.open_connections.add(self)
        self._arm()

    def _make_room(self) -> bool:
        """Whether this new connection may stay: under max_connections, or once the open
        connection that has waited longest for its client's request is closed."""
        others = self.open_connections
        if self.max_connections is None or len(others) < self.max_connections:
            return True
        idle = [c for c in others if not c._answering() and not c.transport.is_closing()]
        if not idle:
            return False
        oldest = min(idle, key=lambda c: c._waiting_since)
        others.discard(oldest)
        oldest._disarm()
        oldest.transport.abort()  # at once: close() would wait for what it has not read
        return True

    def data_received(self, data: bytes) -> None:
        if self._discarded is not None:  # closing lingering: never parsed, never kept
            self._discarded += len(data)
            if self._discarded > LINGER_BYTES:
                self.transport.abort()
            return
        before = self._events
        super().data_received(data)
        # Counted after parsing, and only chunks in which no headers and no request ended: a
        # chunk holding a body is never taken for headers.
        if self._events == before and self._header_bytes is not None:
            self._header_bytes += len(data)
            if self._header_bytes > MAX_HEADER_BYTES and not self.transport.is_closing():
                self._refuse_headers()

    def on_headers_complete(self) -> None:
        self._events += 1
        self._header_bytes = None
        super().on_headers_complete()
        # The request's cycle closes the connection after its answer when either side said
        # "Connection: close": through this, lingering if the body is still coming.
        self.cycle.transport = _ClosingAfterBody(self)  # type: ignore[assignment]

    def on_message_begin(self) -> None:
        self._arm()
        super().on_message_begin()

    def on_message_complete(self) -> None:
        self._events += 1
        self._header_bytes = 0  # the next request's headers
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if self._discarded is not None:
            self._unset_keepalive_if_required()  # uvicorn's: lingering has its own bounds
        elif not self.transport.is_closing():
            # The client's turn again: its next request (or the rest of one it is sending).
            self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self.open_connections.discard(self)
        self._disarm()
        self._unstall()
        super().connection_lost(exc)

    def pause_writing(self) -> None:
        super().pause_writing()  # the client reads more slowly than the server writes
        if self._stalled is None:
            self._stalled = self.loop.call_later(self.request_timeout_s, self.transport.abort)

    def resume_writing(self) -> None:
        self._unstall()
        super().resume_writing()

    def _unstall(self) -> None:
        if self._stalled is not None:
            self._stalled.cancel()
            self._stalled = None

    def _arm(self) -> None:
        self._disarm()
        self._waiting_since = self.loop.time()
        self._deadline = self.loop.call_later(self.request_timeout_s, self._expire)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _answering(self) -> bool:
        """Whether a request read in full waits for its answer (uvicorn's state: the current
        request and those pipelined behind it)."""
        cycle = self.cycle
        return bool(self.pipeline) or (cycle is not None and not cycle.more_body
                                       and not cycle.response_complete)

    def _expire(self) -> None:
        self._deadline = None
        # Never under a request the server is still answering: the deadline starts again
        # when it has answered.
        if self._answering() or self.transport.is_closing():
            return
        unsent = self.transport.get_write_buffer_size()
        if not unsent:
            self.transport.close()
        elif unsent != self._unsent:  # the client is still reading its answer
            self._unsent = unsent
            self._arm()
        else:
            self.transport.abort()  # close() would wait for a client that reads nothing

    def close_after_answer(self) -> None:
        """Close after the answer to the current request: lingering if its body is still
        coming (the client has not sent it all), else at once."""
        if self.transport.is_closing():
            return
        if self.cycle is not None and self.cycle.more_body:
            self._linger()
        else:
            self.transport.close()

    def _linger(self) -> None:
        """Stop writing once the answer is sent, and read and throw away what the client still
        sends until it closes, or for at most LINGER_BYTES and request_timeout_s."""
        transport = self.transport
        self._discarded = 0
        self._disarm()
        self._deadline = self.loop.call_later(self.request_timeout_s, transport.abort)
        self.flow.resume_reading()  # paused if a body had filled uvicorn's buffer
        if transport.can_write_eof():
            transport.write_eof()  # once the answer is sent: the client reads it, then the end

    def _refuse_headers(self) -> None:
        self._refuse(431, "Request Header Fields Too Large", "the request's headers are over "
                     f"this server's limit of {MAX_HEADER_BYTES} bytes",
                     limit="max_header_bytes", value=MAX_HEADER_BYTES, linger=True)

    def _refuse(self, status: int, reason: str, message: str, *, limit: str, value: int,
                retry_after: int | None = None, linger: bool = False) -> None:
        """Answer ``status`` with the server's JSON error body, whatever was asked, and close
        (lingering: while the client is sending a request)."""
        body = json.dumps(error_body(status, message, limit=limit, value=value)).encode()
        retry = b"retry-after: %d\r\n" % retry_after if retry_after is not None else b""
        self.transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                             b"content-length: %d\r\n%sconnection: close\r\n\r\n"
                             % (status, reason.encode(), len(body), retry) + body)
        if linger:
            self._linger()
        else:
            self.transport.close()


class _ClosingAfterBody:
    """A connection's transport as uvicorn's request cycle holds it: ``close`` (after an answer
    that closes the connection) is the protocol's ``close_after_answer``; the rest is the
    transport's own."""

    def __init__(self, protocol: _GuardedProtocol) -> None:
        self._protocol = protocol

    def close(self) -> None:
        self._protocol.close_after_answer()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._protocol.transport, name)
