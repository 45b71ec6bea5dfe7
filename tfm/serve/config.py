"""ServeConfig: how ``tfm serve`` listens, batches and bounds its work; defaults in one place."""

from __future__ import annotations

from dataclasses import dataclass

from tfm.errors import UsageError


@dataclass
class ServeConfig:
    """Everything the server decides besides the model. The command line's defaults are these."""

    host: str = "127.0.0.1"  # loopback only unless told otherwise
    port: int = 8000
    # Dynamic batching: the decoding worker takes the sentences waiting across all requests
    # (oldest first, those sharing the oldest one's decoding options) until their source tokens
    # x beam reach this, or until the oldest has waited max_wait_ms. Also the size of each
    # search call, as SearchOptions.batch_tokens (--batch-tokens) is for `tfm translate`.
    max_batch_tokens: int = 4096
    max_wait_ms: float = 5.0
    # Batches decoded at once, each by a worker thread with its share of torch's CPU threads.
    workers: int = 1
    max_queue: int = 2048  # sentences waiting or being decoded; beyond it: 503 + Retry-After
    max_sentences: int = 512  # per request, after splitting texts into sentences (413)
    max_request_bytes: int = 1 << 20  # request body (413)
    max_beam: int = 16  # largest beam a request may ask for (422)
    beam: int | None = None  # the server's default beam; None: the model's
    api_key: str | None = None  # when set, /v1/* and /metrics need it (401 without)
    drain_timeout_s: float = 30.0  # on SIGTERM: longest wait for the requests in flight
    # A connection that has not sent a whole request this long after connecting, after the
    # request's first byte or after its previous answer is closed, as is one that reads
    # nothing of its answer this long (slow or stalled clients).
    request_timeout_s: float = 30.0
    # Connections open at once; past it a new one closes the one that has waited longest for
    # its client (503 only when every one has a request being answered). None: as many as the
    # process may open files, less 64 for everything else (tfm serve raises its soft limit on
    # open files to the hard one first).
    max_connections: int | None = None

    def __post_init__(self) -> None:
        for name in ("max_batch_tokens", "workers", "max_queue", "max_sentences",
                     "max_request_bytes", "max_beam"):
            if getattr(self, name) < 1:
                flag = "--" + name.replace("_", "-")
                raise UsageError(f"{flag} must be at least 1, not {getattr(self, name)}")
        if self.max_connections is not None and self.max_connections < 1:
            raise UsageError(f"--max-connections must be at least 1, not "
                             f"{self.max_connections}")
        if not self.request_timeout_s > 0:
            raise UsageError(f"--request-timeout must be more than 0, not "
                             f"{self.request_timeout_s}")
        if self.max_wait_ms < 0:
            raise UsageError(f"--max-wait-ms must be 0 or more, not {self.max_wait_ms}")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"--port must be between 0 and 65535, not {self.port}")
        if self.beam is not None and not 1 <= self.beam <= self.max_beam:
            raise UsageError(f"--beam must be between 1 and --max-beam ({self.max_beam}), "
                             f"not {self.beam}")
        if self.api_key is not None and not self.api_key.strip():
            raise UsageError("the API key is empty: give a non-empty --api-key (or "
                             "TFM_API_KEY), or none")
        # A request can never hold more sentences than the queue takes.
        self.max_sentences = min(self.max_sentences, self.max_queue)
