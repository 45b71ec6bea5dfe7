"""Decoding workers: the batches of one `translate` call decoded side by side, each by a thread
with its share of the CPU threads; the output never depends on how many there are."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch
from conftest import random_model_dir, tfm
from tokenizers import Tokenizer

from tfm.config import SearchOptions
from tfm.decoding.engines import load_translator
from tfm.decoding.workers import Workers, default_count
from tfm.errors import UsageError

# Sentences of many lengths: with a small batch_tokens they fill a dozen batches or more.
SENTENCES = [" ".join(["a man rides a bike", "the dog sleeps", "two children play"][i % 3]
                      for _ in range(1 + i % 5)) for i in range(40)] + ["", "Ein Hund."]


@pytest.fixture(autouse=True)
def keep_torch_threads() -> Iterator[None]:
    """Workers change this thread's torch threads (it keeps one): put them back after."""
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def model_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    return random_model_dir(tmp_path / "model", tokenizer, seed=0)


def batch_count(translator, options: SearchOptions) -> int:
    calls = []
    search = translator.search
    translator.search = lambda batch, o: calls.append(len(batch)) or search(batch, o)
    translator.translate(SENTENCES, options)
    translator.search = search
    return len(calls)


@pytest.mark.parametrize("beam", [1, 3])
def test_any_number_of_workers_gives_the_same_translations_and_scores(
        model_dir: Path, beam: int) -> None:
    options = SearchOptions(beam=beam, n_best=min(beam, 2), max_len_a=0.0, max_len_b=10,
                            batch_tokens=64)
    one = load_translator(model_dir, "cpu", workers=1)
    assert batch_count(one, options) >= 8  # several batches each, to share
    expected = one.translate(SENTENCES, options)
    for workers in (2, 3):
        got = load_translator(model_dir, "cpu", workers=workers).translate(SENTENCES, options)
        assert [t.source for t in got] == SENTENCES  # in input order
        assert [t.hypotheses for t in got] == [t.hypotheses for t in expected]
        assert got[-2].text == ""  # an empty line stays empty


@pytest.mark.parametrize("workers", [1, 2])
def test_progress_counts_every_sentence_once_as_batches_end(model_dir: Path,
                                                            workers: int) -> None:
    options = SearchOptions(beam=2, max_len_a=0.0, max_len_b=10, batch_tokens=64)
    translator = load_translator(model_dir, "cpu", workers=workers)
    done: list[int] = []
    got = translator.translate(SENTENCES, options, progress=done.append)
    assert sum(done) == len(SENTENCES)  # the empty line included
    assert len(done) >= 8 and all(n > 0 for n in done)  # batch by batch, not once at the end
    assert [t.hypotheses for t in got] == \
        [t.hypotheses for t in translator.translate(SENTENCES, options)]


def test_the_workers_decode_side_by_side_each_with_its_share_of_the_threads(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "4")  # the CPU threads decoding may use
    translator = load_translator(model_dir, "cpu", workers=2)
    assert torch.get_num_threads() == 1  # the loading thread keeps one, the workers share 4
    both_inside = threading.Barrier(2, timeout=30)  # broken unless 2 searches run at once
    seen: list[tuple[str, int]] = []
    search = translator.search

    def recording_search(batch, options):
        if len(seen) < 2:
            seen.append((threading.current_thread().name, torch.get_num_threads()))
            both_inside.wait()
        return search(batch, options)

    translator.search = recording_search
    options = SearchOptions(beam=1, max_len_a=0.0, max_len_b=5, batch_tokens=64)
    translator.translate(SENTENCES, options)
    assert len({name for name, _ in seen}) == 2
    assert all(name.startswith("tfm-decode") and threads == 2 for name, threads in seen)


def test_a_failing_batch_stops_the_batches_not_started(model_dir: Path) -> None:
    translator = load_translator(model_dir, "cpu", workers=2)
    options = SearchOptions(beam=1, max_len_a=0.0, max_len_b=5, batch_tokens=64)
    batches = batch_count(translator, options)
    calls = []
    search = translator.search
    first_started = threading.Event()

    def failing_search(batch, o):
        calls.append(len(batch))
        if len(calls) == 1:  # the first batch taken (the longest) fails...
            first_started.wait(10)
            raise RuntimeError("out of memory")
        first_started.set()  # ...while the other worker decodes one
        return search(batch, o)

    translator.search = failing_search
    with pytest.raises(RuntimeError, match="out of memory"):
        translator.translate(SENTENCES, options)
    translator.workers.close(wait=True)  # let the batch in flight end
    assert len(calls) < batches // 2


def test_auto_is_two_workers_on_a_cpu_with_two_threads_and_one_elsewhere(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert default_count("cpu") == 2
    assert Workers.for_device(None, "cpu").count == 2
    assert torch.get_num_threads() == 1  # this thread kept one; each worker takes one
    assert default_count("cpu") == 2  # read from the machine, not from torch's count
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert default_count("cpu") == 1
    assert default_count("cuda") == 1
    assert Workers.for_device(3, "cpu").count == 3
    with pytest.raises(UsageError, match="--workers 0"):
        Workers.for_device(0, "cpu")


def test_the_library_and_the_command_line_have_one_default(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_NUM_THREADS", "2")
    assert default_count("cpu") == 2  # what `tfm translate --workers` defaults to
    first = load_translator(model_dir, "cpu")
    second = load_translator(model_dir, "cpu")  # loaded after: the same default
    assert first.workers.count == second.workers.count == 2


def test_the_command_line_translates_a_file_alike_with_one_or_two_workers(
        tmp_path: Path, model_dir: Path) -> None:
    src = tmp_path / "src.en"
    src.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    outputs = []
    for workers in ("1", "2"):
        done = tfm("translate", "-m", str(model_dir), "--input", str(src), "--workers", workers,
                   "--beam", "2", "--device", "cpu")
        assert done.returncode == 0, done.stderr
        outputs.append(done.stdout)
    assert outputs[0] == outputs[1] and len(outputs[0].splitlines()) == len(SENTENCES)
    refused = tfm("translate", "-m", str(model_dir), "--workers", "0", "x")
    assert refused.returncode == 2 and "--workers 0" in refused.stderr


def test_each_translator_has_decoding_threads_of_its_own(model_dir: Path) -> None:
    """A translator without threads of its own still gets its own pool: the server starts and
    closes it, and must not close another translator's."""
    from tfm.decoding.translator import Translator

    class Bare(Translator):
        def search(self, batch, options, constraints=None):
            raise NotImplementedError

    a, b = Bare(), Bare()
    assert a.workers is a.workers and a.workers is not b.workers
    assert a.workers.count == 1


def test_ctranslate2_gets_no_more_threads_than_the_cores_it_may_use(monkeypatch) -> None:
    import os

    from tfm.decoding import ctranslate2_engine

    monkeypatch.delenv("OMP_NUM_THREADS", raising=False)
    for cores, threads in ((1, 1), (2, 2), (16, 4)):  # 4: CTranslate2's own default
        monkeypatch.setattr(os, "sched_getaffinity", lambda _, n=cores: set(range(n)),
                            raising=False)
        assert ctranslate2_engine._cpu_threads() == threads
    # As for tfm's engine (workers.cpu_threads), OMP_NUM_THREADS bounds them too.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    assert ctranslate2_engine._cpu_threads() == 1


def test_closing_the_workers_gives_the_loading_thread_its_threads_back(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A teacher translates with two workers, then a student trains in the same thread: it
    # must train on the threads it had, not on the one the workers left it.
    monkeypatch.setenv("OMP_NUM_THREADS", "4")
    torch.set_num_threads(3)
    translator = load_translator(model_dir, "cpu", workers=2)
    assert torch.get_num_threads() == 1
    translator.translate(SENTENCES[:4], SearchOptions(beam=1, max_len_a=0.0, max_len_b=5))
    translator.close()
    assert torch.get_num_threads() == 3
    # One worker decodes in this thread, and closing it changes nothing.
    alone = load_translator(model_dir, "cpu", workers=1)
    alone.translate(SENTENCES[:4], SearchOptions(beam=1, max_len_a=0.0, max_len_b=5))
    alone.close()
    assert torch.get_num_threads() == 3
