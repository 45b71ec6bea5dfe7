"""Continuous batching: sentences join a running greedy search at any step and leave it when
they end, and each gets exactly the hypothesis it gets alone."""

from __future__ import annotations

import random
from typing import Any

import pytest
import torch

from tfm.config import ModelConfig
from tfm.decoding.continuous import StreamItem, continuous_beam, continuous_greedy
from tfm.decoding.search import Hypothesis, beam_search, greedy_search
from tfm.model import Transformer
from tfm.model.ensemble import Ensemble
from tfm.special_tokens import EOS_ID, PAD_ID


def tiny_model(seed: int, vocab: int = 40) -> Transformer:
    torch.manual_seed(seed)
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=32, n_heads=4,
                         encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.0,
                         max_positions=128)
    return Transformer(config).eval()


def eos_prone_model() -> Transformer:
    """A random model whose hypotheses mostly end with EOS before their length limit, so that
    beam search's stopping rule, not the limit, ends most sentences."""
    model = tiny_model(10)
    with torch.no_grad():
        model.output_proj.weight[EOS_ID] *= 4.0
    return model


def sources(n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    return [[rng.randrange(4, 40) for _ in range(rng.randrange(1, 20))] + [EOS_ID]
            for _ in range(n)]


def alone(model, ids: list[int], item: StreamItem) -> Hypothesis:
    src = torch.tensor([ids])
    return greedy_search(model, src, item.max_len_a, item.max_len_b, item.min_len)[0][0]


def run_stream(model, items: list[StreamItem], max_rows: int, arrivals: list[int],
               min_join: int = 1, beam: int = 1) -> tuple[dict[Any, Any], list[int], list[Any]]:
    """Stream ``items``: before the k-th step, ``arrivals[k]`` more of them are queued (the
    rest at the end). Returns the hypotheses by item, the room offered at each take, and the
    order in which items ended."""
    queue: list[StreamItem] = []
    pending = list(items)
    found: dict[int, Hypothesis] = {}
    rows: list[int] = []
    ended: list[int] = []
    step = 0

    def take(n: int, wait: bool) -> list[StreamItem]:
        nonlocal step
        arriving = arrivals[step] if step < len(arrivals) else len(pending)
        step += 1
        queue.extend(pending[:arriving])
        del pending[:arriving]
        if wait and not queue and pending:  # idle: the next sentence arrives
            queue.append(pending.pop(0))
        taken = queue[:n]
        del queue[:n]
        rows.append(n)
        return taken

    def done(item: StreamItem, hyp: Hypothesis) -> None:
        found[item.tag] = hyp
        ended.append(item.tag)

    if beam == 1:
        continuous_greedy(model, take, done, max_rows, min_join=min_join)
    else:
        continuous_beam(model, take, done, max_rows, beam)
    return found, rows, ended


@pytest.mark.parametrize("eos_prone", [False, True])
@pytest.mark.parametrize("max_rows", [1, 3, 8, 64])
def test_each_sentence_gets_the_hypothesis_it_gets_alone_whenever_it_joins(max_rows, eos_prone):
    model = eos_prone_model() if eos_prone else tiny_model(0)
    ids = sources(30)
    items = [StreamItem(x, 1.5, 10, 0, i) for i, x in enumerate(ids)]
    rng = random.Random(max_rows)
    arrivals = [rng.choice([0, 0, 1, 2, 5]) for _ in range(200)]
    found, _, _ = run_stream(model, items, max_rows, arrivals)
    assert sorted(found) == list(range(30))
    for item in items:
        expected = alone(model, item.ids, item)
        got = found[item.tag]
        assert got.tokens == expected.tokens
        assert got.log_prob == pytest.approx(expected.log_prob, abs=1e-5)
        assert got.score == pytest.approx(expected.score, abs=1e-5)


def test_rows_keep_their_own_length_limits_and_minimum_lengths():
    model = tiny_model(1)
    ids = sources(12, seed=3)
    # Sentences of one running batch with different limits: no EOS before min_len, and EOS
    # forced at each one's own last position (a long limit outgrows the first cache buffer).
    items = [StreamItem(x, a, b, m, i) for i, (x, (a, b, m)) in enumerate(zip(ids, [
        (0.0, 3, 0), (0.0, 40, 30), (2.0, 5, 4), (1.0, 1, 0), (0.0, 1, 0), (1.5, 10, 8)] * 2))]
    found, _, _ = run_stream(model, items, 5, [2, 0, 1, 0, 3, 0, 0, 1])
    for item in items:
        assert found[item.tag].tokens == alone(model, item.ids, item).tokens
    assert 30 <= len(found[1].tokens) <= 39  # min_len 30, at most 40 positions with EOS
    assert found[4].tokens == []  # one position: EOS at once


def test_a_short_sentence_leaves_before_a_long_one_that_started_first():
    model = tiny_model(2)
    long_item = StreamItem(sources(1, seed=5)[0], 0.0, 30, 29, "long")  # exactly 29 tokens
    short_item = StreamItem(sources(1, seed=6)[0], 0.0, 2, 0, "short")  # at most 1 token
    found, _, ended = run_stream(model, [long_item, short_item], 4, [1, 0, 0, 1])
    assert ended == ["short", "long"]
    assert len(found["long"].tokens) == 29


def test_it_never_decodes_more_rows_than_allowed_and_stops_when_nothing_is_left():
    model = tiny_model(3)
    rows: list[int] = []
    decode_step = model.decode_step
    model.decode_step = lambda tokens, state, *a: rows.append(len(tokens)) or decode_step(
        tokens, state, *a)
    items = [StreamItem(x, 1.0, 5, 0, i) for i, x in enumerate(sources(20, seed=7))]
    found, _, _ = run_stream(model, items, 4, [20])
    assert len(found) == 20
    assert max(rows) == 4  # full while sentences wait, never fuller


def test_joining_in_groups_gives_the_same_hypotheses():
    model = tiny_model(4)
    items = [StreamItem(x, 1.5, 10, 0, i) for i, x in enumerate(sources(25, seed=8))]
    one_by_one, _, _ = run_stream(model, items, 8, [1] * 100)
    grouped, _, _ = run_stream(model, items, 8, [1] * 100, min_join=4)
    assert {k: h.tokens for k, h in one_by_one.items()} == {k: h.tokens
                                                           for k, h in grouped.items()}


def test_an_ensemble_streams_as_it_searches():
    ensemble = Ensemble([tiny_model(5), tiny_model(6)]).eval()
    ids = sources(15, seed=9)
    items = [StreamItem(x, 1.5, 10, 0, i) for i, x in enumerate(ids)]
    found, _, _ = run_stream(ensemble, items, 6, [3, 0, 2, 1, 0, 0, 4])
    padded = torch.full((len(ids), max(map(len, ids))), PAD_ID)
    for row, x in enumerate(ids):
        padded[row, : len(x)] = torch.tensor(x)
    expected = greedy_search(ensemble, padded, 1.5, 10)
    assert [found[i].tokens for i in range(len(ids))] == [h[0].tokens for h in expected]


def beam_alone(model, item: StreamItem, beam: int) -> list[Hypothesis]:
    return beam_search(model, torch.tensor([item.ids]), beam, item.length_penalty,
                       item.max_len_a, item.max_len_b, item.min_len, item.n_best,
                       stop_early=item.stop_early)[0]


@pytest.mark.parametrize("beam, max_rows", [(2, 1), (4, 3), (5, 64)])
def test_beam_search_streams_each_sentence_to_the_hypotheses_it_gets_alone(beam, max_rows):
    model = eos_prone_model()
    rng = random.Random(beam)
    items = [StreamItem(x, 1.5, 10, 0, i, n_best=rng.choice([1, 1, 2, beam]),
                        length_penalty=rng.choice([1.0, 0.6, 1.4]),
                        stop_early=rng.random() < 0.7)
             for i, x in enumerate(sources(24, seed=beam))]
    arrivals = [rng.choice([0, 0, 1, 3]) for _ in range(300)]
    found, _, _ = run_stream(model, items, max_rows, arrivals, beam=beam)
    assert sorted(found) == list(range(24))
    early = 0
    for item in items:
        expected = beam_alone(model, item, beam)
        early += len(expected[0].tokens) + 1 < int(1.5 * len(item.ids) + 10)
        got = found[item.tag]
        assert len(got) == len(expected) == min(item.n_best, beam)
        assert [h.tokens for h in got] == [h.tokens for h in expected]
        assert [h.score for h in got] == pytest.approx([h.score for h in expected], abs=1e-5)
    assert early >= 12  # most sentences were ended by the stopping rule


def test_beam_search_streams_keep_each_sentences_limits():
    model = tiny_model(8)
    items = [StreamItem(x, a, b, m, i) for i, (x, (a, b, m)) in enumerate(zip(
        sources(10, seed=11), [(0.0, 3, 0), (0.0, 40, 30), (2.0, 5, 4), (0.0, 1, 0),
                               (1.5, 10, 8)] * 2))]
    found, _, ended = run_stream(model, items, 4, [1, 0, 2, 0, 1, 0, 0, 2], beam=3)
    for item in items:
        assert [h.tokens for h in found[item.tag]] == [
            h.tokens for h in beam_alone(model, item, 3)]
    assert len(found[1][0].tokens) >= 30 and found[3][0].tokens == []
    assert ended.index(3) < ended.index(1)  # the one-position sentence leaves first


def test_an_ensemble_streams_beam_search_as_it_searches():
    ensemble = Ensemble([tiny_model(9), tiny_model(10)]).eval()
    items = [StreamItem(x, 1.5, 10, 0, i) for i, x in enumerate(sources(10, seed=12))]
    found, _, _ = run_stream(ensemble, items, 3, [2, 0, 1, 1, 0, 3], beam=3)
    for item in items:
        assert [h.tokens for h in found[item.tag]] == [
            h.tokens for h in beam_alone(ensemble, item, 3)]
