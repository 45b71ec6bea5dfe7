"""ServeConfig: how ``tfm serve`` listens, batches and bounds its work; defaults in one place."""

from __future__ import annotations

from dataclasses import dataclass, field

from tfm.config import EngineOptions, check_fields, option, option_spelling
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
                                   "gathered across requests.", min=1)
    max_wait_ms: float = option(5.0, "How long a batch waits for more sentences, from the "
                                "oldest's arrival or the end of the last batch, whichever is "
                                "later.", min=0)
    # Batches decoded at once, each by a worker thread with its share of torch's CPU threads
    # (tfm serve --workers: EngineOptions.workers).
    workers: int = field(default=1, metadata={"option": None})
    max_queue: int = option(2048, "Most sentences waiting or decoding; beyond it requests get "
                            "503 with Retry-After.", min=1)
    max_sentences: int = option(512, "Most sentences in one request, after splitting its texts "
                                "(413 beyond).", min=1)
    max_request_bytes: int = option(1 << 20, "Largest request body (413 beyond).", min=1)
    max_beam: int = option(16, "Largest beam a request may ask for (422 beyond).", min=1)
    beam: int | None = option(None, "Beam size of a request that gives none; 1 is greedy "
                              "decoding.", short="-b", shown_default="the model's", min=1)
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
        "raises its soft limit to the hard one)", min=1)

    def __post_init__(self) -> None:
        check_fields(self)  # the minimums (min=...)
        if self.workers < 1:  # tfm serve's --workers, EngineOptions.workers
            raise UsageError(f"{option_spelling(EngineOptions, 'workers')} {self.workers}: "
                             "give 1 or more")
        if not self.request_timeout_s > 0:
            raise UsageError(f"{self._spelled('request_timeout_s')} {self.request_timeout_s}: "
                             "give a number above 0")
        if not 0 <= self.port <= 65535:
            raise UsageError(f"{self._spelled('port')} {self.port}: give 0 to 65535")
        if self.beam is not None and self.beam > self.max_beam:
            raise UsageError(f"{self._spelled('beam')} {self.beam}: give at most "
                             f"{self._spelled('max_beam')} ({self.max_beam})")
        if self.api_key is not None and not self.api_key.strip():
            raise UsageError(f"the API key is empty: give a non-empty "
                             f"{self._spelled('api_key')} (or TFM_API_KEY), or none")
        # A request can never hold more sentences than the queue takes.
        self.max_sentences = min(self.max_sentences, self.max_queue)

    @classmethod
    def _spelled(cls, name: str) -> str:
        return option_spelling(cls, name) or name
