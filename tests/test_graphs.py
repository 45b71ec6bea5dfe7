"""Specifications of the search in fixed buffers (tfm.decoding.graphs), the step a CUDA graph
replays: on the CPU, step by step, it must find what tfm.decoding.search finds. (On a GPU,
tests/test_cuda.py checks the graphs themselves.)"""

from __future__ import annotations

import itertools

import pytest
import torch
from test_search import sources, tiny_model

from tfm.config import SearchOptions
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.graphs import MOST_ROWS, CudaGraphs, FixedSearch, fixed_search
from tfm.decoding.search import max_lengths, search
from tfm.special_tokens import PAD_ID

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
    expected, found = search(model, src, options), fixed_search(model, src, options)
    assert [[h.tokens for h in hyps] for hyps in found] == \
        [[h.tokens for h in hyps] for hyps in expected]
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
