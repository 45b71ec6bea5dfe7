"""Translation directions as tfm knows them: the corpora of a run config, the target-language
tags, and the sampling of directions by temperature or weights (tfm.data.directions,
tfm.data.sampling)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from toy_languages import write_corpus

from tfm.data.directions import (
    Direction,
    corpora_from_config,
    corpus_texts,
    tags_for,
    vocabulary_tags,
)
from tfm.data.language_marks import find_tag, tagged
from tfm.data.sampling import direction_probabilities, epoch_counts, epoch_rows
from tfm.data.tokenizer import encode_batch, lowercases, train_tokenizer
from tfm.errors import UsageError

# --- directions and their corpora ------------------------------------------------------------


def test_a_direction_is_written_src_dash_tgt() -> None:
    assert Direction.parse("en-de") == Direction("en", "de")
    assert Direction.parse("pt_BR-en").name == "pt_BR-en"
    for bad in ("en", "en-de-fr", "en-en", "-de", "e n-de"):
        with pytest.raises(UsageError):
            Direction.parse(bad)


def test_a_multi_way_corpus_gives_each_direction_listed(tmp_path: Path) -> None:
    prefix = write_corpus(tmp_path, "train", 5, seed=0)
    corpora = corpora_from_config([
        {"train": str(prefix), "valid": str(prefix), "directions": ["aa-bb", "bb-aa", "aa-cc"]},
        {"train": [str(prefix) + ".cc", str(prefix) + ".aa"], "src_lang": "cc",
         "tgt_lang": "aa"}])
    assert [d.name for d in corpora.directions] == ["aa-bb", "bb-aa", "aa-cc", "cc-aa"]
    assert corpora.items[0].train.src_lang == "aa" and corpora.items[0].valid is not None
    assert corpora.items[3].valid is None
    assert corpora.tags == [">>aa<<", ">>bb<<", ">>cc<<"]
    assert corpora.weights() is None


def test_each_text_of_a_multi_way_corpus_is_learnt_from_once(tmp_path: Path) -> None:
    prefix = write_corpus(tmp_path, "train", 4, seed=0)
    corpora = corpora_from_config([{"train": str(prefix),
                                    "directions": ["aa-bb", "bb-aa", "aa-cc", "cc-aa"]}])
    texts = list(corpus_texts(corpora))
    sides = [(tmp_path / f"train.{lang}").read_text().splitlines()
             for lang in ("aa", "bb", "cc")]
    expected = sides[0] + sides[1] + sides[2]
    assert sorted(texts) == sorted(expected)  # aa once, although three directions read it


@pytest.mark.parametrize(("entry", "message"), [
    ({"train": "x", "src_lang": "en", "tgt_lang": "de", "wieght": 2}, "did you mean weight"),
    ({"train": "x", "src_lang": "en"}, "give its languages"),
    ({"train": "x", "directions": ["en-de"], "src_lang": "en"}, "not both"),
    ({"train": "x", "directions": "en_de"}, "SRC-TGT"),
    ({"src_lang": "en", "tgt_lang": "de"}, "train: give a path"),
    ({"train": "x", "src_lang": "en", "tgt_lang": "de", "weight": 0}, "above 0"),
])
def test_a_corpus_entry_with_a_mistake_is_refused_in_one_line(entry: dict, message: str) -> None:
    with pytest.raises(UsageError, match=message) as caught:
        corpora_from_config([entry])
    assert "\n" not in str(caught.value) and "entry 1" in str(caught.value)


def test_weights_go_to_every_direction_or_none() -> None:
    both = [{"train": "x", "src_lang": "en", "tgt_lang": "de", "weight": 3},
            {"train": "y", "src_lang": "de", "tgt_lang": "en", "weight": 1}]
    assert corpora_from_config(both).weights() == [3.0, 1.0]
    with pytest.raises(UsageError, match="not for de-en"):
        corpora_from_config([both[0], {**both[1], "weight": None}])
    with pytest.raises(UsageError, match="weights 3 and 2"):
        corpora_from_config([*both, {**both[0], "train": "z", "weight": 2}])


# --- tags ------------------------------------------------------------------------------------


def test_tags_exist_only_where_there_are_several_target_languages() -> None:
    assert tags_for([Direction("en", "de")]) == []
    assert tags_for([Direction("de", "en"), Direction("fr", "en")]) == []  # many into one
    assert tags_for([Direction("en", "de"), Direction("en", "fr")]) == [">>de<<", ">>fr<<"]


@pytest.mark.parametrize("lowercase", [False, True])
def test_a_tag_is_one_token_never_split_or_lowercased(lowercase: bool) -> None:
    texts = ["the dog sleeps", "der Hund schläft", "le chien dort"] * 30
    tok = train_tokenizer(texts, vocab_size=300, lowercase=lowercase,
                          tags=[">>de<<", ">>fr<<"])
    assert vocabulary_tags(tok) == [">>de<<", ">>fr<<"] and lowercases(tok) == lowercase
    tag_id = tok.token_to_id(">>de<<")
    with_tag, plain = encode_batch(tok, [tagged("The dog", ">>de<<"), "The dog"])
    assert with_tag == [tag_id, *plain]  # the tag, then the sentence exactly as without it
    # Written in a text (where prepare and translate refuse it), it is still the one token.
    assert tag_id in encode_batch(tok, ["x>>de<<y"])[0]
    assert tok.token_to_id(">>DE<<") is None and tag_id not in encode_batch(tok, [">>DE<<"])[0]


def test_find_tag_finds_a_tag_anywhere() -> None:
    assert find_tag("a >>fr<< b") == ">>fr<<" and find_tag(">>pt_BR<<x") == ">>pt_BR<<"
    assert find_tag("a >> b << c") is None and find_tag("") is None
    assert tagged("", ">>de<<") == "" and tagged("x", None) == "x"


# --- sampling over directions ----------------------------------------------------------------


def test_temperature_1_is_proportional_and_a_large_one_near_uniform() -> None:
    sizes = [9000, 900, 100]
    assert np.allclose(direction_probabilities(sizes, 1.0), [0.9, 0.09, 0.01])
    p5 = direction_probabilities(sizes, 5.0)
    expected = np.array(sizes, dtype=float) ** 0.2
    assert np.allclose(p5, expected / expected.sum())
    assert p5[2] > 0.01 * 10 and np.isclose(p5.sum(), 1.0)  # the small direction drawn more
    assert np.allclose(direction_probabilities(sizes, 1e6), [1 / 3] * 3, atol=1e-4)


def test_weights_replace_the_temperature() -> None:
    assert np.allclose(direction_probabilities([10, 1000], 1.0, weights=[3, 1]), [0.75, 0.25])
    assert np.allclose(direction_probabilities([10, 0], 1.0, weights=[1, 1]), [1.0, 0.0])
    with pytest.raises(UsageError, match="above 0"):
        direction_probabilities([1, 2], 0.0)


def test_an_epoch_holds_each_direction_by_its_probability() -> None:
    directions = np.repeat([0, 1, 2], [600, 60, 40])
    sizes = [600, 60, 40]
    p = direction_probabilities(sizes, 5.0)
    counts = epoch_counts(sizes, p)
    assert counts.sum() == 700 and np.all(np.abs(counts - p * 700) < 1)
    rows = epoch_rows(directions, p, seed=1, epoch=0)
    assert rows is not None and len(rows) == 700
    assert np.array_equal(np.bincount(directions[rows], minlength=3), counts)
    # Upsampled: every pair of a small direction as often, give or take one.
    small = np.bincount(rows[directions[rows] == 2], minlength=700)[600 + 60:]
    assert small.max() - small.min() <= 1
    # A pure function of (data, probabilities, seed, epoch); other epochs draw other pairs.
    assert np.array_equal(rows, epoch_rows(directions, p, seed=1, epoch=0))
    assert not np.array_equal(rows, epoch_rows(directions, p, seed=1, epoch=1))


def test_temperature_1_reads_the_data_as_it_is() -> None:
    directions = np.repeat([0, 1], [500, 7])
    assert epoch_rows(directions, direction_probabilities([500, 7], 1.0), 1, 0) is None
    assert epoch_rows(np.zeros(9, dtype=np.int16), np.array([1.0]), 1, 3) is None
