"""Specification of tfm.data.corpus: which corpus shapes are read, and how bad input is reported."""

from __future__ import annotations

import bz2
import gzip
import json
import lzma
import re
import shutil
from pathlib import Path

import pytest

from tfm.data.corpus import (
    CorpusSpec,
    corpus_fingerprint,
    iter_pairs,
    iter_texts,
    resolve_corpus,
)
from tfm.errors import DataError, UsageError

EN = ["Hello .", "A dog runs .", "Two men talk ."]
DE = ["Hallo .", "Ein Hund rennt .", "Zwei Männer reden ."]
PAIRS = list(zip(EN, DE))

COMPRESSORS = {"": lambda b: b, ".gz": gzip.compress, ".xz": lzma.compress, ".bz2": bz2.compress}


def write(path: Path, lines: list[str], ext: str = "") -> Path:
    """Write lines (newline-terminated, UTF-8) to path+ext, compressed according to ext."""
    target = path.with_name(path.name + ext)
    target.write_bytes(COMPRESSORS[ext]("".join(f"{line}\n" for line in lines).encode()))
    return target


def pairs(*paths: Path | str, **kwargs: str) -> list[tuple[str, str]]:
    return list(iter_pairs(CorpusSpec(tuple(str(p) for p in paths), **kwargs)))


# ---------------------------------------------------------------------------- plain text pairs


def test_two_plain_files_are_read_as_aligned_pairs(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "train.en", EN), write(tmp_path / "train.de", DE)
    assert pairs(src, tgt) == PAIRS
    resolved = resolve_corpus(CorpusSpec((str(src), str(tgt))))
    assert resolved.kind == "text"
    assert resolved.files == (src, tgt)
    assert resolved.description == "train.en + train.de"


@pytest.mark.parametrize("ext", [".gz", ".xz", ".bz2"])
def test_compressed_files_are_read_like_plain_ones(tmp_path: Path, ext: str) -> None:
    src, tgt = write(tmp_path / "train.en", EN, ext), write(tmp_path / "train.de", DE, ext)
    assert pairs(src, tgt) == PAIRS


def test_languages_are_inferred_from_the_suffix_before_compression(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "train.en", EN, ".gz"), write(tmp_path / "corpus.de", DE)
    resolved = resolve_corpus(CorpusSpec((str(src), str(tgt))))
    assert (resolved.src_lang, resolved.tgt_lang) == ("en", "de")
    assert resolved.description == "train.en.gz + corpus.de"


def test_explicit_languages_win_and_non_language_suffixes_are_ignored(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "a.txt", EN), write(tmp_path / "b.txt", DE)
    assert resolve_corpus(CorpusSpec((str(src), str(tgt)))).src_lang is None
    resolved = resolve_corpus(CorpusSpec((str(src), str(tgt)), src_lang="fr", tgt_lang="it"))
    assert (resolved.src_lang, resolved.tgt_lang) == ("fr", "it")


def test_iter_texts_yields_both_sides(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "train.en", EN), write(tmp_path / "train.de", DE)
    texts = list(iter_texts(CorpusSpec((str(src), str(tgt)))))
    assert texts == [t for pair in PAIRS for t in pair]


# ---------------------------------------------------------------------------- prefixes


def test_a_prefix_finds_the_files_of_both_languages(tmp_path: Path) -> None:
    write(tmp_path / "train.en", EN)
    write(tmp_path / "train.de", DE, ".gz")
    spec = CorpusSpec((str(tmp_path / "train"),), src_lang="en", tgt_lang="de")
    resolved = resolve_corpus(spec)
    assert resolved.kind == "text"
    assert [f.name for f in resolved.files] == ["train.en", "train.de.gz"]
    assert list(iter_pairs(spec)) == PAIRS


def test_a_prefix_without_languages_asks_for_them(tmp_path: Path) -> None:
    write(tmp_path / "train.en", EN)
    write(tmp_path / "train.de", DE)
    with pytest.raises(UsageError, match="--src-lang and --tgt-lang") as info:
        resolve_corpus(CorpusSpec((str(tmp_path / "train"),)))
    assert "train.de" in str(info.value)


def test_a_prefix_with_a_missing_language_lists_the_names_tried(tmp_path: Path) -> None:
    write(tmp_path / "train.en", EN)
    prefix = str(tmp_path / "train")
    with pytest.raises(DataError) as info:
        resolve_corpus(CorpusSpec((prefix,), src_lang="en", tgt_lang="fr"))
    message = str(info.value)
    for ext in ("", ".gz", ".xz", ".bz2"):
        assert f"{prefix}.fr{ext}" in message


# ---------------------------------------------------------------------------- TSV and JSONL


def test_tsv_lines_are_split_into_source_and_target(tmp_path: Path) -> None:
    path = write(tmp_path / "train.tsv", [f"{e}\t{d}" for e, d in PAIRS], ".gz")
    assert resolve_corpus(CorpusSpec((str(path),))).kind == "tsv"
    assert pairs(path) == PAIRS


@pytest.mark.parametrize("bad_line", ["only one column", "a\tb\tc"])
def test_tsv_line_without_exactly_two_columns_reports_file_and_line(
    tmp_path: Path, bad_line: str
) -> None:
    path = write(tmp_path / "train.tsv", ["a\tb", bad_line, "c\td"])
    with pytest.raises(DataError, match=r"train\.tsv:2: expected 2 tab-separated columns"):
        pairs(path)


def test_jsonl_flat_objects_are_read_by_language_key(tmp_path: Path) -> None:
    path = write(tmp_path / "train.jsonl", [json.dumps({"en": e, "de": d}) for e, d in PAIRS])
    assert pairs(path, src_lang="en", tgt_lang="de") == PAIRS
    assert pairs(path, src_lang="de", tgt_lang="en") == [(d, e) for e, d in PAIRS]


def test_jsonl_translation_layout_is_read(tmp_path: Path) -> None:
    lines = [json.dumps({"translation": {"en": e, "de": d}}) for e, d in PAIRS]
    path = write(tmp_path / "train.jsonl", lines, ".xz")
    assert pairs(path, src_lang="en", tgt_lang="de") == PAIRS


def test_jsonl_needs_languages(tmp_path: Path) -> None:
    path = write(tmp_path / "train.jsonl", [json.dumps({"en": "a", "de": "b"})])
    with pytest.raises(UsageError, match="--src-lang and --tgt-lang"):
        resolve_corpus(CorpusSpec((str(path),)))


def test_jsonl_missing_language_names_it_and_the_keys_present(tmp_path: Path) -> None:
    lines = [json.dumps({"translation": {"en": "a", "de": "b"}}),
             json.dumps({"translation": {"en": "a", "fr": "b"}})]
    path = write(tmp_path / "train.jsonl", lines)
    with pytest.raises(DataError, match=r"train\.jsonl:2: no 'de' text \(keys present: en, fr\)"):
        pairs(path, src_lang="en", tgt_lang="de")


def test_jsonl_bad_json_reports_file_and_line(tmp_path: Path) -> None:
    path = write(tmp_path / "train.jsonl", ['{"en": "a", "de": "b"}', '{"en": "a", "de": '])
    with pytest.raises(DataError, match=r"train\.jsonl:2: not valid JSON"):
        pairs(path, src_lang="en", tgt_lang="de")


# ---------------------------------------------------------------------------- line handling


def test_misaligned_files_report_both_line_counts(tmp_path: Path) -> None:
    src = write(tmp_path / "train.en", [f"s{i}" for i in range(10)], ".gz")
    tgt = write(tmp_path / "train.de", [f"t{i}" for i in range(7)], ".gz")
    with pytest.raises(DataError, match="train.en.gz has 10 lines but .*train.de.gz has 7: "
                                        "the files must be aligned line by line"):
        pairs(src, tgt)
    with pytest.raises(DataError, match="train.de.gz has 7 lines but .*train.en.gz has 10"):
        pairs(tgt, src)


def test_an_empty_file_is_reported(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "train.en", EN), write(tmp_path / "train.de", [])
    with pytest.raises(DataError, match=r"train\.de is empty"):
        pairs(src, tgt)


def test_a_missing_file_is_reported(tmp_path: Path) -> None:
    src = write(tmp_path / "train.en", EN)
    with pytest.raises(DataError, match=r"train\.de: no such file"):
        pairs(src, tmp_path / "train.de")


def test_a_directory_instead_of_a_file_is_a_data_error(tmp_path: Path) -> None:
    src = write(tmp_path / "train.en", EN)
    (tmp_path / "train.de").mkdir()
    with pytest.raises(DataError, match=r"train\.de is not a regular file"):
        pairs(src, tmp_path / "train.de")


def test_invalid_utf8_reports_file_line_column_and_byte(tmp_path: Path) -> None:
    src = write(tmp_path / "train.en", EN)
    tgt = tmp_path / "train.de"
    # "Grüße " is 6 characters but 8 bytes: the column counts characters.
    tgt.write_bytes(b"Hallo .\nGr\xc3\xbc\xc3\x9fe \xe4nner .\nx\n")
    with pytest.raises(DataError) as info:
        pairs(src, tgt)
    message = str(info.value)
    assert "train.de:2: not valid UTF-8 (byte 0xE4 at column 7)" in message
    assert "iconv" in message
    assert "\n" not in message


def test_a_byte_order_mark_is_dropped_and_crlf_stripped(tmp_path: Path) -> None:
    src = tmp_path / "train.en"
    src.write_bytes(b"\xef\xbb\xbfHello .\r\nBye .\r\n")
    tgt = tmp_path / "train.de"
    tgt.write_bytes(b"Hallo .\nTsch\xc3\xbcss .\r")
    assert pairs(src, tgt) == [("Hello .", "Hallo ."), ("Bye .", "Tschüss .")]


def test_inner_whitespace_and_carriage_returns_are_kept(tmp_path: Path) -> None:
    src = tmp_path / "train.en"
    src.write_bytes(b"  a\rb  \n")
    tgt = write(tmp_path / "train.de", ["\tx "])
    assert pairs(src, tgt) == [("  a\rb  ", "\tx ")]


def test_a_truncated_gzip_file_is_a_data_error(tmp_path: Path) -> None:
    src = write(tmp_path / "train.en", [f"line {i}" for i in range(2000)], ".gz")
    tgt = write(tmp_path / "train.de", [f"Zeile {i}" for i in range(2000)], ".gz")
    src.write_bytes(src.read_bytes()[: len(src.read_bytes()) // 2])
    with pytest.raises(DataError, match=r"train\.en\.gz: cannot decompress.*truncated"):
        pairs(src, tgt)


def test_a_single_plain_file_is_a_usage_error(tmp_path: Path) -> None:
    path = write(tmp_path / "train.en", EN)
    with pytest.raises(UsageError, match="two aligned files"):
        resolve_corpus(CorpusSpec((str(path),)))


# ---------------------------------------------------------------------------- HF datasets


def test_a_saved_dataset_folder_is_read(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    rows = {"translation": [{"en": e, "de": d} for e, d in PAIRS]}
    datasets.Dataset.from_dict(rows).save_to_disk(str(tmp_path / "ds"))
    spec = CorpusSpec((str(tmp_path / "ds"),), src_lang="en", tgt_lang="de")
    assert resolve_corpus(spec).kind == "hf"
    assert list(iter_pairs(spec)) == PAIRS


def test_a_saved_dataset_dict_uses_the_requested_split(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    dd = datasets.DatasetDict({
        "train": datasets.Dataset.from_dict({"en": EN, "de": DE, "id": [1, 2, 3]}),
        "validation": datasets.Dataset.from_dict({"en": ["v"], "de": ["w"], "id": [4]}),
    })
    dd.save_to_disk(str(tmp_path / "dd"))
    folder = str(tmp_path / "dd")
    assert pairs(folder, src_lang="en", tgt_lang="de") == PAIRS
    assert pairs(folder, src_lang="en", tgt_lang="de", split="validation") == [("v", "w")]
    with pytest.raises(DataError, match=r"no split 'test' \(available: train, validation\)"):
        pairs(folder, src_lang="en", tgt_lang="de", split="test")


def test_a_dataset_without_the_languages_lists_its_columns(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    datasets.Dataset.from_dict({"en": EN, "fr": DE}).save_to_disk(str(tmp_path / "ds"))
    with pytest.raises(DataError, match=r"columns: en, fr"):
        pairs(tmp_path / "ds", src_lang="en", tgt_lang="de")


def test_local_parquet_and_csv_files_are_read(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    ds = datasets.Dataset.from_dict({"de": DE, "en": EN})
    ds.to_parquet(str(tmp_path / "train.parquet"))
    ds.to_csv(str(tmp_path / "train.csv"), index=False)
    for name in ("train.parquet", "train.csv"):
        assert pairs(tmp_path / name, src_lang="en", tgt_lang="de") == PAIRS


def test_an_unloadable_hub_name_is_a_data_error(monkeypatch: pytest.MonkeyPatch) -> None:
    datasets = pytest.importorskip("datasets")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True, raising=False)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_OFFLINE", True, raising=False)
    spec = CorpusSpec(("no-such-user/no-such-corpus",), src_lang="en", tgt_lang="de")
    assert resolve_corpus(spec).files == ()
    with pytest.raises(DataError, match="cannot load dataset no-such-user/no-such-corpus from "
                                        r"the Hugging Face hub \(offline\? misspelled\?\): "):
        pairs(*spec.paths, src_lang="en", tgt_lang="de")


# ---------------------------------------------------------------------------- fingerprints


def test_fingerprint_is_stable_across_copies_and_changes_with_a_byte(tmp_path: Path) -> None:
    src, tgt = write(tmp_path / "train.en", EN, ".gz"), write(tmp_path / "train.de", DE)
    copy = tmp_path / "copy"
    copy.mkdir()
    for path in (src, tgt):
        shutil.copy(path, copy / path.name)
    original = corpus_fingerprint(CorpusSpec((str(src), str(tgt))))
    copied = corpus_fingerprint(CorpusSpec((str(copy / src.name), str(copy / tgt.name))))
    assert original == copied
    assert re.fullmatch(r"[0-9a-f]{64}", original)  # a sha256 hex digest
    data = bytearray(tgt.read_bytes())
    data[0] ^= 0x01
    tgt.write_bytes(bytes(data))
    assert corpus_fingerprint(CorpusSpec((str(src), str(tgt)))) != original


def test_fingerprint_depends_on_languages_and_hub_identity() -> None:
    hub = CorpusSpec(("wmt/wmt14",), src_lang="de", tgt_lang="en", hf_config="de-en")
    # The same identity gives the same fingerprint; another name or config another one.
    assert corpus_fingerprint(hub) == corpus_fingerprint(
        CorpusSpec(("wmt/wmt14",), src_lang="de", tgt_lang="en", hf_config="de-en"))
    assert corpus_fingerprint(hub) != corpus_fingerprint(
        CorpusSpec(("wmt/wmt16",), src_lang="de", tgt_lang="en", hf_config="de-en"))
    assert corpus_fingerprint(hub) != corpus_fingerprint(
        CorpusSpec(("wmt/wmt14",), src_lang="de", tgt_lang="en", hf_config="fr-en"))
    assert corpus_fingerprint(hub) != corpus_fingerprint(
        CorpusSpec(("wmt/wmt14",), src_lang="en", tgt_lang="de", hf_config="de-en"))
    assert corpus_fingerprint(hub) != corpus_fingerprint(
        CorpusSpec(("wmt/wmt14",), src_lang="de", tgt_lang="en", hf_config="de-en",
                   split="test"))
