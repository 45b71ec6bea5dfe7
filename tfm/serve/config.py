"""ServeConfig: how ``tfm serve`` listens, batches and bounds its work; defaults in one place."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfm.config import option
from tfm.errors import UsageError


@dataclass
class ServeConfig:
    """Everything the server decides besides the model. The command line's defaults are these."""

    host: str = option("127.0.0.1", "Address to listen on; 0.0.0.0 opens the server to the "
                       "network (give it an API key).")
    port: int = option(8000, "Port to listen on; 0 picks a free one.", short="-p")
    # Dynamic batching: the decoding worker takes the sentences waiting across all requests
    # (oldest first, those sharing the oldest one's decoding options) until their source tokens
    # x beam reach this, or until the oldest has waited max_wait_ms. Also the size of each
    # search call, as SearchOptions.batch_tokens (--batch-tokens) is for `tfm translate`.
    max_batch_tokens: int = option(4096, "Most source tokens x beam decoded in one batch, "
                                   "gathered across requests.")
    max_wait_ms: float = option(5.0, "How long a batch waits for more sentences, from the "
                                "oldest's arrival or the end of the last batch, whichever is "
                                "later.")
    # Batches decoded at once, each by a worker thread with its share of torch's CPU threads
    # (tfm serve --workers: EngineOptions.workers).
    workers: int = field(default=1, metadata={"option": None})
    max_queue: int = option(2048, "Most sentences waiting or decoding; beyond it requests get "
                            "503 with Retry-After.")
    max_sentences: int = option(512, "Most sentences in one request, after splitting its texts "
                                "(413 beyond).")
    max_request_bytes: int = option(1 << 20, "Largest request body (413 beyond).")
    max_beam: int = option(16, "Largest beam a request may ask for (422 beyond).")
    beam: int | None = option(None, "Beam size of a request that gives none; 1 is greedy "
                              "decoding.", short="-b", shown_default="the model's")
    api_key: str | None = option(
        None, "Require this key (header 'Authorization: Bearer KEY' or 'X-API-Key: KEY') on "
        "/v1/* and /metrics. Prefer the environment variable: a command line is visible to "
        "other users.", envvar="TFM_API_KEY")
    drain_timeout_s: float = field(default=30.0, metadata={"option": None})  # on SIGTERM:
    # longest wait for the requests in flight
    request_timeout_s: float = option(
        30.0, "Seconds a client has to send a whole request, from connecting, from the "
        "request's first byte or from its previous answer, and to read some of its answer once "
        "the server's buffers are full; a slower connection is closed.",
        option="--request-timeout")
    max_connections: int | None = option(
        None, "Most connections open at once; past it a new one closes the one that has waited "
        "longest for its client's request, or gets 503 when every one has a request being "
        "answered.", shown_default="what the open-file limit allows, less 64 (tfm serve "
        "raises its soft limit to the hard one)")

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
