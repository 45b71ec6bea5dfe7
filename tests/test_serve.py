"""Specifications of ``tfm serve``: the dynamic batcher on its own and the HTTP server as
clients meet it (its sentence splitter: test_sentences.py).

The server runs for real: ``tfm serve`` in a subprocess on a free loopback port, or uvicorn in
a thread where a test must hold the decoding worker at a known point (a translator whose
``translate`` waits at a gate), and is spoken to over HTTP. The model is a tiny one with fixed
random weights: its translations are arbitrary but deterministic, which is all it takes to show
that the server answers what ``tfm translate`` answers.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import json
import os
import queue
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import forked
import httpx
import local_http
import pytest
import torch
from conftest import PAIRS, tfm
from prometheus_client.parser import text_string_to_metric_families

from tfm.checkpoint import save_model_dir
from tfm.config import GenerationDefaults, ModelConfig, SearchOptions
from tfm.data.language_marks import LanguageMarking
from tfm.data.tokenizer import train_tokenizer
from tfm.decoding.search import Hypothesis
from tfm.decoding.translator import Source, Translation, Translator
from tfm.decoding.workers import Workers
from tfm.errors import UsageError
from tfm.model import Transformer
from tfm.model_info import ModelInfo
from tfm.serve.batcher import Batcher, QueueFull, ShuttingDown
from tfm.serve.config import ServeConfig

API_KEY = "test-key-5b1f"
SENTENCES = [source for source, _ in PAIRS[:12]]
LONG = " ".join(["the dog runs through the snow"] * 20)  # over the model's 64 positions


# --- the model and the servers --------------------------------------------------------------

def write_tiny_model(directory: Path, tags: tuple[str, ...] = (),
                     marking: str | None = None, directions: tuple[str, ...] = ()) -> Path:
    """A model directory with fixed random weights (d_model 32, one layer each side, at most
    64 positions), a BPE trained on the test pairs, beam 4 by default and short outputs;
    ``tags``: target-language tags (``>>fr<<``) of a multilingual model, placed as
    ``marking`` says (tfm.data.language_marks.WHERE; None: before the source, inferred) and
    its ``directions`` (``de-fr``) as recorded."""
    tokenizer = train_tokenizer((t for pair in PAIRS for t in pair), vocab_size=300, tags=tags)
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=2,
                         encoder_layers=1, decoder_layers=1, d_ff=64, max_positions=64,
                         dropout=0.0)
    info = ModelInfo(config, src_lang="en", tgt_lang="de",
                     generation=GenerationDefaults(beam=4, max_len_a=1.0, max_len_b=5),
                     provenance={"note": "random weights for tests"},
                     directions=list(directions),
                     language_marking=None if marking is None else LanguageMarking(marking))
    save_model_dir(directory, Transformer(config).eval(), tokenizer, info)
    return directory


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_tiny_model(tmp_path_factory.mktemp("serve") / "model")


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> Translator:
    from tfm.decoding.engines import load_translator

    return load_translator(model_dir, "cpu")


class Server:
    """A running ``tfm serve`` process: its URL and what it wrote on stderr."""

    def __init__(self, process: subprocess.Popen, url: str, log: list[str],
                 reader: threading.Thread) -> None:
        self.process, self.url, self.log, self.reader = process, url, log, reader


@contextmanager
def tfm_serve(model: Path, *args: str, env: dict[str, str] | None = None
              ) -> Iterator[Server]:
    """``tfm serve`` on a free loopback port, ready (/health 200) when this yields; killed at
    the end. Its stderr is read all along (a full pipe would stall the server)."""
    process = forked.popen(
        ["serve", "-m", str(model), "--host", "127.0.0.1", "--port", "0", *args],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        env={**os.environ, **(env or {})})
    lines: queue.Queue[str] = queue.Queue()
    log: list[str] = []

    def read() -> None:
        for line in process.stderr:  # type: ignore[union-attr]
            log.append(line)
            lines.put(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        url = None
        deadline = time.monotonic() + 600  # only catches a hang: starting is the machine's
        while url is None and time.monotonic() < deadline and process.poll() is None:
            try:
                line = lines.get(timeout=0.5)
            except queue.Empty:
                continue
            if " on http://" in line:
                url = line.split(" on ")[1].split()[0]
        assert url is not None, f"tfm serve did not start:\n{''.join(log)}"
        wait_until(lambda: local_http.get(f"{url}/health").status_code == 200)
        yield Server(process, url, log, reader)
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(10)


def wait_until(condition: Callable[[], bool], timeout: float = 30.0) -> None:
    """Poll ``condition`` (connection errors count as False) until true, or fail."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if condition():
                return
        except httpx.TransportError:
            pass
        time.sleep(0.02)
    raise AssertionError("timed out waiting")


@contextmanager
def serving(app: Any, request_timeout_s: float = 30.0, max_connections: int | None = None,
            protocol: type | None = None) -> Iterator[str]:
    """Uvicorn serving ``app`` in a thread on a free loopback port, with the HTTP protocol
    ``tfm serve`` uses (or ``protocol``, made by ``http_protocol``, whose open connections a
    test may watch); its base URL."""
    import uvicorn

    from tfm.serve.protocol import http_protocol

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    http = protocol or http_protocol(request_timeout_s, max_connections)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="on", http=http,
                                           timeout_graceful_shutdown=5))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 30
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.started
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(15)
        sock.close()


class GatedTranslator(Translator):
    """A real translator whose decoding (``translate_prepared``, what the server calls) waits
    until ``gate`` opens, and that records the sentences of each call: a test can hold a batch
    in decoding and see what was decoded."""

    def __init__(self, inner: Translator) -> None:
        self.inner, self.vocabs, self.info = inner, inner.vocabs, inner.info
        self.engine, self.max_source_tokens = inner.engine, inner.max_source_tokens
        self.gate = threading.Event()
        self.entered = threading.Event()
        self.calls: list[list[str]] = []

    def search(self, batch: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
        return self.inner.search(batch, options)

    def translate_prepared(self, sources: list[Source], options: SearchOptions
                           ) -> list[Translation]:
        self.calls.append([source.sentence for source in sources])
        self.entered.set()
        assert self.gate.wait(30), "the test never opened the gate"
        return self.inner.translate_prepared(sources, options)


def metric_samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample of a Prometheus exposition, by name and sorted labels."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def post(url: str, body: Any, key: str | None = API_KEY,
         headers: dict[str, str] | None = None) -> httpx.Response:
    headers = {**({"Authorization": f"Bearer {key}"} if key else {}), **(headers or {})}
    return local_http.post(f"{url}/v1/translate", json=body, headers=headers, timeout=60)


# --- reference translations by `tfm translate` ----------------------------------------------

@pytest.fixture(scope="module")
def reference(model_dir: Path, tmp_path_factory: pytest.TempPathFactory
              ) -> Callable[[int], dict[str, dict[str, Any]]]:
    """``tfm translate --format jsonl`` of SENTENCES and LONG, per beam: source -> record."""
    cache: dict[int, dict[str, dict[str, Any]]] = {}
    source = tmp_path_factory.mktemp("ref") / "src.txt"
    source.write_text("".join(s + "\n" for s in [*SENTENCES, LONG]), encoding="utf-8")

    def get(beam: int) -> dict[str, dict[str, Any]]:
        if beam not in cache:
            result = tfm("translate", "-m", str(model_dir), "--beam", str(beam), "--format",
                         "jsonl", "--input", str(source), "--device", "cpu")
            assert result.returncode == 0, result.stderr
            records = [json.loads(line) for line in result.stdout.splitlines()]
            cache[beam] = {r["source"]: r for r in records}
        return cache[beam]

    return get


@pytest.fixture(scope="module")
def server(model_dir: Path) -> Iterator[Server]:
    """``tfm serve`` with an API key and small limits, for the whole module."""
    with tfm_serve(model_dir, "--max-sentences", "20", "--max-request-bytes", "4000",
                   "--max-beam", "6", env={"TFM_API_KEY": API_KEY}) as running:
        yield running


# --- the batcher, without HTTP --------------------------------------------------------------

def fake_decode(calls: list[tuple[list[str], int]], gate: threading.Event | None = None
                ) -> Callable[[list[str], SearchOptions], list[Translation]]:
    """A decode function that records (sentences, beam) and upper-cases each sentence."""

    def decode(sentences: list[str], options: SearchOptions) -> list[Translation]:
        calls.append((list(sentences), options.beam))
        if gate is not None:
            assert gate.wait(10)
        if "boom" in sentences:
            raise RuntimeError("decoding failed")
        return [Translation(s, [(s.upper(), -1.0)], target_tokens=len(s.split()))
                for s in sentences]

    return decode


def words(sentences: list[str]) -> list[int]:
    return [len(s.split()) for s in sentences]


def batcher(decode: Callable[..., list[Translation]], **limits: Any) -> Batcher:
    settings: dict[str, Any] = dict(max_batch_tokens=10, max_wait=0.05, max_queue=100)
    settings.update(limits)
    b = Batcher(decode, words, **settings)
    b.start()
    return b


async def started_decoding(calls: list[Any], n: int = 1) -> None:
    while len(calls) < n:
        await asyncio.sleep(0.005)


GREEDY, BEAM2 = SearchOptions(beam=1), SearchOptions(beam=2)


def test_sentences_of_concurrent_requests_are_decoded_together_up_to_the_token_budget():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> list[list[Translation]]:
        b = batcher(fake_decode(calls))
        jobs = [b.enqueue([f"s{i} a b"], GREEDY) for i in range(5)]  # 3 tokens each
        results = await asyncio.gather(*(job.future for job in jobs))
        await b.stop(5)
        return results

    results = asyncio.run(scenario())
    assert [c[0] for c in calls] == [["s0 a b", "s1 a b", "s2 a b"], ["s3 a b", "s4 a b"]]
    assert [r[0].text for r in results] == [f"S{i} A B" for i in range(5)]


def test_the_budget_counts_tokens_times_beam_and_a_long_sentence_still_goes_alone():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> None:
        b = batcher(fake_decode(calls))
        jobs = [b.enqueue(["a b c"], BEAM2), b.enqueue(["d e"], BEAM2),  # 6 + 4 = 10
                b.enqueue(["f"], BEAM2), b.enqueue([" ".join("x" * 12)], BEAM2)]
        await asyncio.gather(*(job.future for job in jobs))
        await b.stop(5)

    asyncio.run(scenario())
    assert [c[0] for c in calls] == [["a b c", "d e"], ["f"], [" ".join("x" * 12)]]


def test_only_sentences_with_the_same_options_share_a_batch_and_the_oldest_goes_first():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> None:
        b = batcher(fake_decode(calls), max_batch_tokens=100)
        jobs = [b.enqueue(["one"], GREEDY), b.enqueue(["two"], BEAM2),
                b.enqueue(["three"], GREEDY)]
        await asyncio.gather(*(job.future for job in jobs))
        await b.stop(5)

    asyncio.run(scenario())
    assert calls == [(["one", "three"], 1), (["two"], 2)]


def test_a_lone_sentence_waits_max_wait_for_company_then_goes_alone():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> float:
        b = batcher(fake_decode(calls), max_wait=0.2)
        start = time.monotonic()
        await b.enqueue(["alone"], GREEDY).future
        waited = time.monotonic() - start
        await b.stop(5)
        return waited

    assert asyncio.run(scenario()) >= 0.2
    assert calls == [(["alone"], 1)]


def test_company_arriving_within_the_wait_shares_the_batch_which_goes_once_full():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> float:
        b = batcher(fake_decode(calls), max_wait=5.0, max_batch_tokens=2)
        start = time.monotonic()
        first = b.enqueue(["first"], GREEDY)
        await asyncio.sleep(0.05)
        second = b.enqueue(["second"], GREEDY)  # 1 + 1 token: the budget is full
        await asyncio.gather(first.future, second.future)
        waited = time.monotonic() - start
        await b.stop(5)
        return waited

    assert asyncio.run(scenario()) < 5.0
    assert calls == [(["first", "second"], 1)]


def test_sentences_sent_just_after_a_batch_ends_join_the_sentences_that_waited_for_it():
    """Under load the clients answered by a batch send again within milliseconds: the next
    batch waits max_wait from the end of the last one, so they share it."""
    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    async def scenario() -> None:
        b = batcher(fake_decode(calls, gate), max_wait=0.5, max_batch_tokens=100)
        first = b.enqueue(["first"], GREEDY)
        await started_decoding(calls)
        waiting = b.enqueue(["waiting"], GREEDY)  # its own wait is over by the batch's end
        await asyncio.sleep(0.6)
        gate.set()
        await first.future
        latecomer = b.enqueue(["latecomer"], GREEDY)  # the answered client sends again
        await asyncio.gather(waiting.future, latecomer.future)
        await b.stop(5)

    asyncio.run(scenario())
    assert [c[0] for c in calls] == [["first"], ["waiting", "latecomer"]]


def test_a_request_cancelled_before_its_batch_costs_no_decoding():
    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    async def scenario(b_holder: list[Batcher]) -> None:
        b = batcher(fake_decode(calls, gate))
        b_holder.append(b)
        first = b.enqueue(["first"], GREEDY)
        await started_decoding(calls)
        gone = b.enqueue(["gone"], GREEDY)
        assert b.queued == 1
        b.cancel(gone)
        assert b.queued == 0
        gate.set()
        await first.future
        last = b.enqueue(["last"], GREEDY)
        await last.future
        await b.stop(5)

    holder: list[Batcher] = []
    asyncio.run(scenario(holder))
    assert [c[0] for c in calls] == [["first"], ["last"]]
    registry = holder[0].metrics.registry
    assert registry.get_sample_value("tfm_serve_sentences_cancelled_total") == 1


def test_a_full_queue_refuses_at_once_with_a_retry_estimate():
    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    async def scenario() -> None:
        b = batcher(fake_decode(calls, gate), max_queue=3)
        decoding = b.enqueue(["a"], GREEDY)
        await started_decoding(calls)
        waiting = b.enqueue(["b", "c"], GREEDY)  # 1 decoding + 2 waiting: full
        with pytest.raises(QueueFull) as refused:
            b.enqueue(["d"], GREEDY)
        assert refused.value.retry_after >= 1
        gate.set()
        await asyncio.gather(decoding.future, waiting.future)
        await b.stop(5)

    asyncio.run(scenario())


def test_a_decoding_error_fails_its_batch_and_the_worker_goes_on():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> None:
        b = batcher(fake_decode(calls))
        bad = b.enqueue(["boom"], GREEDY)
        with pytest.raises(RuntimeError, match="decoding failed"):
            await bad.future
        good = b.enqueue(["fine"], GREEDY)
        assert (await good.future)[0].text == "FINE"
        await b.stop(5)

    asyncio.run(scenario())


def test_stopping_finishes_the_queued_work_and_refuses_new_work():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> None:
        b = batcher(fake_decode(calls), max_wait=10.0)  # stop must not wait for company
        jobs = [b.enqueue([f"s{i}"], GREEDY) for i in range(3)]
        start = time.monotonic()
        await b.stop(5)
        assert time.monotonic() - start < 5
        assert [job.future.result()[0].text for job in jobs] == ["S0", "S1", "S2"]
        with pytest.raises(ShuttingDown):
            b.enqueue(["late"], GREEDY)

    asyncio.run(scenario())


def test_several_workers_share_what_waits_and_decode_side_by_side():
    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    async def scenario() -> list[list[Translation]]:
        b = batcher(fake_decode(calls, gate), max_batch_tokens=100,
                    workers=Workers(2, share_cpu_threads=False))
        jobs = [b.enqueue([f"s{i}"], GREEDY) for i in range(4)]
        await started_decoding(calls, 2)  # both batches are decoding before either ends
        gate.set()
        results = await asyncio.gather(*(job.future for job in jobs))
        await b.stop(5)
        return results

    results = asyncio.run(scenario())
    # Two workers free: each takes half of what waits, the oldest first.
    assert sorted(c[0] for c in calls) == [["s0", "s1"], ["s2", "s3"]]
    assert [r[0].text for r in results] == ["S0", "S1", "S2", "S3"]


def test_a_free_worker_takes_all_that_waits_while_the_other_is_busy():
    calls: list[tuple[list[str], int]] = []
    gate = threading.Event()

    async def scenario() -> None:
        b = batcher(fake_decode(calls, gate), max_batch_tokens=100,
                    workers=Workers(2, share_cpu_threads=False))
        first = b.enqueue(["first"], GREEDY)
        await started_decoding(calls, 1)  # one worker busy with it
        later = [b.enqueue([f"s{i}"], GREEDY) for i in range(3)]
        await started_decoding(calls, 2)
        gate.set()
        await asyncio.gather(first.future, *(job.future for job in later))
        await b.stop(5)

    asyncio.run(scenario())
    assert calls == [(["first"], 1), (["s0", "s1", "s2"], 1)]


def test_the_number_of_workers_must_be_at_least_one():
    with pytest.raises(UsageError, match="--workers 0"):
        Batcher(fake_decode([]), words, max_batch_tokens=10, max_wait=0.0, max_queue=10,
                workers=Workers(0))
    with pytest.raises(UsageError, match="--workers"):
        ServeConfig(workers=0)


def test_a_request_of_many_sentences_may_span_batches_and_is_answered_in_order():
    calls: list[tuple[list[str], int]] = []

    async def scenario() -> list[Translation]:
        b = batcher(fake_decode(calls), max_batch_tokens=4)
        job = b.enqueue([f"w{i} x" for i in range(5)], GREEDY)
        results = await job.future
        await b.stop(5)
        return results

    results = asyncio.run(scenario())
    assert len(calls) == 3
    assert [r.text for r in results] == [f"W{i} X" for i in range(5)]


# --- the HTTP server ------------------------------------------------------------------------

@pytest.mark.parametrize("beam", [1, 4])
def test_translations_are_those_of_tfm_translate(server, reference, beam):
    expected = reference(beam)
    response = post(server.url, {"text": [*SENTENCES, LONG], "beam": beam, "scores": True})
    assert response.status_code == 200, response.text
    answers = response.json()["translations"]
    assert len(answers) == len(SENTENCES) + 1
    for source, answer in zip([*SENTENCES, LONG], answers):
        record = expected[source]
        assert answer["text"] == record["translation"]
        (sentence,) = answer["sentences"]
        assert sentence["source"] == source
        assert sentence["score"] == pytest.approx(record["score"], abs=1e-4)
    assert answers[-1]["truncated"] and not answers[0]["truncated"]


def test_n_best_lists_each_sentences_hypotheses_best_first(server):
    response = post(server.url, {"text": SENTENCES[0], "beam": 4, "n_best": 3})
    assert response.status_code == 200, response.text
    (sentence,) = response.json()["translations"][0]["sentences"]
    scores = [h["score"] for h in sentence["n_best"]]
    assert len(scores) == 3 and scores == sorted(scores, reverse=True)
    assert sentence["n_best"][0]["translation"] == sentence["translation"]


@pytest.mark.parametrize("options", [{"beam": 1, "max_length": 3},
                                     {"beam": 3, "length_penalty": 0.2, "max_length": 4}])
def test_decoding_options_of_a_request_reach_the_search(server, translator, options):
    response = post(server.url, {"text": SENTENCES[:3], "scores": True, **options})
    assert response.status_code == 200, response.text
    expected = translator.translate(SENTENCES[:3], translator.default_options(
        beam=options["beam"], length_penalty=options.get("length_penalty"), max_len_a=0.0,
        max_len_b=options["max_length"]))
    got = [t["sentences"][0] for t in response.json()["translations"]]
    assert [g["translation"] for g in got] == [e.text for e in expected]
    assert [g["score"] for g in got] == pytest.approx([e.hypotheses[0][1] for e in expected],
                                                      abs=1e-4)
    assert all(e.target_tokens < options["max_length"] for e in expected)


def test_a_pasted_page_comes_back_with_its_line_breaks(server, reference):
    expected = reference(4)
    a, b, c = SENTENCES[:3]
    response = post(server.url, {"text": f"{a} {b}\n\n{c}\n"})
    assert response.status_code == 200, response.text
    t = [expected[s]["translation"] for s in (a, b, c)]
    assert response.json()["translations"][0]["text"] == f"{t[0]} {t[1]}\n\n{t[2]}\n"


def send_concurrently(url: str, sentences: list[str], expected: dict[str, Any],
                      headers: dict[str, str] | None = None) -> list[httpx.Response]:
    """One greedy request per sentence, all at once; each must answer 200 with the translation
    ``tfm translate`` gives (``expected``)."""

    async def send_all() -> list[httpx.Response]:
        async with httpx.AsyncClient(base_url=url, headers=headers, timeout=60) as client:
            return await asyncio.gather(*(
                client.post("/v1/translate", json={"text": s, "beam": 1}) for s in sentences))

    responses = asyncio.run(send_all())
    assert all(r.status_code == 200 for r in responses)
    for source, response in zip(sentences, responses):
        assert response.json()["translations"][0]["text"] == expected[source]["translation"]
    return responses


def test_concurrent_requests_are_batched_together_with_unchanged_translations(
        server, reference):
    expected = reference(1)
    before = metric_samples(local_http.get(f"{server.url}/metrics", headers=auth()).text)

    responses = send_concurrently(server.url, SENTENCES * 2, expected, auth())
    after = metric_samples(local_http.get(f"{server.url}/metrics", headers=auth()).text)

    def batches_of_one_request_or_more(samples: dict) -> tuple[float, float]:
        total = samples[("tfm_serve_batch_requests_count", ())]
        single = samples[("tfm_serve_batch_requests_bucket", (("le", "1.0"),))]
        return total, single

    total_before, single_before = batches_of_one_request_or_more(before)
    total_after, single_after = batches_of_one_request_or_more(after)
    shared = (total_after - single_after) - (total_before - single_before)
    assert shared >= 1, "no batch held more than one request"
    assert total_after - total_before < len(responses)


def test_two_workers_translate_concurrent_requests_as_tfm_translate_does(model_dir, reference):
    expected = reference(1)
    with tfm_serve(model_dir, "--workers", "2") as running:
        assert local_http.get(f"{running.url}/v1/info").json()["limits"]["workers"] == 2
        send_concurrently(running.url, SENTENCES * 3, expected)


def auth(key: str = API_KEY) -> dict[str, str]:
    return {"Authorization": f"Bearer {key}"}


@pytest.mark.parametrize("body, status, says, limit", [
    ({"text": []}, 422, "the list is empty", None),
    ({"text": 5}, 422, "a string or a list of strings", None),
    ({"text": ["ok", 3]}, 422, "must be a string", None),
    ({"text": "a", "beam": "5"}, 422, "beam", None),
    ({"text": "a", "colour": "red"}, 422, "colour", None),
    ({"beam": 2}, 422, "text", None),
    ([1, 2], 422, "JSON object", None),
    ({"text": "a", "beam": 7}, 422, "limit of 6", "max_beam"),
    ({"text": "a", "beam": 2, "n_best": 3}, 422, "n_best", None),
    ({"text": "a", "beam": 1, "length_penalty": 0.6}, 422, "length_penalty", None),
    ({"text": "a", "max_length": 65}, 422, "limit of 64 tokens", "max_length"),
    ({"text": ["a."] * 21}, 413, "(20)", "max_sentences"),
    ({"text": "A dog. " * 21}, 413, "(20)", "max_sentences"),
    ({"text": "x" * 5000}, 413, "4000 bytes", "max_request_bytes"),
])
def test_bad_requests_get_a_json_error_naming_the_problem(server, body, status, says, limit):
    response = post(server.url, body)
    assert response.status_code == status, response.text
    error = response.json()
    assert error["status"] == status and says in error["error"]
    assert error.get("limit") == limit


def test_malformed_json_wrong_content_type_and_unknown_paths_get_json_errors(server):
    headers = {**auth(), "Content-Type": "application/json"}
    malformed = local_http.post(f"{server.url}/v1/translate", content=b'{"text": ', headers=headers)
    assert malformed.status_code == 422 and "not valid JSON" in malformed.json()["error"]
    form = local_http.post(f"{server.url}/v1/translate", data={"text": "a"}, headers=auth())
    assert form.status_code == 415 and "application/json" in form.json()["error"]
    missing = local_http.get(f"{server.url}/v2/nothing", headers=auth())
    assert missing.status_code == 404 and missing.json()["status"] == 404


@pytest.mark.parametrize("body, says", [
    (b'{"text": "a \xff b"}', "not UTF-8: byte 0xFF at offset 12"),
    (b'{"text": ' + b"[" * 1500 + b"]" * 1500 + b"}", "nested too deeply"),
])
def test_bodies_no_json_parser_should_read_get_422_not_400_or_500(server, body, says):
    headers = {**auth(), "Content-Type": "application/json"}
    response = local_http.post(f"{server.url}/v1/translate", content=body, headers=headers)
    assert response.status_code == 422, response.text
    assert "not valid JSON" in response.json()["error"] and says in response.json()["error"]
    assert local_http.get(f"{server.url}/health").status_code == 200


def test_a_lone_surrogate_escape_is_translated_as_the_replacement_character(server):
    body = b'{"text": ["A dog \\ud800 runs.", "\\udfff"], "scores": true}'
    headers = {**auth(), "Content-Type": "application/json"}
    response = local_http.post(f"{server.url}/v1/translate", content=body, headers=headers,
                          timeout=60)
    assert response.status_code == 200, response.text
    sources = [t["sentences"][0]["source"] for t in response.json()["translations"]]
    assert sources == ["A dog \ufffd runs.", "\ufffd"]


def test_a_body_without_length_over_the_limit_is_refused_as_it_streams(server):
    def chunks() -> Iterator[bytes]:
        yield b'{"text": "'
        for _ in range(10):
            yield b"x" * 500
        yield b'"}'

    response = local_http.post(f"{server.url}/v1/translate", content=chunks(),
                          headers={**auth(), "Content-Type": "application/json"})
    assert response.status_code == 413
    assert response.json()["limit"] == "max_request_bytes"


def post_urllib(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST ``body`` with urllib, which sends ``Connection: close`` and the whole body before
    reading the answer: the status and JSON body of the answer."""
    request = urllib.request.Request(f"{url}/v1/translate", data=body,
                                     headers={**auth(), "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as e:
        with e:
            return e.code, json.loads(e.read())


def post_http_client(url: str, body: bytes) -> tuple[int, dict[str, Any]]:
    """POST ``body`` with http.client, on a keep-alive connection, the whole body before
    reading the answer."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    try:
        connection.request("POST", "/v1/translate", body=body,
                           headers={**auth(), "Content-Type": "application/json"})
        response = connection.getresponse()
        return response.status, json.loads(response.read())
    finally:
        connection.close()


def peak_rss_kib(pid: int) -> int:
    """The most memory process ``pid`` has held since its peak was last reset (VmHWM)."""
    with open(f"/proc/{pid}/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith("VmHWM:"))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("send", [post_urllib, post_http_client])
@pytest.mark.parametrize("size", [2 << 20, 64 << 20])
def test_a_client_that_sends_a_body_over_the_limit_whole_reads_the_413(server, send, size):
    """The 413 is answered from Content-Length, before the body; the server then reads and
    throws away what the client goes on sending (a lingering close) so that a client that
    reads only once it has sent everything gets the answer, not a reset connection; and
    holds none of it."""
    body = b'{"text": "' + b"x" * (size - 12) + b'"}'
    pid = server.process.pid
    with open(f"/proc/{pid}/clear_refs", "w") as clear:
        clear.write("5")  # the peak is reset to what the server holds now
    before = peak_rss_kib(pid)
    for _ in range(3):
        status, error = send(server.url, body)
        assert status == 413, error
        assert error["limit"] == "max_request_bytes" and "4000 bytes" in error["error"]
    assert (peak_rss_kib(pid) - before) * 1024 < size // 8 + (1 << 20)
    assert local_http.get(f"{server.url}/health").status_code == 200


def sends_until_cut(conn: socket.socket, pause: float, within: float) -> bool:
    """Whether the server cuts ``conn`` within ``within`` seconds of a client sending it 64 KiB
    every ``pause`` seconds."""
    deadline = time.monotonic() + within
    try:
        while time.monotonic() < deadline:
            conn.sendall(b"x" * 65536)
            time.sleep(pause)
    except (ConnectionResetError, BrokenPipeError):
        return True
    return False


def test_what_a_client_sends_after_its_413_is_read_for_a_bounded_time_and_size(
        gated, monkeypatch):
    """A client cannot hold a connection by sending a body without end after its 413: the
    server throws away at most LINGER_BYTES, for at most request_timeout_s."""
    from tfm.serve import protocol
    from tfm.serve.app import create_app

    monkeypatch.setattr(protocol, "LINGER_BYTES", 1 << 20)
    app = create_app(gated, ServeConfig(max_wait_ms=0, max_request_bytes=100))
    # Slowly, the time runs out first; as fast as it can, the bytes do (long before the time).
    for timeout, pause in ((0.5, 0.05), (60.0, 0.0)):
        with serving(app, request_timeout_s=timeout) as url:
            address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
            with socket.create_connection(address) as conn:
                conn.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                             b"application/json\r\nContent-Length: 1000000000\r\n\r\n")
                conn.settimeout(10)
                answer = b"".join(iter(lambda: conn.recv(65536), b""))  # the server's FIN
                assert answer.startswith(b"HTTP/1.1 413 ")
                assert b"connection: close" in answer.lower()
                assert sends_until_cut(conn, pause, within=20)
            assert local_http.get(f"{url}/health").status_code == 200


@pytest.mark.parametrize("headers", [{}, {"Authorization": "Bearer wrong"},
                                     {"X-API-Key": "wrong"}, {"Authorization": API_KEY}])
def test_without_the_api_key_the_api_and_metrics_answer_401(server, headers):
    for method, path in [("POST", "/v1/translate"), ("GET", "/v1/info"), ("GET", "/metrics")]:
        response = local_http.request(method, f"{server.url}{path}", json={"text": "a"},
                                 headers=headers)
        assert response.status_code == 401, path
        assert "API key" in response.json()["error"]
        assert response.headers["WWW-Authenticate"] == "Bearer"


def test_the_key_opens_the_api_in_either_header_and_health_and_page_need_none(server):
    assert post(server.url, {"text": "a"}, key=None,
                headers={"X-API-Key": API_KEY}).status_code == 200
    assert local_http.get(f"{server.url}/health").json() == {"status": "ready"}
    assert local_http.get(f"{server.url}/").status_code == 200


def test_info_tells_languages_model_provenance_version_and_defaults(server):
    info = local_http.get(f"{server.url}/v1/info", headers=auth()).json()
    assert (info["src_lang"], info["tgt_lang"]) == ("en", "de")
    assert info["target_languages"] == info["language_tokens"] == []  # one: none to choose
    assert info["model"]["d_model"] == 32
    assert info["provenance"] == {"note": "random weights for tests"}
    assert info["tfm_version"]
    assert info["decoding"] == {"beam": 4, "n_best": 1, "length_penalty": 1.0,
                                "max_len_a": 1.0, "max_len_b": 5}
    assert info["engine"]["engine"] == "tfm"
    assert info["limits"]["max_sentences"] == 20 and info["limits"]["max_beam"] == 6
    # Without --workers: 2 decoding workers where torch starts with 2 CPU threads or more.
    threads = int(subprocess.run([sys.executable, "-c", "import torch; print(torch."
                                  "get_num_threads())"], capture_output=True, text=True,
                                 check=True).stdout)
    assert info["limits"]["workers"] == (2 if threads >= 2 else 1)


def test_metrics_are_prometheus_text_with_requests_latency_batches_queue_and_work(server):
    post(server.url, {"text": SENTENCES[:2], "beam": 1})
    post(server.url, {"text": []})
    response = local_http.get(f"{server.url}/metrics", headers=auth())
    assert response.headers["content-type"].startswith("text/plain")
    samples = metric_samples(response.text)
    names = {name for name, _ in samples}
    for name in ["tfm_serve_request_seconds_bucket", "tfm_serve_batch_sentences_bucket",
                 "tfm_serve_batch_requests_bucket", "tfm_serve_queue_sentences",
                 "tfm_serve_sentences_total", "tfm_serve_source_tokens_total",
                 "tfm_serve_target_tokens_total", "tfm_serve_ready"]:
        assert name in names, name
    requests = {dict(labels)["status"]: v for (name, labels), v in samples.items()
                if name == "tfm_serve_requests_total"
                and dict(labels)["endpoint"] == "/v1/translate"}
    assert requests["200"] >= 1 and requests["422"] >= 1 and requests["401"] >= 1
    assert samples[("tfm_serve_sentences_total", ())] >= 2
    assert samples[("tfm_serve_ready", ())] == 1


def test_the_page_is_self_contained_and_shows_the_languages(server):
    response = local_http.get(f"{server.url}/")
    page = response.text
    assert response.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in response.headers["content-security-policy"]
    assert '"src_lang": "en"' in page and '"api_key_required": true' in page
    assert "http://" not in page and "https://" not in page and "//cdn" not in page


def test_the_openapi_page_describes_the_translate_endpoint(server):
    schema = local_http.get(f"{server.url}/openapi.json").json()
    assert "/v1/translate" in schema["paths"]
    assert "TranslateRequest" in schema["components"]["schemas"]


def test_sigterm_lets_the_request_in_flight_finish_then_the_server_exits(model_dir):
    texts = [s for s in SENTENCES for _ in range(40)]  # long enough to be seen in flight
    with tfm_serve(model_dir) as running:
        answer: list[httpx.Response] = []
        sender = threading.Thread(target=lambda: answer.append(
            post(running.url, {"text": texts, "beam": 4}, key=None)))
        sender.start()

        def in_flight() -> bool:  # the translate request, besides this metrics request
            text = local_http.get(f"{running.url}/metrics").text
            return metric_samples(text)[("tfm_serve_requests_in_flight", ())] >= 2

        wait_until(in_flight)
        running.process.send_signal(signal.SIGTERM)
        sender.join(120)
        assert running.process.wait(60) in (0, -signal.SIGTERM)
        running.reader.join(10)
    assert answer and answer[0].status_code == 200
    assert len(answer[0].json()["translations"]) == len(texts)
    assert "Application shutdown complete" in "".join(running.log)


def test_serve_refuses_a_port_in_use_in_one_line(model_dir):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = tfm("serve", "-m", str(model_dir), "--port", str(port))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot listen on 127.0.0.1" in lines[0], result.stderr


def test_the_listening_socket_sends_small_answers_at_once():
    """Connections inherit TCP_NODELAY from it: without it, every request after the first on a
    keep-alive connection waited 40 ms for the client's delayed ACK (bench/serve.py)."""
    from tfm.cli.serve import _listen

    sock = _listen("127.0.0.1", 0)
    try:
        assert sock.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0
    finally:
        sock.close()


def test_the_server_binds_loopback_unless_told_otherwise():
    assert ServeConfig().host == "127.0.0.1"


# --- held decoding: queue limits, batching, disconnects, loading ----------------------------

@pytest.fixture
def gated(translator: Translator) -> Iterator[GatedTranslator]:
    gated = GatedTranslator(translator)
    yield gated
    gated.gate.set()  # never leave a worker waiting


def test_a_full_queue_answers_503_with_retry_after_and_the_server_recovers(gated):
    from tfm.serve.app import create_app

    app = create_app(gated, ServeConfig(max_queue=2, max_wait_ms=0))
    with serving(app) as url:
        first = _send_in_thread(url, {"text": SENTENCES[0], "beam": 1})
        assert gated.entered.wait(30)  # SENTENCES[0] is being decoded: 1 of 2 places
        second = _send_in_thread(url, {"text": SENTENCES[1], "beam": 1})
        wait_until(lambda: app.state.service.batcher.queued == 1)
        refused = post(url, {"text": SENTENCES[2], "beam": 1}, key=None)
        assert refused.status_code == 503
        assert int(refused.headers["Retry-After"]) >= 1
        assert refused.json()["limit"] == "max_queue"
        assert local_http.get(f"{url}/health").status_code == 200  # still answering
        gated.gate.set()
        assert first().status_code == 200 and second().status_code == 200
        assert post(url, {"text": SENTENCES[2], "beam": 1}, key=None).status_code == 200


def test_requests_waiting_together_are_decoded_as_one_batch(gated, reference):
    from tfm.serve.app import create_app

    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app) as url:
        first = _send_in_thread(url, {"text": "Hold the worker .", "beam": 1})
        assert gated.entered.wait(30)
        waiting = [_send_in_thread(url, {"text": s, "beam": 1}) for s in SENTENCES]
        wait_until(lambda: app.state.service.batcher.queued == len(SENTENCES))
        gated.gate.set()
        answers = [w().json()["translations"][0]["text"] for w in waiting]
        assert first().status_code == 200
        metrics = metric_samples(local_http.get(f"{url}/metrics").text)
    assert sorted(gated.calls[1]) == sorted(SENTENCES)  # one batch held them all
    assert answers == [reference(1)[s]["translation"] for s in SENTENCES]
    assert metrics[("tfm_serve_batch_requests_bucket", (("le", "8.0"),))] == 1  # the first
    assert metrics[("tfm_serve_batch_requests_count", ())] == 2


def closed_by_server(conn: socket.socket, within: float) -> bool:
    conn.settimeout(within)
    try:
        return conn.recv(1) == b""
    except TimeoutError:
        return False
    except ConnectionResetError:
        return True


def test_clients_too_slow_to_send_a_request_are_disconnected(gated):
    """Slowloris: connecting and sending nothing, or headers or a body a little at a time,
    must not hold a connection for ever."""
    from tfm.serve.app import create_app

    gated.gate.set()  # decoding answers at once
    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app, request_timeout_s=0.5) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        silent, headers, body = (socket.create_connection(address) for _ in range(3))
        headers.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\n")
        body.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                     b"application/json\r\nContent-Length: 100\r\n\r\n{\"text\": ")
        assert [closed_by_server(c, within=10) for c in (silent, headers, body)] == [True] * 3
        with httpx.Client(base_url=url) as client:  # a client in time: two requests, one
            for sentence in SENTENCES[:2]:            # keep-alive connection
                time.sleep(0.2)
                assert client.post("/v1/translate", json={"text": sentence}).status_code == 200
        for c in (silent, headers, body):
            c.close()


def test_headers_over_the_limit_get_431_and_a_large_body_does_not_count_as_headers(gated):
    from tfm.serve.app import create_app
    from tfm.serve.protocol import MAX_HEADER_BYTES

    gated.gate.set()
    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        with socket.create_connection(address) as conn:
            conn.sendall(b"GET /health HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * MAX_HEADER_BYTES)
            conn.settimeout(10)
            answer = b"".join(iter(lambda: conn.recv(65536), b""))  # until the server closes
        assert answer.startswith(b"HTTP/1.1 431 ")
        assert json.loads(answer.split(b"\r\n\r\n", 1)[1])["limit"] == "max_header_bytes"
        big = {"text": "A dog runs . " + "x" * (3 * MAX_HEADER_BYTES), "split": False}
        response = post(url, big, key=None)
        assert response.status_code == 200, response.text
        assert local_http.get(f"{url}/health").status_code == 200


class HugeAnswers(GatedTranslator):
    """Answers every sentence with a translation of 64 million characters, at once: more than
    the kernel's socket buffers hold, so a client that reads nothing fills them."""

    def translate_prepared(self, sources: list[Source], options: SearchOptions
                           ) -> list[Translation]:
        return [Translation(s.sentence, [("x" * 64_000_000, 0.0)]) for s in sources]


def test_a_client_that_stops_reading_its_answer_is_disconnected(translator):
    from tfm.serve.app import create_app
    from tfm.serve.protocol import http_protocol

    app = create_app(HugeAnswers(translator), ServeConfig(max_wait_ms=0))
    protocol = http_protocol(0.5)
    with serving(app, protocol=protocol) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        with socket.create_connection(address) as conn:
            body = json.dumps({"text": "A dog ."}).encode()
            conn.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                         b"application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
                         + body)
            # Reading nothing: the answer fills the buffers, the deadline passes, the server
            # closes the connection (once it has taken it).
            wait_until(lambda: protocol.open_connections)
            wait_until(lambda: not protocol.open_connections)
            conn.settimeout(10)
            received = 0
            with contextlib.suppress(ConnectionResetError):
                for chunk in iter(lambda: conn.recv(1 << 20), b""):
                    received += len(chunk)
        assert received < 64_000_000  # cut off: the answer was never all sent
        assert local_http.get(f"{url}/health").status_code == 200


def test_the_request_timeout_never_cuts_a_request_being_answered(gated):
    from tfm.serve.app import create_app

    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app, request_timeout_s=0.3) as url:
        answer = _send_in_thread(url, {"text": SENTENCES[0], "beam": 1})
        assert gated.entered.wait(30)
        time.sleep(1.0)  # decoding held well past the deadline
        gated.gate.set()
        assert answer().status_code == 200


def test_past_max_connections_a_new_one_closes_the_one_idle_longest(gated):
    """Idle connections cannot shut other clients out by taking every file descriptor."""
    from tfm.serve.app import create_app

    gated.gate.set()
    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app, max_connections=3) as url:
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))
        idle = []
        for _ in range(3):
            idle.append(socket.create_connection(address))
            time.sleep(0.05)  # oldest first
        with httpx.Client(base_url=url) as client:  # a fourth connection
            assert client.get("/health").status_code == 200
            assert client.post("/v1/translate", json={"text": SENTENCES[0]}).status_code == 200
        assert closed_by_server(idle[0], within=5)
        assert [closed_by_server(c, within=0.2) for c in idle[1:]] == [False, False]
        for c in idle:
            c.close()


def test_when_every_connection_is_being_answered_a_new_one_gets_503(gated):
    from tfm.serve.app import create_app

    app = create_app(gated, ServeConfig(max_wait_ms=0))
    with serving(app, max_connections=1) as url:
        answer = _send_in_thread(url, {"text": SENTENCES[0], "beam": 1})
        assert gated.entered.wait(30)  # the one connection has a request being decoded
        refused = local_http.get(f"{url}/health")
        assert refused.status_code == 503
        assert refused.headers["Retry-After"] == "1"
        assert refused.json()["limit"] == "max_connections"
        gated.gate.set()
        assert answer().status_code == 200
        assert local_http.get(f"{url}/health").status_code == 200  # the answered one made room


def test_max_connections_must_be_at_least_one():
    with pytest.raises(UsageError, match="--max-connections"):
        ServeConfig(max_connections=0)


def test_a_client_that_leaves_before_its_batch_costs_no_decoding(gated):
    from tfm.serve.app import create_app

    app = create_app(gated, ServeConfig(max_wait_ms=0))
    service = app.state.service
    with serving(app) as url:
        first = _send_in_thread(url, {"text": "first", "beam": 1})
        assert gated.entered.wait(30)
        body = json.dumps({"text": "gone", "beam": 1}).encode()
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as client:
            client.sendall(b"POST /v1/translate HTTP/1.1\r\nHost: x\r\nContent-Type: "
                           b"application/json\r\nContent-Length: %d\r\n\r\n%s"
                           % (len(body), body))
            wait_until(lambda: service.batcher.queued == 1)
        registry = service.metrics.registry
        wait_until(lambda: registry.get_sample_value("tfm_serve_sentences_cancelled_total") == 1)
        assert service.batcher.queued == 0
        gated.gate.set()
        assert first().status_code == 200
        assert post(url, {"text": "last", "beam": 1}, key=None).status_code == 200
        statuses = metric_samples(local_http.get(f"{url}/metrics").text)
    assert gated.calls == [["first"], ["last"]]
    assert statuses[("tfm_serve_requests_total",
                     (("endpoint", "/v1/translate"), ("status", "499")))] == 1


def test_health_answers_503_until_the_model_is_loaded(translator):
    from tfm.serve.app import create_app

    loaded = threading.Event()

    def load() -> Translator:
        assert loaded.wait(30)
        return translator

    with serving(create_app(load, ServeConfig())) as url:
        health = local_http.get(f"{url}/health")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        early = post(url, {"text": "a"}, key=None)
        assert early.status_code == 503 and "loading" in early.json()["error"]
        assert "Retry-After" in early.headers
        loaded.set()
        wait_until(lambda: local_http.get(f"{url}/health").status_code == 200)
        assert post(url, {"text": "a"}, key=None).status_code == 200


def _send_in_thread(url: str, body: dict[str, Any]) -> Callable[[], httpx.Response]:
    """POST in a thread; returns a function that waits for the answer."""
    answer: list[httpx.Response] = []
    thread = threading.Thread(target=lambda: answer.append(post(url, body, key=None)))
    thread.start()

    def result() -> httpx.Response:
        thread.join(60)
        assert answer, "no answer"
        return answer[0]

    return result


def test_a_ctranslate2_export_is_served_too(model_dir, tmp_path):
    pytest.importorskip("ctranslate2")
    from tfm.decoding.engines import load_translator
    from tfm.interop.ctranslate2 import export_ctranslate2
    from tfm.serve.app import create_app

    export = load_translator(export_ctranslate2(model_dir, tmp_path / "ct2"), "cpu")
    assert export.engine == "ctranslate2"
    with serving(create_app(export, ServeConfig())) as url:
        info = local_http.get(f"{url}/v1/info").json()
        answer = post(url, {"text": SENTENCES[:4], "beam": 2}, key=None)
    assert info["engine"]["engine"] == "ctranslate2" and info["src_lang"] == "en"
    alone = [export.translate([s], export.default_options(beam=2))[0].text
             for s in SENTENCES[:4]]
    assert [t["text"] for t in answer.json()["translations"]] == alone


class FailingTranslator(GatedTranslator):
    """Fails to translate any batch holding the sentence "boom"."""

    def translate_prepared(self, sources: list[Source], options: SearchOptions
                           ) -> list[Translation]:
        if "boom" in [source.sentence for source in sources]:
            raise RuntimeError("the engine broke")
        return self.inner.translate_prepared(sources, options)


def test_a_failing_batch_answers_500_in_json_and_the_server_goes_on(translator):
    from tfm.serve.app import create_app

    with serving(create_app(FailingTranslator(translator), ServeConfig())) as url:
        failed = post(url, {"text": "boom"}, key=None)
        assert failed.status_code == 500
        assert "the engine broke" in failed.json()["error"]
        assert post(url, {"text": SENTENCES[0]}, key=None).status_code == 200
        assert local_http.get(f"{url}/health").status_code == 200


def test_the_connection_limit_is_the_given_one_or_what_the_open_file_limit_leaves():
    resource = pytest.importorskip("resource")
    from tfm.cli.serve import FILES_KEPT, _connection_limit

    assert _connection_limit(5) == 5
    derived = _connection_limit(None)  # raises the soft limit as far as the hard one allows
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    assert derived == max(1, min(soft, 1 << 16) - FILES_KEPT)
