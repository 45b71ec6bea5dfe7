"""`tfm align`: eflomal's word alignments of a corpus, symmetrised, mapped onto prepared tokens."""

from __future__ import annotations

import random
from pathlib import Path

import numpy as np
import pytest
from conftest import tfm
from toy_languages import lexicon, sentence, write_corpus

from tfm.data.dataset import load_split
from tfm.data.lexical_alignment import LEXICON_FILE, Lexicon, grow_diag_final
from tfm.data.tokenizer import load_vocabularies
from tfm.data.word_alignment import (
    alignment_path,
    eflomal_alignments,
    grow_diag_final_and,
    load_token_alignments,
    token_pairs,
    token_words,
    word_strings,
)
from tfm.errors import DataError, UsageError

pytest.importorskip("eflomal")


def _copy_like(n: int, reverse: bool) -> tuple[list[list[str]], list[list[str]]]:
    """A synthetic pair of languages whose word i translates word i (or, reversed, the
    mirror word): a target word is its source word with another first letter."""
    rng = random.Random(0)
    vocabulary = [f"w{i}" for i in range(40)]
    sources = [[rng.choice(vocabulary) for _ in range(rng.randint(3, 9))] for _ in range(n)]
    targets = [["x" + w[1:] for w in (reversed(s) if reverse else s)] for s in sources]
    return sources, [list(t) for t in targets]


@pytest.mark.parametrize("reverse", [False, True])
def test_eflomal_aligns_a_copy_like_pair_on_its_diagonal(reverse: bool) -> None:
    sources, targets = _copy_like(300, reverse)
    alignments = eflomal_alignments(sources, targets)
    expected = [[(i, len(s) - 1 - i if reverse else i) for i in range(len(s))] for s in sources]
    right = sum(sorted(a) == sorted(e) for a, e in zip(alignments, expected))
    assert right / len(sources) > 0.95


def test_grow_diag_final_and_keeps_the_intersection_and_grows_next_to_it() -> None:
    forward = [(0, 0), (1, 1), (1, 2)]  # source word 1 aligned to target words 1 and 2
    reverse = [(0, 0), (1, 1), (3, 3)]
    got = grow_diag_final_and(forward, reverse, 4, 4)
    # (0,0), (1,1): both directions; (1,2) next to (1,1) and aligns unaligned target word 2;
    # (3,3): only in one direction, but both its words unaligned (final-and).
    assert got == [(0, 0), (1, 1), (1, 2), (3, 3)]
    assert grow_diag_final_and([(0, 1)], [(1, 0)], 2, 2) == [(0, 1), (1, 0)]


def test_grow_diag_final_also_adds_union_links_with_one_unaligned_word() -> None:
    forward = [(0, 0), (1, 1), (2, 3)]
    reverse = [(0, 0), (1, 1), (1, 2), (2, 3)]
    # (1,2) grows next to (1,1); final-and would add nothing more, and neither does final here.
    assert grow_diag_final(forward, reverse, 3, 4) == [(0, 0), (1, 1), (1, 2), (2, 3)]
    # (0,2) in one direction only, next to no aligned point: its target word is unaligned,
    # its source word is not.
    assert grow_diag_final([(0, 0), (0, 2)], [(0, 0)], 1, 3) == [(0, 0), (0, 2)]
    assert grow_diag_final_and([(0, 0), (0, 2)], [(0, 0)], 1, 3) == [(0, 0)]
    # The final step keeps to the sentences' words.
    assert grow_diag_final([(0, 0), (0, 5)], [(0, 0)], 1, 3) == [(0, 0)]


def test_tokens_group_into_words_and_special_tokens_are_none() -> None:
    symbols = [">>de<<", "ĠThe", "Ġdo", "g", "s", ".", "</s>"]
    special = [True, False, False, False, False, False, True]
    words = token_words(symbols, special)
    assert words == [-1, 0, 1, 1, 1, 1, -1]
    assert word_strings(symbols, words) == ["The", "dogs."]
    # SentencePiece's mark, and a first word without a mark
    assert token_words(["Hal", "lo", "▁we", "lt"], [False] * 4) == [0, 0, 1, 1]


def test_word_alignments_map_onto_every_token_of_both_words() -> None:
    src_words = [-1, 0, 1, 1, -1]  # a tag, "The", "do"+"gs", EOS
    tgt_words = [0, 1, 1, 1]  # "Die", "Hu"+"n"+"de"
    assert token_pairs([(0, 0), (1, 1)], src_words, tgt_words) == [
        (1, 0), (2, 1), (2, 2), (2, 3), (3, 1), (3, 2), (3, 3)]
    assert token_pairs([(5, 0)], src_words, tgt_words) == []  # a word beyond: nothing


@pytest.fixture(scope="module")
def aligned_toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The toy aa-cc corpus (cc says the same words in reversed order) prepared and aligned
    through the command line."""
    root = tmp_path_factory.mktemp("align")
    prefix = write_corpus(root / "corpus", "train", 400, seed=1)
    steps = [("train-tokenizer", "--train", str(prefix), "-s", "aa", "-t", "cc", "--vocab-size",
              "300", "-o", str(root / "tok.json")),
             ("prepare", "--train", str(prefix), "-s", "aa", "-t", "cc", "--tokenizer",
              str(root / "tok.json"), "-o", str(root / "data")),
             ("align", str(root / "data"))]
    for args in steps:
        result = tfm(*args)
        assert result.returncode == 0, result.stderr
    return root / "data"


def test_tfm_align_stores_token_alignments_training_positions_can_read(
        aligned_toy: Path) -> None:
    split = load_split(aligned_toy, "train")
    stored = load_token_alignments(alignment_path(aligned_toy, "train"), len(split))
    vocab = load_vocabularies(aligned_toy / "tokenizer.json").src
    concept = {w: c for lang in ("aa", "cc") for c, w in enumerate(lexicon(lang))}
    right = total = 0
    for i in range(len(split)):
        src, tgt = split.src(i), split.tgt(i)
        pairs = stored.row(i)
        assert pairs.size and pairs[:, 0].max() < len(src) - 1  # never the source's EOS
        assert pairs[:, 1].max() < len(tgt)
        src_text = [_word_at(vocab, src[:-1], s) for s in pairs[:, 0]]
        tgt_text = [_word_at(vocab, tgt, t) for t in pairs[:, 1]]
        right += sum(concept[a] == concept[b] for a, b in zip(src_text, tgt_text))
        total += len(pairs)
    assert right / total > 0.9  # the same concept, though cc's order is reversed


def _word_at(vocab, ids: np.ndarray, position: int) -> str:
    """The whole word around token ``position`` of ``ids``."""
    symbols = [vocab.id_to_token(int(i)) for i in ids]
    words = token_words(symbols, [False] * len(symbols))
    return word_strings(symbols, words)[words[position]]


def test_alignments_of_another_split_size_are_refused(aligned_toy: Path, tmp_path: Path
                                                      ) -> None:
    with pytest.raises(DataError, match="tfm align"):
        load_token_alignments(alignment_path(aligned_toy, "train"), 3)
    with pytest.raises(UsageError, match="tfm align"):
        load_token_alignments(tmp_path / "none.align.npz", 3)


def test_tfm_align_also_counts_a_lexicon_that_aligns_new_sentences(aligned_toy: Path) -> None:
    """The lexicon beside the split (what `tfm train` copies into its model) aligns sentences
    it never saw, concept to concept, though cc says them in reversed order."""
    lexicon_file = aligned_toy / LEXICON_FILE
    assert lexicon_file.is_file()
    found = Lexicon.load(lexicon_file)
    rng = random.Random(7)
    right = total = 0
    for _ in range(20):
        concepts = rng.sample(range(len(lexicon("aa"))), rng.randint(3, 7))
        source, target = sentence("aa", concepts).split(), sentence("cc", concepts).split()
        for i, j in found.align(source, target):
            right += concepts[i] == concepts[len(concepts) - 1 - j]
            total += 1
    assert total >= 20 * 3 and right / total > 0.9
