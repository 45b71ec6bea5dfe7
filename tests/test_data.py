"""Specification of tfm.data: ``prepare`` cleans and tokenizes a corpus into a dataset directory
that ``load_split`` reads back; a second prepare of the same input is a no-op."""

from __future__ import annotations

import json
import shutil
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer

from tfm.data.corpus import CorpusSpec
from tfm.data.dataset import (
    PREPARE_FILE,
    PREPARE_VERSION,
    PrepareInfo,
    TokenizedSplit,
    load_split,
    read_prepare_info,
)
from tfm.data.language_marks import LanguageMarking
from tfm.data.prepare import CleanConfig, SplitReport, prepare
from tfm.data.text import normalize_text
from tfm.data.tokenizer import (
    EOS_ID,
    SPECIAL_TOKENS,
    decode,
    encode_batch,
    load_tokenizer,
    save_tokenizer,
    train_tokenizer,
)
from tfm.errors import DataError, ModelError
from tfm.layout import TOKENIZER_FILE

Pairs = list[tuple[str, str]]
NO_DROPS = {"empty": 0, "too long": 0, "length ratio": 0, "duplicate": 0}


def write_corpus(folder: Path, pairs: Pairs, name: str = "train") -> CorpusSpec:
    """``pairs`` as the aligned files ``folder/name.en`` and ``folder/name.de``."""
    folder.mkdir(parents=True, exist_ok=True)
    src, tgt = folder / f"{name}.en", folder / f"{name}.de"
    src.write_text("".join(f"{s}\n" for s, _ in pairs), encoding="utf-8")
    tgt.write_text("".join(f"{t}\n" for _, t in pairs), encoding="utf-8")
    return CorpusSpec((str(src), str(tgt)))


def spec_of(files: tuple[Path, Path]) -> CorpusSpec:
    return CorpusSpec(tuple(str(f) for f in files))


def n_tokens(tok: Tokenizer, text: str) -> int:
    return len(encode_batch(tok, [text])[0])


def decoded(tok: Tokenizer, split: TokenizedSplit) -> Pairs:
    return [(decode(tok, split.src(i)), decode(tok, split.tgt(i))) for i in range(len(split))]


def stats(directory: Path) -> dict[str, tuple[int, int]]:
    """(inode, mtime) of every file below ``directory``: changes if anything is rewritten."""
    return {str(p.relative_to(directory)): (p.stat().st_ino, p.stat().st_mtime_ns)
            for p in sorted(directory.rglob("*")) if p.is_file()}


def leftovers(parent: Path, name: str) -> list[str]:
    """Temporary work directories a prepare of ``parent/name`` may have left behind."""
    return [p.name for p in parent.iterdir() if p.name.startswith(f".{name}.")]


@pytest.fixture
def train(corpus: tuple[Path, Path]) -> CorpusSpec:
    return spec_of(corpus)


# ---------------------------------------------------------------------------- the dataset


def test_prepare_writes_splits_report_and_a_tokenizer_copy(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    valid = write_corpus(tmp_path / "corpus", sentence_pairs[:5], "valid")
    out = tmp_path / "data"
    report = prepare(train, tokenizer_path, out, valid=valid)

    assert report.output == str(out)
    assert report.up_to_date is False
    src_ids = encode_batch(tokenizer, [s for s, _ in sentence_pairs])
    tgt_ids = encode_batch(tokenizer, [t for _, t in sentence_pairs])
    assert report.splits["train"] == SplitReport(
        read=40, kept=40, dropped=NO_DROPS,
        src_tokens=sum(len(ids) + 1 for ids in src_ids),  # + EOS
        tgt_tokens=sum(len(ids) + 1 for ids in tgt_ids))  # + BOS/EOS
    assert report.splits["valid"].read == report.splits["valid"].kept == 5

    assert {"train", "valid", PREPARE_FILE, TOKENIZER_FILE} <= {p.name for p in out.iterdir()}
    info = read_prepare_info(out)
    assert info.to_json() == json.loads((out / PREPARE_FILE).read_text(encoding="utf-8"))
    assert info.prepare_version == PREPARE_VERSION
    assert (info.src_lang, info.tgt_lang) == ("en", "de")
    assert info.inputs == {"train": "train.en + train.de", "valid": "valid.en + valid.de"}
    assert info.clean == asdict(CleanConfig())
    assert info.splits == {name: asdict(r) for name, r in report.splits.items()}
    assert str(tmp_path) not in json.dumps(info.to_json())  # no absolute paths

    copy = load_tokenizer(out / TOKENIZER_FILE)
    texts = [t for pair in sentence_pairs[:5] for t in pair]
    assert encode_batch(copy, texts) == encode_batch(tokenizer, texts)
    assert leftovers(tmp_path, "data") == []


def test_split_rows_decode_back_to_the_corpus_in_order(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    split = load_split(out, "train")
    assert len(split) == len(sentence_pairs)
    assert decoded(tokenizer, split) == sentence_pairs
    assert split.src_text is None and split.tgt_text is None  # train keeps no text
    for i in range(len(split)):
        src, tgt = split.src(i), split.tgt(i)
        assert src[-1] == EOS_ID  # source rows end with EOS ...
        assert src[:-1].min() >= len(SPECIAL_TOKENS)  # ... and hold no other special token
        assert tgt.min() >= len(SPECIAL_TOKENS)  # target rows hold no special token at all
        assert list(src[:-1]) == encode_batch(tokenizer, [sentence_pairs[i][0]])[0]
    np.testing.assert_array_equal(split.src_lengths, np.diff(split.src_offsets))
    assert split.src_lengths.sum() == read_prepare_info(out).splits["train"]["src_tokens"]


def test_the_valid_split_keeps_the_cleaned_text(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
) -> None:
    valid = write_corpus(tmp_path / "v", [("A  dog\truns .", " Ein Hund\u00a0rennt . "),
                                          ("Hello .", "Hallo .")], "valid")
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out, valid=valid)
    split = load_split(out, "valid")
    assert split.src_text == ["A dog runs .", "Hello ."]
    assert split.tgt_text == ["Ein Hund rennt .", "Hallo ."]
    assert decoded(tokenizer, split) == list(zip(split.src_text, split.tgt_text))


def test_a_prepared_dataset_can_be_moved(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    prepare(train, tokenizer_path, tmp_path / "data")
    moved = tmp_path / "elsewhere" / "data"
    shutil.copytree(tmp_path / "data", moved)
    shutil.rmtree(tmp_path / "data")
    assert decoded(tokenizer, load_split(moved, "train")) == sentence_pairs


def test_a_missing_tokenizer_is_a_model_error(tmp_path: Path, train: CorpusSpec) -> None:
    with pytest.raises(ModelError, match="no such tokenizer file"):
        prepare(train, tmp_path / "nope.json", tmp_path / "data")
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------------------- cleaning


def test_whitespace_runs_become_one_space() -> None:
    assert normalize_text("  A\t\tdog  runs\u00a0\u2009fast .\u3000") == "A dog runs fast ."
    assert normalize_text(" \t\u00a0 ") == ""


def test_the_removed_and_spaced_characters_are_those_normalize_text_removes_and_spaces() -> None:
    from tfm.data.text import has_invisible, removed_and_spaced_characters

    removed, spaced = removed_and_spaced_characters()
    plane = range(0x10000)  # every whitespace and control character is in the first plane
    assert [c for c in plane if has_invisible(chr(c))] == [c for c in removed if c in plane]
    assert [c for c in plane if normalize_text(f"x{chr(c)}x") == "x x"] == \
        [c for c in spaced if c in plane]
    assert {0x0, 0x200B, 0xFEFF} <= set(removed) and {0x9, 0x20, 0xA0, 0x3000} <= set(spaced)


def test_empty_pairs_are_dropped_and_counted(
    tmp_path: Path, tokenizer_path: Path, tokenizer: Tokenizer, sentence_pairs: Pairs,
) -> None:
    empties = [("", "Hallo ."), ("Hello .", "   "), ("\t\u00a0", "Ein Hund ."), ("", "")]
    pairs = sentence_pairs[:3] + empties + sentence_pairs[3:6]
    report = prepare(write_corpus(tmp_path / "c", pairs), tokenizer_path, tmp_path / "data")
    assert report.splits["train"].read == 10
    assert report.splits["train"].kept == 6
    assert report.splits["train"].dropped == {**NO_DROPS, "empty": 4}
    assert decoded(tokenizer, load_split(tmp_path / "data", "train")) == sentence_pairs[:6]


def test_a_side_longer_than_max_length_is_dropped(
    tmp_path: Path, tokenizer_path: Path, tokenizer: Tokenizer, sentence_pairs: Pairs,
) -> None:
    limit = max(n_tokens(tokenizer, t) for pair in sentence_pairs for t in pair)
    long_src = ("The dog runs . " * 20).strip()
    long_tgt = ("Der Hund rennt . " * 20).strip()
    assert n_tokens(tokenizer, long_src) > limit and n_tokens(tokenizer, long_tgt) > limit
    exact = max(sentence_pairs, key=lambda p: max(n_tokens(tokenizer, t) for t in p))
    pairs = [*sentence_pairs, (long_src, long_tgt), (long_src, exact[1] + " " + exact[1])]
    report = prepare(write_corpus(tmp_path / "c", pairs), tokenizer_path, tmp_path / "data",
                     clean=CleanConfig(max_length=limit))
    assert report.splits["train"].read == 42
    assert report.splits["train"].kept == 40  # the longest pair (exactly max_length) is kept
    assert report.splits["train"].dropped == {**NO_DROPS, "too long": 2}


def test_a_wild_length_ratio_is_dropped(
    tmp_path: Path, tokenizer_path: Path, tokenizer: Tokenizer, sentence_pairs: Pairs,
) -> None:
    short, long = "Yes .", "Die Sonne scheint über den Bergen und die Kinder spielen im Garten ."
    assert (n_tokens(tokenizer, long) + 1) / (n_tokens(tokenizer, short) + 1) > 3.0
    pairs = [*sentence_pairs, (short, long), (long, short)]
    files = write_corpus(tmp_path / "c", pairs)
    report = prepare(files, tokenizer_path, tmp_path / "data")
    assert report.splits["train"].kept == 40
    assert report.splits["train"].dropped == {**NO_DROPS, "length ratio": 2}
    # A ratio of 0 disables the check.
    report = prepare(files, tokenizer_path, tmp_path / "data", clean=CleanConfig(max_ratio=0))
    assert report.splits["train"].kept == 42
    assert report.splits["train"].dropped == NO_DROPS


def test_repeated_pairs_are_dropped_only_with_dedup(
    tmp_path: Path, tokenizer_path: Path, tokenizer: Tokenizer, sentence_pairs: Pairs,
) -> None:
    a, b = sentence_pairs[0], sentence_pairs[1]
    same_text_other_spacing = (a[0].replace(" ", "  "), "\t" + a[1])
    other_target = (a[0], b[1])  # same source, different target: not a duplicate
    pairs = [a, b, a, same_text_other_spacing, other_target, b]
    files = write_corpus(tmp_path / "c", pairs)

    report = prepare(files, tokenizer_path, tmp_path / "data", clean=CleanConfig(dedup=True))
    assert report.splits["train"].read == 6
    assert report.splits["train"].kept == 3
    assert report.splits["train"].dropped == {**NO_DROPS, "duplicate": 3}
    assert decoded(tokenizer, load_split(tmp_path / "data", "train")) == [a, b, other_target]

    report = prepare(files, tokenizer_path, tmp_path / "data", clean=CleanConfig(dedup=False))
    assert report.splits["train"].kept == 6
    assert report.splits["train"].dropped == NO_DROPS


def test_all_cleaning_rules_together_give_exact_counts(
    tmp_path: Path, tokenizer_path: Path, tokenizer: Tokenizer, sentence_pairs: Pairs,
) -> None:
    long_src, long_tgt = ("The dog runs . " * 30).strip(), ("Der Hund rennt . " * 30).strip()
    short, wordy = "Yes .", "Die Sonne scheint über den Bergen und die Kinder spielen im Garten ."
    messy = (" A  dog\truns through the\u00a0snow . ", "Ein Hund  rennt durch den Schnee .")
    pairs = [*sentence_pairs, ("", "x"), (" ", " "), (long_src, long_tgt), (short, wordy),
             messy, sentence_pairs[0], sentence_pairs[0]]
    valid = write_corpus(tmp_path / "c", [messy, ("x", "")], "valid")
    report = prepare(write_corpus(tmp_path / "c", pairs), tokenizer_path, tmp_path / "data",
                     valid=valid, clean=CleanConfig(max_length=60, dedup=True))
    train = report.splits["train"]
    assert (train.read, train.kept) == (47, 40)
    assert train.dropped == {"empty": 2, "too long": 1, "length ratio": 1, "duplicate": 3}
    assert train.read == train.kept + sum(train.dropped.values())
    valid_report = report.splits["valid"]
    assert (valid_report.read, valid_report.kept) == (2, 1)
    assert valid_report.dropped == {**NO_DROPS, "empty": 1}
    assert load_split(tmp_path / "data", "valid").src_text == ["A dog runs through the snow ."]
    assert read_prepare_info(tmp_path / "data").splits["train"]["dropped"] == train.dropped


@pytest.mark.parametrize("dedup", [True, False], ids=["dedup", "keep-repeats"])
def test_worker_processes_prepare_exactly_what_one_process_prepares(
    tmp_path: Path, tokenizer_path: Path, sentence_pairs: Pairs, monkeypatch: pytest.MonkeyPatch,
    dedup: bool,
) -> None:
    import tfm.data.prepare

    monkeypatch.setattr(tfm.data.prepare, "_CHUNK", 7)  # several chunks, duplicates across chunks
    long_pair = (("The dog runs . " * 30).strip(), ("Der Hund rennt . " * 30).strip())
    pairs = [*sentence_pairs, ("", "x"), long_pair, ("A\u200b dog .", "Ein Hund ."),
             *sentence_pairs[:9], long_pair, ("Yes .", "Ja ,  ja , ja , ja , ja , ja , ja ."),
             ("Type </s> or <pad> .", "Tippe </s> oder <pad> .")]
    corpus = write_corpus(tmp_path / "c", pairs)
    valid = write_corpus(tmp_path / "c", pairs[35:50], "valid")
    clean = CleanConfig(max_length=60, max_ratio=2.0, dedup=dedup)
    one = prepare(corpus, tokenizer_path, tmp_path / "one", valid=valid, clean=clean)
    two = prepare(corpus, tokenizer_path, tmp_path / "two", valid=valid, clean=clean,
                  num_proc=2)
    assert one.splits == two.splits
    assert one.splits["train"].invisible_removed == 1
    assert one.splits["train"].dropped["duplicate"] == (10 if dedup else 0)
    for split in ("train", "valid"):
        a, b = load_split(tmp_path / "one", split), load_split(tmp_path / "two", split)
        assert np.array_equal(a.src_values, b.src_values)
        assert np.array_equal(a.tgt_offsets, b.tgt_offsets)
        assert a.tgt_text == b.tgt_text
        # "</s>" and "<pad>" in the text are text: the only special token is each source's EOS.
        assert np.count_nonzero(a.src_values < 4) == len(a) == np.count_nonzero(
            a.src_values == EOS_ID)
        assert np.count_nonzero(a.tgt_values < 4) == 0


def test_nothing_left_after_cleaning_is_a_data_error(
    tmp_path: Path, tokenizer_path: Path, sentence_pairs: Pairs,
) -> None:
    files = write_corpus(tmp_path / "c", sentence_pairs)
    with pytest.raises(DataError, match=r"train\.en \+ train\.de: no pair is left after "
                                        r"cleaning \(40 read\).*--max-length"):
        prepare(files, tokenizer_path, tmp_path / "data", clean=CleanConfig(max_length=2))
    empty = write_corpus(tmp_path / "e", [("", "a"), (" ", "")])
    with pytest.raises(DataError, match=r"no pair is left after cleaning \(2 read\)"):
        prepare(empty, tokenizer_path, tmp_path / "data")
    assert not (tmp_path / "data").exists()
    assert leftovers(tmp_path, "data") == []


# ---------------------------------------------------------------------------- up to date


def test_a_second_prepare_of_the_same_input_is_up_to_date_and_rewrites_nothing(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    out = tmp_path / "data"
    first = prepare(train, tokenizer_path, out)
    before = stats(out)
    assert any(name.endswith(".arrow") for name in before)
    second = prepare(train, tokenizer_path, out)
    assert second.up_to_date is True
    assert second.output == str(out)
    assert second.splits == first.splits
    assert stats(out) == before
    # A copy of the corpus elsewhere is the same input.
    copied = tmp_path / "copy"
    copied.mkdir()
    for path in train.paths:
        shutil.copy(path, copied)
    assert prepare(CorpusSpec((str(copied / "train.en"), str(copied / "train.de"))),
                   tokenizer_path, out).up_to_date is True
    assert stats(out) == before


def test_changing_one_byte_of_the_corpus_prepares_again(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    src = Path(train.paths[0])
    text = src.read_text(encoding="utf-8")
    assert text.startswith("A man is walking his dog")
    src.write_text(text.replace("his dog", "his dig", 1), encoding="utf-8")
    report = prepare(train, tokenizer_path, out)
    assert report.up_to_date is False
    first = decoded(tokenizer, load_split(out, "train"))[0]
    assert first[0] == "A man is walking his dig in the park ."
    assert prepare(train, tokenizer_path, out).up_to_date is True


def test_changing_an_option_or_the_tokenizer_prepares_again(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    report = prepare(train, tokenizer_path, out, clean=CleanConfig(max_length=100))
    assert report.up_to_date is False
    assert read_prepare_info(out).clean["max_length"] == 100
    assert prepare(train, tokenizer_path, out,
                   clean=CleanConfig(max_length=100)).up_to_date is True
    assert prepare(train, tokenizer_path, out).up_to_date is False  # back to the default

    other = train_tokenizer([t for pair in sentence_pairs for t in pair], vocab_size=280)
    save_tokenizer(other, tokenizer_path)
    assert prepare(train, tokenizer_path, out).up_to_date is False
    assert load_tokenizer(out / TOKENIZER_FILE).get_vocab_size() == other.get_vocab_size()


def test_adding_a_valid_split_prepares_again(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    valid = write_corpus(tmp_path / "v", sentence_pairs[:2], "valid")
    report = prepare(train, tokenizer_path, out, valid=valid)
    assert report.up_to_date is False
    assert len(load_split(out, "valid")) == 2


def test_reversing_the_direction_prepares_again(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    reverse = CorpusSpec((train.paths[1], train.paths[0]))
    assert prepare(reverse, tokenizer_path, out).up_to_date is False
    assert (read_prepare_info(out).src_lang, read_prepare_info(out).tgt_lang) == ("de", "en")
    assert decoded(tokenizer, load_split(out, "train")) == [(t, s) for s, t in sentence_pairs]


def test_force_prepares_again(tmp_path: Path, train: CorpusSpec, tokenizer_path: Path) -> None:
    out = tmp_path / "data"
    first = prepare(train, tokenizer_path, out)
    before = stats(out)
    report = prepare(train, tokenizer_path, out, force=True)
    assert report.up_to_date is False
    assert report.splits == first.splits
    assert stats(out)[PREPARE_FILE] != before[PREPARE_FILE]
    assert leftovers(tmp_path, "data") == []


def test_an_unreadable_prepare_json_is_prepared_over(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    (out / PREPARE_FILE).write_text("{ truncated", encoding="utf-8")
    report = prepare(train, tokenizer_path, out)
    assert report.up_to_date is False
    assert read_prepare_info(out).splits["train"]["kept"] == 40
    assert decoded(tokenizer, load_split(out, "train")) == sentence_pairs


def test_prepare_json_reads_back_typed_and_older_files_still_read(tmp_path: Path) -> None:
    """prepare.json is a PrepareInfo: the marking a LanguageMarking, the decoder starts tuples
    of ids, written and read back the same; a file of format 2 (before directions and
    markings) reads with those at their defaults; a newer format is refused in one line."""
    info = PrepareInfo(fingerprint="abc", splits={"train": {"kept": 3}}, directions=["en-de"],
                       language_marking=LanguageMarking("decoder_token"),
                       decoder_starts=[(1, 7)])
    (tmp_path / PREPARE_FILE).write_text(json.dumps(info.to_json()), encoding="utf-8")
    read = read_prepare_info(tmp_path)
    assert read == info and isinstance(read.language_marking, LanguageMarking)
    assert read.decoder_starts == [(1, 7)]
    old = {"prepare_version": 2, "fingerprint": "f", "src_lang": "en", "tgt_lang": "de",
           "inputs": {}, "clean": {}, "splits": {"train": {"kept": 1}}}
    (tmp_path / PREPARE_FILE).write_text(json.dumps(old), encoding="utf-8")
    read = read_prepare_info(tmp_path)
    assert (read.prepare_version, read.direction_names) == (2, ["en-de"])
    assert read.language_marking is None and read.decoder_starts is None
    newer = {**old, "prepare_version": PREPARE_VERSION + 1}
    (tmp_path / PREPARE_FILE).write_text(json.dumps(newer), encoding="utf-8")
    with pytest.raises(DataError, match=rf"prepare\.json: prepared-data format version "
                                        rf"{PREPARE_VERSION + 1} is newer than this tfm"):
        read_prepare_info(tmp_path)
    bad = {**old, "decoder_starts": [["x"]]}
    (tmp_path / PREPARE_FILE).write_text(json.dumps(bad), encoding="utf-8")
    with pytest.raises(DataError, match=r"prepare\.json: unreadable prepared dataset"):
        read_prepare_info(tmp_path)


def test_a_tokenizer_beside_a_model_config_tfm_cannot_read_is_refused(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    """tfm prepare reads an imported model's language marking from the config.json beside its
    tokenizer through read_model_info: a config of a newer format is refused naming it,
    not taken for a tokenizer without a model (it was, before: any error became None)."""
    model = tmp_path / "model"
    model.mkdir()
    shutil.copy(tokenizer_path, model / TOKENIZER_FILE)
    (model / "config.json").write_text(json.dumps({"format_version": 99, "model": {}}),
                                       encoding="utf-8")
    with pytest.raises(ModelError, match=r"config\.json: model format version 99 is newer"):
        prepare(train, model / TOKENIZER_FILE, tmp_path / "data")
    assert not (tmp_path / "data").exists()


# ---------------------------------------------------------------------------- failures


def test_a_failed_prepare_leaves_the_previous_dataset_intact(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    before = stats(out)
    misaligned = write_corpus(tmp_path / "bad", sentence_pairs)
    Path(misaligned.paths[1]).write_text("Nur eine Zeile .\n", encoding="utf-8")
    with pytest.raises(DataError, match="must be aligned line by line"):
        prepare(misaligned, tokenizer_path, out)
    assert stats(out) == before
    assert decoded(tokenizer, load_split(out, "train")) == sentence_pairs
    assert leftovers(tmp_path, "data") == []
    assert prepare(train, tokenizer_path, out).up_to_date is True


def test_an_interrupted_prepare_leaves_the_previous_dataset_intact(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, tokenizer: Tokenizer,
    sentence_pairs: Pairs, monkeypatch: pytest.MonkeyPatch,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    before = stats(out)

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr("tfm.data.prepare.save_vocabularies", interrupted)  # late: splits written
    with pytest.raises(KeyboardInterrupt):
        prepare(train, tokenizer_path, out, force=True)
    assert stats(out) == before
    assert decoded(tokenizer, load_split(out, "train")) == sentence_pairs
    assert leftovers(tmp_path, "data") == []


def test_a_failed_first_prepare_creates_no_output(
    tmp_path: Path, tokenizer_path: Path, sentence_pairs: Pairs,
) -> None:
    misaligned = write_corpus(tmp_path / "bad", sentence_pairs)
    Path(misaligned.paths[0]).write_text("Only one line .\n", encoding="utf-8")
    with pytest.raises(DataError, match="must be aligned line by line"):
        prepare(misaligned, tokenizer_path, tmp_path / "data")
    assert not (tmp_path / "data").exists()
    assert leftovers(tmp_path, "data") == []


def test_prepare_refuses_to_replace_a_directory_that_is_not_a_dataset(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    out = tmp_path / "my-files"
    out.mkdir()
    (out / "thesis.tex").write_text("precious", encoding="utf-8")
    with pytest.raises(DataError, match=r"my-files is a non-empty directory but not a prepared "
                                        r"dataset \(no prepare\.json\)"):
        prepare(train, tokenizer_path, out)
    assert [p.name for p in out.iterdir()] == ["thesis.tex"]
    assert leftovers(tmp_path, "my-files") == []


def test_prepare_refuses_an_output_that_is_a_file(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    out = tmp_path / "data"
    out.write_text("not a directory", encoding="utf-8")
    with pytest.raises(DataError, match=r"data exists and is not a directory"):
        prepare(train, tokenizer_path, out)
    assert out.read_text(encoding="utf-8") == "not a directory"


def test_prepare_fills_an_existing_empty_directory(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    out = tmp_path / "data"
    out.mkdir()
    assert prepare(train, tokenizer_path, out).splits["train"].kept == 40
    assert len(load_split(out, "train")) == 40


# ---------------------------------------------------------------------------- reading back


def test_reading_a_missing_directory_is_a_data_error(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-data"
    for read in (lambda: read_prepare_info(missing), lambda: load_split(missing, "train")):
        with pytest.raises(DataError, match=r"no-such-data: no such prepared dataset \(make one "
                                            r"with `tfm prepare`\)"):
            read()


def test_reading_a_directory_that_is_not_a_dataset_is_a_data_error(tmp_path: Path) -> None:
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "notes.txt").write_text("hello", encoding="utf-8")
    for read in (lambda: read_prepare_info(folder), lambda: load_split(folder, "train")):
        with pytest.raises(DataError, match=r"folder: not a prepared dataset \(no prepare\.json\); "
                                            r"make one with `tfm prepare`"):
            read()


def test_a_corrupt_prepare_json_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / PREPARE_FILE).write_text("{ not json", encoding="utf-8")
    with pytest.raises(DataError, match=r"prepare\.json: not valid JSON .*run `tfm prepare` again"):
        read_prepare_info(tmp_path)


def test_a_prepare_json_without_a_dataset_is_a_data_error(tmp_path: Path) -> None:
    (tmp_path / PREPARE_FILE).write_text("{}", encoding="utf-8")
    with pytest.raises(DataError, match=r"unreadable prepared dataset .*run `tfm prepare` again"):
        load_split(tmp_path, "train")


@pytest.mark.parametrize("damage", ["truncate", "empty", "remove"])
def test_a_damaged_dataset_is_a_data_error(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, damage: str,
) -> None:
    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    arrow = next((out / "train").glob("*.arrow"))
    if damage == "truncate":
        arrow.write_bytes(arrow.read_bytes()[:200])
    elif damage == "empty":
        arrow.write_bytes(b"")
    else:
        shutil.rmtree(out / "train")
    with pytest.raises(DataError, match=r"data: unreadable prepared dataset .*"
                                        r"run `tfm prepare` again"):
        load_split(out, "train")


def test_a_missing_split_is_a_data_error(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    prepare(train, tokenizer_path, tmp_path / "data")
    with pytest.raises(DataError, match=r"the prepared dataset has no 'valid' split"):
        load_split(tmp_path / "data", "valid")


def test_a_tokenized_split_slices_rows_by_offsets() -> None:
    split = TokenizedSplit(
        src_values=np.array([9, 3, 7, 8, 3, 5, 3], dtype=np.int32),
        src_offsets=np.array([0, 2, 5, 7]),
        tgt_values=np.array([4, 5, 6, 7], dtype=np.int32),
        tgt_offsets=np.array([0, 1, 1, 4]),
    )
    assert len(split) == 3
    assert list(split.src(1)) == [7, 8, 3]
    assert list(split.tgt(1)) == []
    assert list(split.src_lengths) == [2, 3, 2]
    assert list(split.tgt_lengths) == [1, 0, 3]


def test_rows_are_views_of_memory_mapped_files(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    prepare(train, tokenizer_path, tmp_path / "data")
    split = load_split(tmp_path / "data", "train")
    assert split.src_values.dtype == np.int32
    assert not split.src_values.flags.owndata  # a view of the Arrow buffer, not a copy


def test_a_split_reads_as_datasets_reads_it_also_from_several_shards(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path, sentence_pairs: Pairs,
) -> None:
    import datasets

    out = tmp_path / "data"
    prepare(train, tokenizer_path, out)
    whole = datasets.load_from_disk(str(out))["train"]
    # A large split is saved in several Arrow files (save_to_disk's max_shard_size): saved
    # here again in three, with datasets' own writer, its metadata kept.
    shards = tmp_path / "shards"
    shutil.copytree(out, shards)
    shutil.rmtree(shards / "train")
    datasets.DatasetDict({"train": whole}).save_to_disk(str(shards), num_shards={"train": 3})
    assert len(list((shards / "train").glob("*.arrow"))) == 3
    for directory in (out, shards):
        split = load_split(directory, "train")
        assert len(split) == len(sentence_pairs)
        for i, row in enumerate(whole):
            assert split.src(i).tolist() == row["src_ids"]
            assert split.tgt(i).tolist() == row["tgt_ids"]
        assert split.directions.tolist() == whole["direction"]


def test_reading_a_split_imports_neither_datasets_nor_pandas(
    tmp_path: Path, train: CorpusSpec, tokenizer_path: Path,
) -> None:
    import subprocess
    import sys

    # Most of a second of every `tfm train`'s start went to importing them.
    prepare(train, tokenizer_path, tmp_path / "data")
    code = ("import sys; from tfm.data.dataset import load_split; "
            f"split = load_split({str(tmp_path / 'data')!r}, 'train'); "
            "print(len(split), sorted({'datasets', 'pandas'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["40", "[]"]


def test_control_and_zero_width_characters_are_removed_and_counted(tmp_path, tokenizer_path):
    src = ["A\x00 dog\u200b runs.", "The cat\x07 sleeps.", "Plain text.", "Emoji 👨\u200d👩 ok."]
    tgt = ["Ein Hund läuft.", "Die Katze\ufeff schläft.", "Klartext.", "Emoji 👨\u200d👩 ok."]
    (tmp_path / "c.en").write_text("\n".join(src) + "\n", encoding="utf-8")
    (tmp_path / "c.de").write_text("\n".join(tgt) + "\n", encoding="utf-8")
    report = prepare(CorpusSpec((str(tmp_path / "c.en"), str(tmp_path / "c.de"))),
                     tokenizer_path, tmp_path / "out")
    assert report.splits["train"].invisible_removed == 2
    assert report.splits["train"].kept == 4
    assert normalize_text("A\x00 dog\u200b runs.") == "A dog runs."
    assert normalize_text("Emoji 👨\u200d👩") == "Emoji 👨\u200d👩"  # joiners are text
