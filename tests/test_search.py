"""Specifications of greedy and beam search, on tiny models with fixed random weights.

The models are untrained: their output is arbitrary, but the searches must still find what
they claim to find (the best hypothesis, scored the way the docstrings say), whatever the
batch they are run in.
"""

from __future__ import annotations

import itertools

import pytest
import torch

from tfm.config import ModelConfig, SearchOptions
from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfm.decoding.search import Hypothesis, beam_search, greedy_search
from tfm.decoding.steps import max_lengths
from tfm.model import Transformer


def tiny_model(seed: int, vocab: int = 10, d_model: int = 16, layers: int = 1,
               **overrides) -> Transformer:
    torch.manual_seed(seed)
    values = dict(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model, n_heads=2,
                  encoder_layers=layers, decoder_layers=layers, d_ff=2 * d_model, dropout=0.0,
                  max_positions=64)
    values.update(overrides)
    return Transformer(ModelConfig(**values)).eval()


def sources(lengths: list[int], vocab: int, seed: int) -> torch.Tensor:
    """A padded batch of sources with the given lengths (EOS included): ids >= 4, then EOS."""
    g = torch.Generator().manual_seed(seed)
    batch = torch.full((len(lengths), max(lengths)), PAD_ID, dtype=torch.long)
    for i, n in enumerate(lengths):
        batch[i, : n - 1] = torch.randint(4, vocab, (n - 1,), generator=g)
        batch[i, n - 1] = EOS_ID
    return batch


def teacher_forced_log_probs(model: Transformer, src: torch.Tensor,
                             outputs: list[list[int]]) -> torch.Tensor:
    """(N,) log P(tokens + EOS | src) for N outputs of one source row (1, S), by model(src, tgt)."""
    n, longest = len(outputs), max(len(o) for o in outputs) + 1
    tgt_in = torch.full((n, longest), PAD_ID, dtype=torch.long)
    tgt_out = torch.full((n, longest), PAD_ID, dtype=torch.long)
    for i, out in enumerate(outputs):
        tgt_in[i, : len(out) + 1] = torch.tensor([BOS_ID, *out])
        tgt_out[i, : len(out) + 1] = torch.tensor([*out, EOS_ID])
    with torch.no_grad():
        logp = torch.log_softmax(model(src.expand(n, -1), tgt_in).double(), dim=-1)
    picked = logp.gather(2, tgt_out[..., None])[..., 0]
    return picked.masked_fill(tgt_out == PAD_ID, 0.0).sum(dim=1)


def assert_same_hypothesis(a: Hypothesis, b: Hypothesis) -> None:
    assert a.tokens == b.tokens
    assert a.score == pytest.approx(b.score, abs=1e-5)
    assert a.log_prob == pytest.approx(b.log_prob, abs=1e-5)


LENGTHS = [5, 2, 9, 3, 7]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_beam_of_one_is_greedy_search(seed):
    model = tiny_model(seed)
    src = sources(LENGTHS, 10, seed)
    greedy = greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=3))
    beam = beam_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=3))
    assert len(greedy) == len(beam) == len(LENGTHS)
    for g, b in zip(greedy, beam):
        assert len(g) == len(b) == 1
        assert_same_hypothesis(g[0], b[0])


@pytest.mark.parametrize("beam", [1, 4])
@pytest.mark.parametrize("seed", [0, 1])
def test_each_sentence_is_translated_as_if_it_were_alone(seed, beam):
    model = tiny_model(seed, layers=2, d_model=32, n_heads=4)
    src = sources(LENGTHS, 10, seed + 10)

    def search(x):
        if beam == 1:
            return greedy_search(model, x, SearchOptions(beam=1, max_len_a=1.0, max_len_b=2))
        return beam_search(model, x, SearchOptions(beam=beam, max_len_a=1.0, max_len_b=2, n_best=2))

    batched = search(src)
    assert len(batched) == len(LENGTHS)
    for i, n in enumerate(LENGTHS):
        alone = search(src[i: i + 1, :n])
        assert len(alone[0]) == len(batched[i])
        for a, b in zip(alone[0], batched[i]):
            assert_same_hypothesis(a, b)


def all_outputs(vocab: int, max_len: int, min_len: int) -> list[list[int]]:
    """Every output search may produce: min_len to max_len - 1 real tokens (search never
    produces PAD, UNK or BOS), then EOS, which is forced at position max_len - 1."""
    tokens = range(4, vocab)
    return [list(seq) for n in range(min_len, max_len)
            for seq in itertools.product(tokens, repeat=n)]


@pytest.mark.parametrize("seed, length_penalty, min_len", [
    (0, 1.0, 0), (1, 0.6, 0), (2, 0.0, 0), (3, 1.0, 1), (4, 2.0, 2)])
def test_beam_search_with_a_wide_beam_ranks_every_possible_output(seed, length_penalty, min_len):
    vocab, limit = 8, 4  # real tokens 4..7; at most 3 of them before EOS: 85 outputs
    model = tiny_model(seed, vocab=vocab)
    src = sources([4], vocab, seed)
    candidates = all_outputs(vocab, limit, min_len)
    log_probs = teacher_forced_log_probs(model, src, candidates)
    scores = [float(lp) / (len(c) + 1) ** length_penalty for c, lp in zip(candidates, log_probs)]
    ranked = sorted(range(len(candidates)), key=lambda i: scores[i], reverse=True)

    k = len(candidates)
    [hyps] = beam_search(model, src,
                         SearchOptions(beam=k, length_penalty=length_penalty, max_len_a=0.0,
                                       max_len_b=limit, min_len=min_len, n_best=k))
    # The best hypothesis is the best of all possible outputs, with its score ...
    assert hyps[0].tokens == candidates[ranked[0]]
    assert hyps[0].score == pytest.approx(scores[ranked[0]], abs=1e-5)
    # ... and a beam as wide as the search space finds all of them, in order, scored right.
    assert len(hyps) == len(candidates)
    for h, i in zip(hyps, ranked):
        assert h.tokens == candidates[i]
        assert h.score == pytest.approx(scores[i], abs=1e-5)
        assert h.log_prob == pytest.approx(float(log_probs[i]), abs=1e-5)

    # A narrower beam need not find the best, but what it returns is scored right.
    [narrow] = beam_search(model, src,
                           SearchOptions(beam=8, length_penalty=length_penalty, max_len_a=0.0,
                                         max_len_b=limit, min_len=min_len, n_best=8))
    for h in narrow:
        i = candidates.index(h.tokens)
        assert h.score == pytest.approx(scores[i], abs=1e-5)
        assert h.score <= scores[ranked[0]] + 1e-5


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_returned_log_prob_is_the_teacher_forced_log_probability(seed):
    model = tiny_model(seed, layers=2, d_model=32, n_heads=4)
    src = sources(LENGTHS, 10, seed)
    results = {
        "greedy": greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=3)),
        "beam": beam_search(model, src,
                            SearchOptions(beam=4, max_len_a=1.0, max_len_b=3, n_best=4,
                                          length_penalty=0.6)),
    }
    for name, result in results.items():
        for i, n in enumerate(LENGTHS):
            hyps = result[i]
            expected = teacher_forced_log_probs(model, src[i: i + 1, :n], [h.tokens for h in hyps])
            penalty = 1.0 if name == "greedy" else 0.6
            for h, lp in zip(hyps, expected.tolist()):
                assert h.log_prob == pytest.approx(lp, abs=1e-5), name
                assert h.score == pytest.approx(lp / (len(h.tokens) + 1) ** penalty, abs=1e-5)


def test_search_never_produces_special_tokens():
    # An untied output projection whose PAD, UNK and BOS rows outscore the real tokens: the
    # searches must still produce real tokens only (padding could not even be scored: the full
    # decoder masks it).
    model = tiny_model(0, tie_output=False)
    specials = [PAD_ID, UNK_ID, BOS_ID]
    with torch.no_grad():
        mean = model.output_proj.weight[4:].mean(0)
        for i, t in enumerate(specials):
            model.output_proj.weight[t] = (2 + i) * mean
    src = sources(LENGTHS, 10, 0)
    with torch.no_grad():
        preferred = model(src, torch.full((5, 3), BOS_ID)).argmax(-1)
    assert sum(preferred.eq(t).sum() for t in specials) > 5
    for result in (greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=3)),
                   beam_search(model, src,
                               SearchOptions(beam=3, max_len_a=1.0, max_len_b=3, n_best=3))):
        for i, hyps in enumerate(result):
            assert hyps
            assert all(t >= 4 for h in hyps for t in h.tokens)
            expected = teacher_forced_log_probs(model, src[i: i + 1], [h.tokens for h in hyps])
            for h, lp in zip(hyps, expected.tolist()):
                assert h.log_prob == pytest.approx(lp, abs=1e-5)


def reference_beam_search(model: Transformer, src: torch.Tensor, k: int, limit: int,
                          min_len: int = 0) -> list[Hypothesis]:
    """Textbook beam search for one sentence (1, S), without length normalisation, run to the
    length limit: at each step the 2k best (beam, token) extensions; an EOS among the first k
    ends a hypothesis, the first k others continue. The k best finished hypotheses, best first."""
    beams: list[tuple[list[int], float]] = [([], 0.0)]
    finished: list[tuple[list[int], float]] = []
    for step in range(limit):
        tgt_in = torch.tensor([[BOS_ID, *tokens] for tokens, _ in beams])
        with torch.no_grad():
            logits = model(src.expand(len(beams), -1), tgt_in)[:, -1]
        logp = torch.log_softmax(logits.float(), dim=-1).tolist()
        candidates = []
        for (tokens, lp), row in zip(beams, logp):
            for token, token_lp in enumerate(row):
                allowed = token >= 4 and step < limit - 1 or token == EOS_ID and (
                    step >= min_len or step == limit - 1)
                if allowed:
                    candidates.append((lp + token_lp, tokens, token))
        candidates.sort(key=lambda c: c[0], reverse=True)
        top = candidates[: 2 * k]
        finished += [(tokens, lp) for lp, tokens, token in top[:k] if token == EOS_ID]
        beams = [([*tokens, token], lp) for lp, tokens, token in top if token != EOS_ID][:k]
    finished.sort(key=lambda f: f[1], reverse=True)
    return [Hypothesis(tokens, lp, lp) for tokens, lp in finished[:k]]


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_beam_search_stops_early_only_when_nothing_better_can_come(seed):
    # Without length normalisation a hypothesis's score only falls as it grows, so stopping a
    # sentence early must give exactly what running every beam to the length limit gives.
    model = tiny_model(seed)
    with torch.no_grad():  # a likelier EOS: hypotheses end at many different steps
        model.output_proj.weight[EOS_ID] *= 2.5
    lengths = [3, 6, 4, 8]
    src = sources(lengths, 10, seed)
    k, a, b = 3, 1.0, 3
    results = beam_search(model, src,
                          SearchOptions(beam=k, length_penalty=0.0, max_len_a=a, max_len_b=b,
                                        n_best=k))
    for i, n in enumerate(lengths):
        expected = reference_beam_search(model, src[i: i + 1, :n], k, int(a * n + b))
        assert len(results[i]) == len(expected)
        for got, want in zip(results[i], expected):
            assert_same_hypothesis(got, want)


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_with_one_best_asked_for_search_stops_at_the_best_a_full_search_finds(seed):
    # Without length normalisation, a sentence whose best hypothesis has ended cannot do better
    # by decoding on: with n_best=1 it stops there, and returns the best that running every
    # beam to the length limit finds.
    model = tiny_model(seed)
    with torch.no_grad():
        model.output_proj.weight[EOS_ID] *= 2.5
    lengths = [3, 6, 4, 8]
    src = sources(lengths, 10, seed)
    k, a, b = 3, 1.0, 3
    results = beam_search(model, src,
                          SearchOptions(beam=k, length_penalty=0.0, max_len_a=a, max_len_b=b,
                                        n_best=1))
    for i, n in enumerate(lengths):
        [best] = results[i]
        assert_same_hypothesis(best, reference_beam_search(model, src[i: i + 1, :n], k,
                                                           int(a * n + b))[0])


def test_without_stop_early_the_search_stops_once_beam_hypotheses_have_ended():
    # fairseq's rule (and transformers' early_stopping=True): a sentence is done once it has
    # `beam` finished hypotheses, whatever its live beams could still reach; n_best only
    # chooses how many of them are returned. With a strong length penalty, longer
    # hypotheses that end later can win, so stopping at the first best (stop_early) changes
    # some outputs here (this seed: 3 of 5 sentences).
    model = tiny_model(5)
    with torch.no_grad():
        model.output_proj.weight[EOS_ID] *= 2.5
    src = sources(LENGTHS, 10, 5)
    options = dict(beam=4, length_penalty=2.0, max_len_a=1.0, max_len_b=6)
    waited = beam_search(model, src, SearchOptions(n_best=1, stop_early=False, **options))
    early = beam_search(model, src, SearchOptions(n_best=1, **options))
    full = beam_search(model, src, SearchOptions(n_best=4, stop_early=False, **options))
    for [best], hyps in zip(waited, full):
        assert len(hyps) == 4
        assert_same_hypothesis(best, hyps[0])
    assert [e.tokens for [e] in early] != [w.tokens for [w] in waited]
    # Bounded by its live beams instead (stop_early with all four asked for), the search
    # goes on longer and finds other hypotheses for some sentence.
    bounded = beam_search(model, src, SearchOptions(n_best=4, **options))
    assert [[h.tokens for h in hyps] for hyps in bounded] != [
        [h.tokens for h in hyps] for hyps in full]


@pytest.mark.parametrize("n_best", [1, 3, 4])
def test_n_best_gives_distinct_hypotheses_best_first(n_best):
    model = tiny_model(3)
    src = sources(LENGTHS, 10, 3)
    beam = 4
    results = beam_search(model, src,
                          SearchOptions(beam=beam, max_len_a=1.0, max_len_b=3, n_best=n_best))
    for hyps in results:
        assert len({tuple(h.tokens) for h in hyps}) == len(hyps)
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
    assert all(len(hyps) == n_best for hyps in results)


@pytest.mark.parametrize("seed", [0, 1])
def test_outputs_respect_min_len_and_the_length_limit(seed):
    model = tiny_model(seed)
    lengths = [2, 3, 5, 8, 9]
    src = sources(lengths, 10, seed)
    a, b = 0.5, 3
    limits = max_lengths(src, PAD_ID, a, b, model.config.max_positions).tolist()
    assert limits == [int(a * n + b) for n in lengths]
    for min_len in (0, 2, 3):
        results = {
            "greedy": greedy_search(model, src,
                                    SearchOptions(beam=1, max_len_a=a, max_len_b=b,
                                                  min_len=min_len)),
            "beam": beam_search(model, src,
                                SearchOptions(beam=3, max_len_a=a, max_len_b=b, min_len=min_len,
                                              n_best=3)),
        }
        for name, result in results.items():
            for hyps, limit in zip(result, limits):
                assert hyps, name
                for h in hyps:
                    assert min_len <= len(h.tokens) <= limit - 1, name  # EOS takes one place


def test_length_limit_wins_over_a_larger_min_len():
    model = tiny_model(0)
    src = sources([2, 6], 10, 0)
    limits = max_lengths(src, PAD_ID, 0.5, 1, model.config.max_positions).tolist()
    assert limits == [2, 4]
    for result in (greedy_search(model, src,
                                 SearchOptions(beam=1, max_len_a=0.5, max_len_b=1, min_len=10)),
                   beam_search(model, src,
                               SearchOptions(beam=3, max_len_a=0.5, max_len_b=1, min_len=10))):
        for hyps, limit in zip(result, limits):
            assert len(hyps) == 1
            assert len(hyps[0].tokens) == limit - 1


def test_finished_sentences_leave_the_batch(monkeypatch):
    model = tiny_model(1)
    src = sources(LENGTHS, 10, 1)
    rows: list[int] = []
    decode_step = model.decode_step

    def counting_step(tokens, state, need_weights=False):
        assert state.batch_size == tokens.size(0)
        rows.append(tokens.size(0))
        return decode_step(tokens, state, need_weights)

    monkeypatch.setattr(model, "decode_step", counting_step)
    [*greedy] = greedy_search(model, src, SearchOptions(beam=1, max_len_a=1.0, max_len_b=1))
    lengths = [len(h[0].tokens) for h in greedy]
    assert len(set(lengths)) > 2  # the sentences do end at different steps
    # Sentence i is fed at steps 0..len_i (the last one produces its EOS), then leaves.
    assert rows == [sum(n >= t for n in lengths) for t in range(max(lengths) + 1)]

    rows.clear()
    beam = 3
    beam_search(model, src, SearchOptions(beam=beam, max_len_a=1.0, max_len_b=1))
    assert all(r % beam == 0 for r in rows)
    assert rows == sorted(rows, reverse=True)
    assert rows[0] == beam * len(LENGTHS) and rows[-1] < rows[0]


def test_the_length_limit_rule_is_computed_as_in_float32_on_every_engine():
    """rules.length_limit (plain Python, for engines without torch) gives the limit the
    float32 formula gives, to the last rounding: floor(a * tokens + b), within [1, most]."""
    from tfm.decoding.rules import length_limit

    g = torch.Generator().manual_seed(0)
    for _ in range(2000):
        a = round(float(torch.rand(1, generator=g)) * 3, int(torch.randint(1, 4, (1,),
                                                                          generator=g)))
        b = int(torch.randint(-5, 50, (1,), generator=g))
        n = int(torch.randint(1, 300, (1,), generator=g))
        expected = int((torch.tensor([n], dtype=torch.float32) * a + b).floor()
                       .clamp(min=1, max=256))
        assert length_limit(n, a, b, 256) == expected, (a, b, n)
