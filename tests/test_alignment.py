"""Cross-attention kept by search, and word alignments made from it."""

from __future__ import annotations

import pytest
import torch

from tfm.config import ModelConfig, SearchOptions
from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tfm.decoding.alignment import align_words, pharaoh, word_ids
from tfm.decoding.search import beam_search, greedy_search
from tfm.model import Transformer


def test_a_space_mark_starts_a_new_word() -> None:
    assert word_ids(["ĠThe", "Ġdo", "g", "."]) == [0, 1, 1, 1]
    assert word_ids(["Hal", "lo", "Ġwelt"]) == [0, 0, 1]


def test_each_target_word_aligns_to_the_source_word_with_most_attention() -> None:
    src = ["ĠDer", "ĠHund", "."]  # words: Der, Hund.
    tgt = ["ĠThe", "Ġdo", "g", "."]  # words: The, dog.
    attention = [[0.9, 0.1, 0.0], [0.2, 0.7, 0.1], [0.0, 0.6, 0.4], [0.1, 0.3, 0.6]]
    assert align_words(attention, src, tgt) == [(0, 0), (1, 1)]
    assert pharaoh(align_words(attention, src, tgt)) == "0-0 1-1"
    assert align_words([], src, []) == []


@pytest.fixture(scope="module")
def model() -> Transformer:
    torch.manual_seed(0)
    config = ModelConfig(src_vocab_size=12, tgt_vocab_size=12, d_model=16, n_heads=2,
                         encoder_layers=1, decoder_layers=2, d_ff=32, dropout=0.0)
    return Transformer(config).eval()


def sources() -> torch.Tensor:
    rows = [[5, 6, 7, 8, EOS_ID], [9, 4, EOS_ID], [6, 6, 5, EOS_ID]]
    src = torch.full((len(rows), 5), PAD_ID)
    for i, row in enumerate(rows):
        src[i, : len(row)] = torch.tensor(row)
    return src


def teacher_forced_attention(model: Transformer, src: torch.Tensor, tokens: list[int]):
    """The last layer's cross-attention, mean over heads, for each output token."""
    memory, mask = model.encode(src)
    tgt_in = torch.tensor([[BOS_ID] + tokens])
    _, weights = model.decode_hidden(tgt_in, memory, mask, need_weights=True)
    return weights.mean(dim=1)[0, : len(tokens)]  # (T, S)


@pytest.mark.parametrize("beam", [1, 3])
def test_search_keeps_the_attention_that_produced_each_token(model, beam: int) -> None:
    src = sources()
    with torch.no_grad():
        if beam == 1:
            results = greedy_search(model, src, SearchOptions(beam=1, max_len_b=6, attention=True))
        else:
            results = beam_search(model, src, SearchOptions(beam=beam, max_len_b=6, attention=True))
        for i, hyps in enumerate(results):
            hyp = hyps[0]
            assert hyp.attention is not None
            assert len(hyp.attention) == len(hyp.tokens)
            if not hyp.tokens:
                continue
            got = torch.tensor(hyp.attention)
            expected = teacher_forced_attention(model, src[i : i + 1], hyp.tokens)
            real = int((src[i] != PAD_ID).sum())
            assert torch.allclose(got[:, :real], expected[:, :real], atol=1e-5)
            assert torch.all(got[:, real:] == 0)  # padding receives no attention
            assert torch.allclose(got.sum(dim=1), torch.ones(len(hyp.tokens)), atol=1e-5)


def test_keeping_attention_does_not_change_the_search(model) -> None:
    src = sources()
    plain = beam_search(model, src, SearchOptions(beam=3, max_len_b=6))
    kept = beam_search(model, src, SearchOptions(beam=3, max_len_b=6, attention=True))
    for a, b in zip(plain, kept):
        assert a[0].tokens == b[0].tokens
        assert a[0].score == pytest.approx(b[0].score, abs=1e-5)
        assert a[0].attention is None
