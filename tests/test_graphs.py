"""Specifications of the search in fixed buffers (tfm.decoding.graphs), the step a CUDA graph
replays: on the CPU, where CudaGraphs runs each step as it is, it must find what
tfm.decoding.search finds. (On a GPU, tests/test_cuda.py checks the graphs themselves.)"""

from __future__ import annotations

import itertools

import pytest
import torch
from conftest import random_model_dir
from test_search import sources, tiny_model

from tfm.config import SearchOptions
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.engines import load_translator
from tfm.decoding.graphs import MOST_ROWS, CudaGraphs, FixedSearch
from tfm.decoding.search import search
from tfm.decoding.steps import max_lengths
from tfm.special_tokens import PAD_ID


def tokens(found: list[list]) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in found]


SEARCHES = [
    dict(beam=1),
    dict(beam=1, min_len=3),
    dict(beam=3),
    dict(beam=4, length_penalty=0.6, stop_early=False, n_best=2),
    dict(beam=5, length_penalty=1.2, n_best=3, min_len=2),
    dict(beam=2, length_penalty=0.0, stop_early=False, n_best=2),
]


@pytest.mark.parametrize("seed, how", list(itertools.product(range(4), SEARCHES)))
def test_the_fixed_search_finds_what_the_search_finds(seed: int, how: dict) -> None:
    # Untrained models of two layers; sentences of several lengths in one batch, some reaching
    # their length limit, some ending early, so that sentences finish at different steps.
    model = tiny_model(seed, vocab=12, layers=2)
    src = sources([5, 3, 7, 2, 6], 12, seed)
    options = SearchOptions(max_len_a=1.5, max_len_b=4, **how)
    expected = search(model, src, options)
    found = CudaGraphs(model, check_every=1).search(src, options)
    assert tokens(found) == tokens(expected)
    for mine, theirs in zip(itertools.chain(*found), itertools.chain(*expected)):
        # The self-attention reads masked positions too: the same numbers to float rounding.
        assert mine.score == pytest.approx(theirs.score, abs=1e-5)
        assert mine.log_prob == pytest.approx(theirs.log_prob, abs=1e-5)


def test_a_fixed_search_is_reused_batch_after_batch_without_leftovers() -> None:
    # The buffers of one batch shape serve the next batch: nothing of the first remains.
    model = tiny_model(7, vocab=20, layers=2)
    options = SearchOptions(beam=3, n_best=2, max_len_a=1.0, max_len_b=5)
    first, second = sources([6, 4], 20, 1), sources([6, 6], 20, 2)
    limits = [max_lengths(s, PAD_ID, 1.0, 5, model.config.max_positions) for s in (first, second)]
    fixed = FixedSearch(model, 2, 6, int(max(x.max() for x in limits)), options)
    for src, max_len in zip((first, second, first), limits + limits[:1]):
        fixed.load(src, max_len)
        with torch.inference_mode():
            while not fixed.over():
                fixed.step()
        assert fixed.hypotheses() == [
            [type(h)(h.tokens, pytest.approx(h.score, abs=1e-5),
                     pytest.approx(h.log_prob, abs=1e-5)) for h in hyps]
            for hyps in search(model, src, options)]


def test_cuda_graphs_take_only_unconstrained_short_batches() -> None:
    plain = SearchOptions(beam=4)
    assert CudaGraphs.takes(plain, None, MOST_ROWS // 4)
    assert CudaGraphs.takes(plain, [None, TargetConstraints()], 2)
    assert not CudaGraphs.takes(plain, None, MOST_ROWS // 4 + 1)  # arithmetic, not launches
    assert not CudaGraphs.takes(SearchOptions(beam=4, attention=True), None, 1)
    assert not CudaGraphs.takes(plain, [TargetConstraints(prefix=[5])], 1)
    assert not CudaGraphs.takes(plain, [None, TargetConstraints(phrases=[[5, 6]])], 2)


def test_each_batch_shape_is_made_once_and_the_least_recently_used_go_first() -> None:
    model = tiny_model(3, vocab=20, layers=1)
    options = SearchOptions(beam=2, max_len_a=1.0, max_len_b=3)
    graphs = CudaGraphs(model, most=2)
    batches = [sources([4, 3], 20, 0), sources([4, 4], 20, 1), sources([5], 20, 2),
               sources([3, 2, 3], 20, 3)]
    for src in batches[:2]:  # one shape, (2, 4): one search made, used twice
        assert tokens(graphs.search(src, options)) == tokens(search(model, src, options))
    assert len(graphs.graphs) == 1
    graphs.search(batches[2], options)
    graphs.search(batches[0], options)  # (2, 4) used again: (1, 5) is now the oldest
    graphs.search(batches[3], options)
    assert [key[:2] for key in graphs.graphs] == [(2, 4), (3, 3)]
    small = CudaGraphs(model, most_bytes=1)  # over budget: only the newest is kept
    for src in batches:
        small.search(src, options)
    assert [key[:2] for key in small.graphs] == [(3, 3)]


@pytest.mark.parametrize("check_every", [1, 3, 100])
def test_looking_less_often_whether_the_batch_is_done_changes_nothing(check_every: int) -> None:
    # Steps replayed after every sentence is done leave the results as they are, and no
    # step is replayed beyond the batch's length limit.
    model = tiny_model(5, vocab=16, layers=2)
    src = sources([6, 2, 4], 16, 5)
    for options in (SearchOptions(beam=1, max_len_a=1.0, max_len_b=2),
                    SearchOptions(beam=3, n_best=3, max_len_a=1.0, max_len_b=2)):
        expected = CudaGraphs(model, check_every=1).search(src, options)
        assert CudaGraphs(model, check_every=check_every).search(src, options) == expected


def test_a_translator_replays_graphs_on_cuda_only(tmp_path, tokenizer) -> None:
    # On a CPU there are no launches to save: tfm's search, whatever --cuda-graphs says.
    model = random_model_dir(tmp_path / "m", tokenizer)
    assert load_translator(model, "cpu", cuda_graphs=True).graphs is None


def test_a_step_reads_nothing_back_to_the_host(monkeypatch) -> None:
    # What a CUDA graph cannot capture: a number read back (item, tolist, bool, int, float)
    # or a shape that depends on the data (nonzero, a boolean mask as an index), wherever
    # Python asks for them (a mask indexing the rows at their limit fails here), or a tensor
    # made from host data inside the step (on CUDA a copy, which a capture forbids).
    model = tiny_model(2, vocab=16, layers=2)
    src = sources([5, 3], 16, 2)
    for options in (SearchOptions(beam=1, min_len=2), SearchOptions(beam=3, n_best=2,
                                                                     stop_early=False)):
        max_len = max_lengths(src, PAD_ID, options.max_len_a, options.max_len_b,
                              model.config.max_positions)
        fixed = FixedSearch(model, 2, 5, int(max_len.max()), options)
        fixed.load(src, max_len)

        def read_back(*args, **kwargs):
            raise AssertionError("a step read a value back to the host")

        def no_mask(method):
            def indexed(self, index, *value):
                parts = index if isinstance(index, tuple) else (index,)
                assert not any(isinstance(p, torch.Tensor) and p.dtype == torch.bool
                               for p in parts), "a step indexed by a boolean mask"
                return method(self, index, *value)
            return indexed

        with monkeypatch.context() as patch:
            for name in ("item", "tolist", "__bool__", "__int__", "__float__", "nonzero"):
                patch.setattr(torch.Tensor, name, read_back)
            patch.setattr(torch, "nonzero", read_back)
            for name in ("tensor", "as_tensor"):  # a copy from the host, on CUDA
                patch.setattr(torch, name, read_back)
            for name in ("__getitem__", "__setitem__"):
                patch.setattr(torch.Tensor, name, no_mask(getattr(torch.Tensor, name)))
            with torch.inference_mode():
                for _ in range(3):
                    fixed.step()


def test_a_capture_that_fails_falls_back_to_step_by_step_search_once(tmp_path, tokenizer,
                                                                   monkeypatch) -> None:
    # A kernel some GPU or torch cannot capture must not fail every short batch.
    import tfm.decoding.graphs as graphs_module

    translator = load_translator(random_model_dir(tmp_path / "m", tokenizer), "cpu")
    options = translator.default_options(beam=3)
    expected = [t.hypotheses for t in translator.translate(["A dog runs.", "Hi."], options)]
    translator.graphs = CudaGraphs(translator.model)  # as on CUDA

    def cannot_capture(fixed):
        raise RuntimeError("operation not permitted when stream is capturing")

    monkeypatch.setattr(graphs_module, "_captured", cannot_capture)
    with pytest.warns(UserWarning, match="CUDA graphs unavailable here"):
        found = [t.hypotheses for t in translator.translate(["A dog runs.", "Hi."], options)]
    assert found == expected
    assert translator.graphs is None  # tried once, not at every batch


def test_a_translator_with_graphs_decodes_through_them_and_finds_the_same(tmp_path,
                                                                          tokenizer) -> None:
    # The path a CUDA translator takes, run on the CPU unpatched: its short batches go to the
    # fixed search (a shape is kept for each), with the translations of step-by-step search.
    translator = load_translator(random_model_dir(tmp_path / "m", tokenizer), "cpu")
    sentences = ["A dog runs.", "Hi.", "Two men sit on a bench in the park."]
    for beam in (1, 3):
        options = translator.default_options(beam=beam, n_best=beam)
        expected = translator.translate(sentences, options)
        translator.graphs = CudaGraphs(translator.model)  # as on CUDA
        found = translator.translate(sentences, options)
        assert translator.graphs.graphs, "the fixed search was not used"
        translator.graphs = None
        for mine, theirs in zip(found, expected):
            assert [t for t, _ in mine.hypotheses] == [t for t, _ in theirs.hypotheses]
            assert [s for _, s in mine.hypotheses] == pytest.approx(
                [s for _, s in theirs.hypotheses], abs=1e-5)


# Each field of SearchOptions, and another value of it: a new field must be added here.
OTHER_VALUES = dict(beam=3, length_penalty=0.3, max_len_a=0.7, max_len_b=2, min_len=3, n_best=4,
                    stop_early=True, batch_tokens=7, attention=True, mbr="bleu")


def test_a_graph_is_never_replayed_for_options_it_was_not_made_for() -> None:
    # Every field of the options tried: a CudaGraphs that searched with the base options
    # and then with one field changed finds what a fresh one finds with the changed options
    # (a cache key written by hand, which left one field out, returned the first options'
    # results for the second).
    from dataclasses import fields, replace

    # (Sampling's fields are not tried: CudaGraphs.takes sends no sampling batch here.)
    sampling = ("sampling_topk", "sampling_temp", "sampling_seed")
    assert sorted(OTHER_VALUES) == sorted(f.name for f in fields(SearchOptions)
                                          if f.name not in sampling)
    assert not CudaGraphs.takes(SearchOptions(beam=1, sampling_topk=0), None, 1)
    model = tiny_model(3, vocab=16, layers=2)
    src = sources([6, 3, 5], 16, 3)
    base = SearchOptions(beam=4, n_best=1, max_len_a=1.2, max_len_b=4, stop_early=False)
    for name, value in OTHER_VALUES.items():
        other = replace(base, **{name: value})
        graphs = CudaGraphs(model, check_every=1)
        graphs.search(src, base)
        assert graphs.search(src, other) == CudaGraphs(model, check_every=1).search(src, other), \
            name


def test_n_best_asked_after_one_best_gives_n_best() -> None:
    # Beam 4 without stop_early: the same step either way, but a different answer.
    model = tiny_model(4, vocab=16, layers=2)
    src = sources([6, 3], 16, 4)
    graphs = CudaGraphs(model, check_every=1)
    one = SearchOptions(beam=4, n_best=1, stop_early=False)
    assert [len(h) for h in graphs.search(src, one)] == [1, 1]
    four = graphs.search(src, SearchOptions(beam=4, n_best=4, stop_early=False))
    assert [len(h) for h in four] == [4, 4]
    assert tokens(four) == tokens(search(model, src, SearchOptions(beam=4, n_best=4,
                                                                   stop_early=False)))
