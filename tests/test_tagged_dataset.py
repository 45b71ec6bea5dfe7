"""`tfm align DATA --tag-augment SHARE`: a new prepared dataset whose drawn rows carry inline-tag
tokens around aligned spans, its tokenizer holding each tag as one token, its alignments moved."""

from __future__ import annotations

import hashlib
import json
import random
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import tfm
from test_alignment_guided import prepared_toy
from toy_languages import lexicon, write_corpus

from tfm.data.dataset import load_split, read_prepare_info
from tfm.data.tag_augment import (
    TAG_TOKENS,
    close_tag,
    draw_tags,
    empty_tag,
    open_tag,
    place_tags,
    row_rng,
    tag_row,
)
from tfm.data.tagged_dataset import augment_prepared
from tfm.data.tokenizer import load_vocabularies
from tfm.data.word_alignment import alignment_path, load_token_alignments

pytest.importorskip("eflomal")
SHARE = 0.3


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A toy aa -> cc dataset (cc reverses the word order), prepared, not yet aligned."""
    return prepared_toy(tmp_path_factory.mktemp("tags"), seed=3)


@pytest.fixture(scope="module")
def augmented(toy: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, str]:
    """(the aligned input, its augmented copy, a digest of the input taken before)."""
    refused = tfm("align", str(toy), "--tag-augment", str(SHARE), "-o",
                  str(toy.parent / "never"))
    assert refused.returncode != 0 and "run `tfm align" in refused.stderr
    assert len(refused.stderr.strip().splitlines()) == 1 and not (toy.parent / "never").exists()
    assert tfm("align", str(toy)).returncode == 0
    before = _digest(toy)
    output = tmp_path_factory.mktemp("out") / "data-tags"
    done = tfm("align", str(toy), "--tag-augment", str(SHARE), "--output", str(output))
    assert done.returncode == 0, done.stderr
    assert "rows tagged" in done.stderr
    return toy, output, before


def _digest(folder: Path) -> str:
    h = hashlib.sha256()
    for path in sorted(p for p in folder.rglob("*") if p.is_file()):
        h.update(path.relative_to(folder).as_posix().encode() + path.read_bytes())
    return h.hexdigest()


def _rows(folder: Path):
    split = load_split(folder, "train")
    return split, load_token_alignments(alignment_path(folder, "train"), len(split))


def test_each_tag_is_one_token_on_both_sides_and_the_vocabulary_grows(augmented) -> None:
    toy, output, _ = augmented
    old = load_vocabularies(toy / "tokenizer.json").src
    vocab = load_vocabularies(output / "tokenizer.json")
    assert vocab.src.get_vocab_size() == old.get_vocab_size() + len(TAG_TOKENS)
    for tag in TAG_TOKENS:
        for side in (vocab.src, vocab.tgt):
            encoded = side.encode(f"pata{tag}kiku", add_special_tokens=False)
            assert encoded.tokens.count(tag) == 1  # never cut, glued or not
            assert side.decode([side.token_to_id(tag)], skip_special_tokens=True) == tag
    assert read_prepare_info(output).inline_tags == list(TAG_TOKENS)


def test_only_drawn_rows_change_and_the_rest_are_bit_identical(augmented) -> None:
    toy, output, before = augmented
    assert _digest(toy) == before  # the input is left as it was
    (old, old_links), (new, new_links) = _rows(toy), _rows(output)
    tag_ids = set(range(old_vocab_size(toy), old_vocab_size(toy) + len(TAG_TOKENS)))
    tagged = 0
    for i in range(len(old)):
        drawn = row_rng(1, i).random() < SHARE
        has_tags = bool(tag_ids & set(new.src(i).tolist()))
        assert has_tags == bool(tag_ids & set(new.tgt(i).tolist()))
        if not has_tags:
            assert np.array_equal(new.src(i), old.src(i))
            assert np.array_equal(new.tgt(i), old.tgt(i))
            assert np.array_equal(new_links.row(i), old_links.row(i))
        assert drawn or not has_tags  # tags only in the drawn share
        tagged += has_tags
    assert 0.2 * len(old) < tagged <= 0.4 * len(old)
    valid_old, valid_new = load_split(toy, "valid"), load_split(output, "valid")
    assert np.array_equal(valid_old.src_values, valid_new.src_values)


def old_vocab_size(toy: Path) -> int:
    return load_vocabularies(toy / "tokenizer.json").src.get_vocab_size()


def test_tags_go_around_aligned_spans_and_the_alignments_follow(augmented) -> None:
    toy, output, _ = augmented
    (old, old_links), (new, new_links) = _rows(toy), _rows(output)
    vocab = load_vocabularies(output / "tokenizer.json").src
    concept = {w: c for lang in ("aa", "cc") for c, w in enumerate(lexicon(lang))}
    ids = {t: vocab.token_to_id(t) for t in TAG_TOKENS}
    agree = total = 0
    for i in range(len(old)):
        src, tgt = new.src(i).tolist(), new.tgt(i).tolist()
        if not set(ids.values()) & set(src):
            continue
        for n in range(1, 5):
            if ids[open_tag(n)] in src:
                inside = [_between(side, ids[open_tag(n)], ids[close_tag(n)], vocab)
                          for side in (src, tgt)]
                agree += {concept[w] for w in inside[0]} == {concept[w] for w in inside[1]}
                total += 1
            if ids[empty_tag(n)] in src:  # an empty tag follows the same word on each side
                words = [_word_before(side, ids[empty_tag(n)], vocab) for side in (src, tgt)]
                agree += concept[words[0]] == concept[words[1]]
                total += 1
        # the old links, moved past the tags, still join the same tokens
        kept = [(s, t) for s, t in new_links.row(i).tolist()
                if src[s] not in ids.values()]
        assert [(src[s], tgt[t]) for s, t in kept] == \
            [(int(old.src(i)[s]), int(old.tgt(i)[t])) for s, t in old_links.row(i).tolist()]
        tags = [(s, t) for s, t in new_links.row(i).tolist() if src[s] in ids.values()]
        assert all(src[s] == tgt[t] for s, t in tags)  # each tag aligned to its counterpart
    assert total > 50 and agree / total > 0.9


def _between(ids: list[int], open_id: int, close_id: int, vocab) -> list[str]:
    """The words between a tag pair (other tags left out)."""
    inside = ids[ids.index(open_id) + 1: ids.index(close_id)]
    return vocab.decode([i for i in inside if vocab.id_to_token(i) not in TAG_TOKENS]).split()


def _word_before(ids: list[int], tag_id: int, vocab) -> str:
    at = ids.index(tag_id)
    return vocab.decode([i for i in ids[:at] if i >= 4 and vocab.id_to_token(i)
                         not in TAG_TOKENS]).split()[-1]


def test_the_same_seed_gives_the_same_dataset_and_another_another(augmented,
                                                                  tmp_path: Path) -> None:
    toy, output, _ = augmented
    again = tmp_path / "again"
    augment_prepared(toy, again, SHARE, seed=1)
    files = ["train/data-00000-of-00001.arrow", "train.align.npz", "tokenizer.json"]
    for name in files:
        assert (again / name).read_bytes() == (output / name).read_bytes()
    other = tmp_path / "other"
    augment_prepared(toy, other, SHARE, seed=2)
    assert (other / files[0]).read_bytes() != (output / files[0]).read_bytes()


def test_what_cannot_work_is_refused_in_one_line(augmented, tmp_path: Path) -> None:
    toy, output, _ = augmented
    for args, words in [((str(toy), "--tag-augment", "0.3", "-o", str(output)), "exists"),
                        ((str(output), "--tag-augment", "0.3", "-o", str(tmp_path / "x")),
                         "tag-augmented already"),
                        ((str(toy), "--tag-augment", "0", "-o", str(tmp_path / "y")),
                         "(0, 1]"),
                        ((str(toy), "--output", str(tmp_path / "z")), "--tag-augment")]:
        result = tfm("align", *args)
        assert result.returncode != 0 and words in result.stderr, result.stderr
        assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert not any((tmp_path / n).exists() for n in "xyz")


def test_a_drawn_row_nests_its_tags_alike_on_both_sides() -> None:
    # four words aligned monotonically; two pairs and an empty tag, ranks decide the order
    words = [(0, 0), (1, 1), (2, 2), (3, 3)]
    src_words, tgt_words = [-1, 0, 1, 2, 3, -1], [0, 1, 2, 3]
    placed = place_tags([("pair", (0, 3), (0, 3)), ("pair", (1, 2), (1, 2)),
                         ("empty", (3, 4), (3, 4))], src_words, tgt_words)
    ids = {t: 100 + k for k, t in enumerate(TAG_TOKENS)}
    src, tgt, links = tag_row([7, 10, 11, 12, 13, 3], [10, 11, 12, 13],
                              [(1 + w, w) for w, _ in words], placed, ids)
    name = {v: k for k, v in ids.items()}
    shown = [name.get(i, str(i)) for i in src]
    assert shown == ["7", "<g1>", "10", "<g2>", "11", "</g2>", "12", "</g1>", "13", "<x1/>",
                     "3"]
    assert [name.get(i, str(i)) for i in tgt] == shown[1:-1]
    assert all(src[s] == tgt[t] for s, t in links)  # each link joins a token to its copy
    rng = random.Random(0)
    shapes = {tuple(d[0] for d in draw_tags(words, 4, rng)) for _ in range(200)}
    assert {("pair",), ("pair", "pair"), ("empty",)} <= shapes


# --- the model knows its tags ------------------------------------------------------------------

def test_the_inventory_round_trips_through_config_json_and_only_it_raises_the_format() -> None:
    from tfm.config import ModelConfig
    from tfm.model_info import INLINE_TAGS_FORMAT, ModelInfo

    plain = ModelInfo(model=ModelConfig()).to_json()
    assert "inline_tags" not in plain and plain["format_version"] < INLINE_TAGS_FORMAT
    tagged = ModelInfo(model=ModelConfig(), inline_tags=list(TAG_TOKENS)).to_json()
    assert tagged["format_version"] == INLINE_TAGS_FORMAT
    read = ModelInfo.from_json(json.loads(json.dumps(tagged)), "config.json")
    assert read.inline_tags == list(TAG_TOKENS)
    assert ModelInfo.from_json(plain, "config.json").inline_tags == []


def test_models_of_older_formats_still_load_without_tags(tmp_path: Path, tokenizer) -> None:
    from conftest import random_model_dir

    from tfm.model_info import read_model_info

    model = random_model_dir(tmp_path / "m", tokenizer)
    config = model / "config.json"
    for version, extra in [(1, {}), (6, {"alignment_layer": 0})]:
        data = json.loads(config.read_text())
        data["format_version"] = version
        data["model"].update(extra)
        config.write_text(json.dumps(data))
        assert read_model_info(model).inline_tags == []


def test_bad_inventory_in_config_json_is_refused_in_one_line() -> None:
    from tfm.config import ModelConfig
    from tfm.errors import ModelError
    from tfm.model_info import ModelInfo

    data = {**ModelInfo(model=ModelConfig()).to_json(), "inline_tags": "<g1>"}
    with pytest.raises(ModelError, match="config.json: invalid model config"):
        ModelInfo.from_json(data, "config.json")


def test_align_augment_train_translate_a_page_end_to_end(augmented, tmp_path: Path) -> None:
    _, output, _ = augmented
    model = tmp_path / "model"
    trained = tfm("train", "--data", str(output), "--output", str(model), "--preset", "tiny",
                  "--max-steps", "4", "--valid-every", "4", "--max-tokens", "512",
                  "--precision", "fp32", "--guided-alignment", "0.05")
    assert trained.returncode == 0, trained.stderr
    config = json.loads((model / "config.json").read_text())
    assert config["inline_tags"] == list(TAG_TOKENS) and config["format_version"] >= 7
    page = tmp_path / "x.html"
    page.write_text("<p>pa <b>ki <i>tu</i></b> ma<br>so.</p>\n", encoding="utf-8")
    done = tfm("translate", "--model", str(model), "--input", str(page), "--output",
               str(tmp_path / "out.html"))
    assert done.returncode == 0, done.stderr
    out = (tmp_path / "out.html").read_text(encoding="utf-8")
    for tag in ("<b>", "</b>", "<i>", "</i>", "<br>"):
        assert out.count(tag) == 1, out
    assert out.index("<b>") < out.index("<i>") < out.index("</i>") < out.index("</b>")
    assert not re.search(r"</?g\d|<x\d", out)  # no tag token is ever written


def test_separate_vocabularies_each_get_the_tags_at_ids_of_their_own(tmp_path: Path) -> None:
    prefix = write_corpus(tmp_path / "corpus", "train", 120, seed=5)
    for args in [("train-tokenizer", "--train", str(prefix), "-s", "aa", "-t", "cc",
                  "--vocab-size", "280", "--separate", "-o", str(tmp_path / "tok.json")),
                 ("prepare", "--train", str(prefix), "-s", "aa", "-t", "cc", "--tokenizer",
                  str(tmp_path / "tok.json"), "-o", str(tmp_path / "data")),
                 ("align", str(tmp_path / "data")),
                 ("align", str(tmp_path / "data"), "--tag-augment", "0.5")]:
        result = tfm(*args)
        assert result.returncode == 0, result.stderr
    vocabs = load_vocabularies(tmp_path / "data-tags" / "tokenizer.json")
    assert not vocabs.joint
    split = load_split(tmp_path / "data-tags", "train")
    both = 0
    for i in range(len(split)):
        src = [vocabs.src.id_to_token(int(t)) for t in split.src(i)]
        tgt = [vocabs.tgt.id_to_token(int(t)) for t in split.tgt(i)]
        tags = [t for t in src if t in TAG_TOKENS]
        assert sorted(tags) == sorted(t for t in tgt if t in TAG_TOKENS)
        both += bool(tags)
    assert both > 30
