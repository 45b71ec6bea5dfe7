"""The alignment lexicon: a corpus's word alignments counted, and an HMM over the counts that
aligns a sentence and its translation (tfm.data.lexical_alignment)."""

from __future__ import annotations

import gzip

import pytest

from tfm.data.lexical_alignment import LEXICON_FILE, Lexicon, key, load_lexicon
from tfm.errors import ModelError

# A small en-de corpus aligned by hand: the counts the lexicon learns from.
CORPUS = [
    ("The dog sleeps .", "Der Hund schläft .", [(0, 0), (1, 1), (2, 2), (3, 3)]),
    ("A dog runs .", "Ein Hund rennt .", [(0, 0), (1, 1), (2, 2), (3, 3)]),
    ("The cat sleeps in the garden .", "Die Katze schläft im Garten .",
     [(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4), (6, 5)]),
    ("A man runs .", "Ein Mann rennt .", [(0, 0), (1, 1), (2, 2), (3, 3)]),
    ("The man sleeps .", "Der Mann schläft ja .", [(0, 0), (1, 1), (2, 2), (3, 4)]),
    ("Yesterday the cat ran .", "Gestern ist die Katze gerannt .",
     [(0, 0), (1, 2), (2, 3), (3, 1), (3, 4), (4, 5)]),
    # German that says where first: the jumps of a reordering are counted too
    ("The cat sleeps in the garden .", "Im Garten schläft die Katze .",
     [(0, 3), (1, 4), (2, 2), (3, 0), (4, 0), (5, 1), (6, 5)]),
    ("A dog runs in the garden .", "Im Garten rennt ein Hund .",
     [(0, 3), (1, 4), (2, 2), (3, 0), (4, 0), (5, 1), (6, 5)]),
]


def counted() -> Lexicon:
    return Lexicon.count([s.split() for s, _, _ in CORPUS], [t.split() for _, t, _ in CORPUS],
                         [links for _, _, links in CORPUS])


def test_words_are_compared_in_lower_case_without_the_punctuation_at_their_edges():
    assert key("Garden.") == key("garden") == "garden"
    assert key("«Haus»,") == "haus"
    assert key("...") == "..."  # punctuation alone stays a word
    assert key("U.S.") == "u.s"


def test_each_word_goes_to_the_word_it_was_counted_with_whatever_the_order():
    # A sentence the corpus never had, German putting the place first: the lexicon follows
    # the words, not the positions.
    pairs = counted().align(["The", "man", "sleeps", "in", "the", "garden", "."],
                            ["Im", "Garten", "schläft", "der", "Mann", "."])
    assert pairs == [(0, 3), (1, 4), (2, 2), (3, 0), (4, 0), (5, 1), (6, 5)]


def test_a_word_the_corpus_never_saw_aligns_to_the_same_word():
    pairs = counted().align(["The", "dog", "sleeps", "in", "Berlin", "."],
                            ["Der", "Hund", "schläft", "in", "Berlin", "."])
    assert (4, 4) in pairs


def test_a_word_the_corpus_left_unlinked_stays_unlinked():
    pairs = counted().align(["The", "dog", "sleeps", "."], ["Der", "Hund", "schläft", "ja", "."])
    assert {(0, 0), (1, 1), (2, 2), (3, 4)} <= set(pairs)
    assert all(j != 3 for _, j in pairs)  # "ja"


def test_an_empty_side_aligns_nothing():
    assert counted().align([], ["Der", "Hund"]) == []
    assert counted().align(["The", "dog"], []) == []


def test_the_lexicon_saves_loads_and_aligns_the_same(tmp_path):
    lexicon = counted()
    lexicon.save(tmp_path / LEXICON_FILE)
    assert (tmp_path / LEXICON_FILE).read_bytes() == lexicon.to_bytes()  # no timestamp inside
    loaded = load_lexicon(tmp_path)
    sentence, translation = ["A", "cat", "sleeps", "."], ["Eine", "Katze", "schläft", "."]
    assert loaded.align(sentence, translation) == lexicon.align(sentence, translation)
    assert load_lexicon(tmp_path / "elsewhere") is None


@pytest.mark.parametrize("content", [b"not gzip", gzip.compress(b"{}", mtime=0),
                                     gzip.compress(b'{"format": 99}', mtime=0)],
                         ids=["not-gzip", "no-format", "another-format"])
def test_a_damaged_lexicon_is_refused_in_one_line(tmp_path, content):
    (tmp_path / LEXICON_FILE).write_bytes(content)
    with pytest.raises(ModelError, match=LEXICON_FILE):
        load_lexicon(tmp_path)
