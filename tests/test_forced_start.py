"""Specifications of the forced decoder start (tfm.decoding.search.decoder_start): each
sentence's decoder may be fed tokens before the search chooses any (``<s>``, then a
target-language token, say), which are neither scored nor written out, in every engine and
path: tfm's search, the fixed search of CUDA graphs, an ensemble, a shortlist, constraints,
and the CTranslate2 engine."""

from __future__ import annotations

import itertools

import pytest
import torch
from test_search import sources, tiny_model

from tfm.config import SearchOptions
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.graphs import CudaGraphs
from tfm.decoding.search import search
from tfm.decoding.shortlist import shortlist_search
from tfm.model.ensemble import Ensemble
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID

VOCAB = 14
X = 9  # the forced token after <s>

SEARCHES = [
    dict(beam=1),
    dict(beam=1, min_len=2),
    dict(beam=4, n_best=3),
    dict(beam=3, length_penalty=0.6, stop_early=False, n_best=2),
]


def start(rows: int, *tokens: int) -> torch.Tensor:
    return torch.tensor([[BOS_ID, *tokens]] * rows, dtype=torch.long)


def teacher_forced(model, src_row: torch.Tensor, fed: list[int], output: list[int]) -> float:
    """log P(output + EOS | src) with the decoder fed ``fed`` first, their own log P left out."""
    tgt_in = torch.tensor([[*fed, *output]], dtype=torch.long)
    tgt_out = [*fed[1:], *output, EOS_ID]
    with torch.no_grad():
        logp = torch.log_softmax(model(src_row[None], tgt_in).double(), dim=-1)[0]
    return float(sum(logp[i, t] for i, t in enumerate(tgt_out) if i >= len(fed) - 1))


def tokens(found) -> list[list[list[int]]]:
    return [[h.tokens for h in hyps] for hyps in found]


@pytest.mark.parametrize("how", SEARCHES)
def test_bos_alone_is_todays_search(how: dict) -> None:
    model = tiny_model(0, vocab=VOCAB, layers=2)
    src = sources([5, 3, 7], VOCAB, 0)
    options = SearchOptions(**how)
    assert search(model, src, options, start=start(3)) == search(model, src, options)


@pytest.mark.parametrize("seed, how", list(itertools.product(range(3), SEARCHES)))
def test_a_forced_token_is_fed_but_neither_output_nor_scored(seed: int, how: dict) -> None:
    # Each hypothesis's log P is that of its tokens and EOS under a decoder fed <s> X first,
    # X's own log P left out; its length counts X too (rules.counted), as fairseq and
    # transformers count a forced language token.
    model = tiny_model(seed, vocab=VOCAB, layers=2)
    src = sources([5, 3, 7, 2], VOCAB, seed)
    options = SearchOptions(max_len_a=1.5, max_len_b=3, **how)
    found = search(model, src, options, start=start(4, X))
    lp = 1.0 if options.beam == 1 else options.length_penalty
    for row, hyps in enumerate(found):
        assert len(hyps) == options.n_best
        for h in hyps:
            expected = teacher_forced(model, src[row], [BOS_ID, X], h.tokens)
            assert h.log_prob == pytest.approx(expected, abs=1e-4)
            assert h.score == pytest.approx(expected / (len(h.tokens) + 2) ** lp, abs=1e-4)
            assert options.min_len <= len(h.tokens)
            assert len(h.tokens) + 1 <= int(1.5 * int((src[row] != PAD_ID).sum()) + 3)
    # And the forced token matters: the decoder fed X translates otherwise than one fed <s>.
    assert tokens(found) != tokens(search(model, src, options))


def test_greedy_with_a_forced_token_is_the_prefix_search_without_its_prefix() -> None:
    # A constraint prefix X is forced too, but output and scored: the same tokens after it,
    # with its length limit one longer to make room for X.
    model = tiny_model(3, vocab=VOCAB, layers=2)
    src = sources([6, 4, 8], VOCAB, 3)
    found = search(model, src, SearchOptions(beam=1, max_len_b=5), start=start(3, X))
    prefixed = search(model, src, SearchOptions(beam=1, max_len_b=6),
                      [TargetConstraints(prefix=[X])] * 3)
    for row, (mine, theirs) in enumerate(zip(found, prefixed)):
        assert theirs[0].tokens[0] == X
        assert mine[0].tokens == theirs[0].tokens[1:]
        x_log_p = teacher_forced(model, src[row], [BOS_ID], [X]) - teacher_forced(
            model, src[row], [BOS_ID, X], [])  # log P(X | <s>)
        assert mine[0].log_prob == pytest.approx(theirs[0].log_prob - x_log_p, abs=1e-4)


@pytest.mark.parametrize("how", SEARCHES)
def test_the_fixed_search_starts_from_the_same_tokens(how: dict) -> None:
    model = tiny_model(4, vocab=VOCAB, layers=2)
    src = sources([5, 3, 7, 2], VOCAB, 4)
    options = SearchOptions(max_len_a=1.5, max_len_b=3, **how)
    forced = start(4, X, 5)
    expected = search(model, src, options, start=forced)
    found = CudaGraphs(model, check_every=1).search(src, options, forced)
    assert tokens(found) == tokens(expected)
    for mine, theirs in zip(itertools.chain(*found), itertools.chain(*expected)):
        assert mine.score == pytest.approx(theirs.score, abs=1e-5)
        assert mine.log_prob == pytest.approx(theirs.log_prob, abs=1e-5)


def test_an_ensemble_is_started_from_the_forced_tokens_in_every_member() -> None:
    members = [tiny_model(seed, vocab=VOCAB, layers=2) for seed in (5, 6)]
    ensemble = Ensemble(members).eval()
    src = sources([5, 3, 7], VOCAB, 5)
    options = SearchOptions(beam=3, n_best=2, length_penalty=0.0)
    found = search(ensemble, src, options, start=start(3, X))
    for row, hyps in enumerate(found):
        for h in hyps:
            # log of the members' mean probability at each position, X's own left out
            fed = [BOS_ID, X, *h.tokens]
            tgt_in = torch.tensor([fed])
            with torch.no_grad():
                logp = ensemble(src[row][None], tgt_in).double().log_softmax(-1)[0]
            expected = sum(float(logp[i, t]) for i, t in
                           enumerate([X, *h.tokens, EOS_ID]) if i >= 1)
            assert h.log_prob == pytest.approx(expected, abs=1e-4)
    assert tokens(found) != tokens(search(ensemble, src, options))


class _WholeVocabulary:
    """A shortlist that allows every target token: the narrowed search is the plain one."""

    def __init__(self, vocab: int, leave_out: int | None = None) -> None:
        self.vocab, self.leave_out = vocab, leave_out

    def batch_candidates(self, batch, extra=None):
        import numpy as np

        ids = np.array([i for i in range(self.vocab) if i != self.leave_out
                        or (extra and any(i in e for e in extra))], dtype=np.int64)
        return ids, np.ones((len(batch), len(ids)), dtype=bool)


def test_a_shortlist_feeds_the_forced_tokens_by_their_full_ids() -> None:
    # X is left out of the shortlist's candidates; as a forced token it must still be fed
    # as X (not as whatever token takes its place among the candidates).
    model = tiny_model(7, vocab=VOCAB, layers=2)
    src = sources([5, 3, 7], VOCAB, 7)
    batch = [row[row != PAD_ID].tolist() for row in src]
    options = SearchOptions(beam=3, n_best=2)
    found = shortlist_search(model, _WholeVocabulary(VOCAB, leave_out=X), batch, src, options,
                             None, start(3, X))
    assert tokens(found) == tokens(search(model, src, options, start=start(3, X)))


def test_a_constraint_prefix_follows_the_forced_tokens() -> None:
    # The user's prefix is output (and scored) after the forced tokens, which are not.
    model = tiny_model(8, vocab=VOCAB, layers=2)
    src = sources([6, 4], VOCAB, 8)
    options = SearchOptions(beam=3, n_best=1)
    found = search(model, src, options, [TargetConstraints(prefix=[6, 7])] * 2, start(2, X))
    for row, hyps in enumerate(found):
        h = hyps[0]
        assert h.tokens[:2] == [6, 7]
        assert h.log_prob == pytest.approx(teacher_forced(model, src[row], [BOS_ID, X],
                                                          h.tokens), abs=1e-4)


def test_the_forced_tokens_take_positions_from_the_length_limit() -> None:
    # A model of 12 positions fed 3 forced tokens has 10 left for output (EOS included).
    model = tiny_model(9, vocab=VOCAB, layers=2, max_positions=12)
    src = sources([8], VOCAB, 9)
    options = SearchOptions(beam=1, max_len_a=4.0, max_len_b=10, min_len=30)
    found = search(model, src, options, start=start(1, X, 5))
    assert len(found[0][0].tokens) + 1 == 12 - 2


def test_training_feeds_the_forced_tokens_and_learns_no_label_for_them() -> None:
    # A batch's decoder input is start + target and its labels skip the forced tokens: the
    # teacher-forced log P of the labels is what the search scores for the same start.
    from tfm.data.batching import pad_pairs

    model = tiny_model(10, vocab=VOCAB, layers=2)
    src = sources([5, 3], VOCAB, 10)
    options = SearchOptions(beam=1)
    found = search(model, src, options, start=start(2, X, 6))
    rows = [row[row != PAD_ID].tolist() for row in src]
    batch = pad_pairs(rows, [hyps[0].tokens for hyps in found],
                      starts=[(BOS_ID, X, 6), (BOS_ID, X, 6)])
    assert batch.tgt_in[0, :3].tolist() == [BOS_ID, X, 6]
    assert batch.tgt_out[0, :2].tolist() == [PAD_ID, PAD_ID]  # no label for X nor 6
    assert batch.n_tgt_tokens == sum(len(h[0].tokens) + 1 for h in found)
    with torch.no_grad():
        logp = torch.log_softmax(model(batch.src, batch.tgt_in).double(), dim=-1)
    gold = logp.gather(-1, batch.tgt_out[..., None])[..., 0].masked_fill(
        batch.tgt_out == PAD_ID, 0.0).sum(dim=1)
    assert gold.tolist() == pytest.approx([h[0].log_prob for h in found], abs=1e-4)
    # BOS alone: today's batch.
    plain = pad_pairs(rows, [[7, 8], [9]])
    assert plain.tgt_in.tolist() == [[BOS_ID, 7, 8], [BOS_ID, 9, PAD_ID]]
    assert plain.tgt_out.tolist() == [[7, 8, EOS_ID], [9, EOS_ID, PAD_ID]]
