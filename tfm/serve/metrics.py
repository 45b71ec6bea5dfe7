"""The server's Prometheus metrics, in a registry of its own (no process-wide state: two apps in
one process, as in the tests, count apart)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.exposition import CONTENT_TYPE_LATEST

# Request latency: a cached answer takes milliseconds, a long page on a CPU many seconds.
_SECONDS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
_COUNTS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServeMetrics:
    """Requests by endpoint and status, latency, batches, queue depth, work done."""

    content_type = CONTENT_TYPE_LATEST

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter("tfm_serve_requests", "HTTP requests answered, by endpoint "
                                "and status code", ["endpoint", "status"], registry=r)
        self.latency = Histogram("tfm_serve_request_seconds", "Time from a request's arrival "
                                 "to its answer", ["endpoint"], buckets=_SECONDS, registry=r)
        self.in_flight = Gauge("tfm_serve_requests_in_flight", "Requests being answered",
                               registry=r)
        self.queue_sentences = Gauge("tfm_serve_queue_sentences", "Sentences waiting for a "
                                     "batch", registry=r)
        self.queue_requests = Gauge("tfm_serve_queue_requests", "Requests with sentences "
                                    "waiting for a batch", registry=r)
        self.batch_sentences = Histogram("tfm_serve_batch_sentences", "Sentences per decoded "
                                         "batch", buckets=_COUNTS, registry=r)
        self.batch_requests = Histogram("tfm_serve_batch_requests", "Requests sharing a "
                                        "decoded batch", buckets=_COUNTS, registry=r)
        self.batch_seconds = Histogram("tfm_serve_batch_seconds", "Decoding time of a batch",
                                       buckets=_SECONDS, registry=r)
        self.sentences = Counter("tfm_serve_sentences", "Sentences translated", registry=r)
        self.source_tokens = Counter("tfm_serve_source_tokens", "Source tokens translated "
                                     "(end-of-sentence included)", registry=r)
        self.target_tokens = Counter("tfm_serve_target_tokens", "Tokens of the best "
                                     "translations", registry=r)
        self.cancelled = Counter("tfm_serve_sentences_cancelled", "Sentences dropped before "
                                 "decoding because their client went away", registry=r)
        self.ready = Gauge("tfm_serve_ready", "1 once the model is loaded and the server "
                           "takes requests", registry=r)

    def render(self) -> bytes:
        """The Prometheus text exposition of every metric."""
        return generate_latest(self.registry)
