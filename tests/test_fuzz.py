"""Random Unicode and random bytes through tokenizer, corpus reading, prepare and translate:
everything either works or raises a user-facing TfmError, never anything else."""

from __future__ import annotations

import random
import unicodedata
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tfm.checkpoint import save_model_dir
from tfm.config import ModelConfig, SearchOptions
from tfm.data.corpus import CorpusSpec, iter_pairs
from tfm.data.prepare import prepare
from tfm.data.text import normalize_text
from tfm.data.tokenizer import (
    UNK_ID,
    Vocabularies,
    decode,
    encode_batch,
    save_tokenizer,
    train_tokenizer,
)
from tfm.decoding.search import Hypothesis
from tfm.decoding.torch_engine import TorchTranslator
from tfm.decoding.translator import Translator
from tfm.errors import TfmError
from tfm.model import Transformer
from tfm.model_info import ModelInfo

SETTINGS = settings(max_examples=60, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture])
SENTENCES = ["Der Hund läuft über die Straße.", "A man reads a book 📚 in the café.",
             "Příliš žluťoučký kůň úpěl ďábelské ódy.", "日本語のテキストです。",
             "Numbers: 42, 3.14!"]


@pytest.fixture(scope="module")
def tokenizer():
    return train_tokenizer(SENTENCES * 5, vocab_size=300)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory, tokenizer) -> Path:
    """A model with random weights: enough to exercise every code path of translation."""
    directory = tmp_path_factory.mktemp("fuzz") / "model"
    vocab = tokenizer.get_vocab_size()
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2,
                         encoder_layers=1, decoder_layers=1, d_ff=32, max_positions=64)
    save_model_dir(directory, Transformer(config), tokenizer, ModelInfo(config))
    return directory


@SETTINGS
@given(st.text())
def test_any_text_encodes_without_unknowns_and_decodes_back(tokenizer, text: str) -> None:
    clean = normalize_text(text)
    ids = encode_batch(tokenizer, [clean])[0]
    assert UNK_ID not in ids
    assert decode(tokenizer, ids) == unicodedata.normalize("NFC", clean).strip()


def corpus_lines(data: bytes) -> list[str] | None:
    """The lines a corpus file of ``data`` holds as tfm.data.corpus documents its text files
    (strict UTF-8, a BOM at the start dropped, "\n" and "\r\n" endings removed), or None
    where it must be refused (empty, or not UTF-8)."""
    if not data:
        return None
    lines = data.split(b"\n")
    if data.endswith(b"\n"):
        lines.pop()
    lines[0] = lines[0].removeprefix(b"\xef\xbb\xbf")
    try:
        return [line.removesuffix(b"\r").decode("utf-8") for line in lines]
    except UnicodeDecodeError:
        return None


# Random bytes, and text as UTF-8 (a line or a few, with either ending): most of these are
# corpora that must be read.
CORPUS_BYTES = st.one_of(st.binary(max_size=300), st.lists(st.text(max_size=30), max_size=4)
                         .flatmap(lambda lines: st.sampled_from(["\n", "\r\n"]).map(
                             lambda end: "".join(line + end for line in lines).encode())))


@SETTINGS
@given(CORPUS_BYTES, CORPUS_BYTES)
@example(b"a\nb\n", "\ufeffc\r\nd".encode())
def test_any_bytes_as_a_corpus_read_or_refuse_cleanly(tmp_path: Path, src: bytes,
                                                      tgt: bytes) -> None:
    (tmp_path / "c.en").write_bytes(src)
    (tmp_path / "c.de").write_bytes(tgt)
    src_lines, tgt_lines = corpus_lines(src), corpus_lines(tgt)
    valid = None not in (src_lines, tgt_lines) and len(src_lines) == len(tgt_lines)
    try:
        pairs = list(iter_pairs(CorpusSpec((str(tmp_path / "c.en"), str(tmp_path / "c.de")))))
    except TfmError:
        assert not valid  # refused only what is not an aligned pair of UTF-8 text files
        return
    assert valid and pairs == list(zip(src_lines, tgt_lines))


@settings(max_examples=15, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.tuples(st.text(max_size=40), st.text(max_size=40)), min_size=1,
                max_size=20), st.booleans())
def test_prepare_takes_any_unicode_pairs_or_refuses_cleanly(tmp_path_factory, tokenizer,
                                                            pairs, with_a_good_pair) -> None:
    root = tmp_path_factory.mktemp("prep")
    # One sentence a line: line breaks inside a sentence would split it, as in any text corpus.
    lines = [(s.replace("\n", " ").replace("\r", " "), t.replace("\n", " ").replace("\r", " "))
             for s, t in pairs]
    if with_a_good_pair:  # one pair that cleaning keeps: the corpus must be taken
        lines.insert(len(lines) // 2, (SENTENCES[1], SENTENCES[0]))
    (root / "c.en").write_text("".join(s + "\n" for s, _ in lines), encoding="utf-8")
    (root / "c.de").write_text("".join(t + "\n" for _, t in lines), encoding="utf-8")
    save_tokenizer(tokenizer, root / "tok.json")
    try:
        report = prepare(CorpusSpec((str(root / "c.en"), str(root / "c.de"))), root / "tok.json",
                         root / "data")
    except TfmError:
        assert not with_a_good_pair
        return
    split = report.splits["train"]
    assert split.kept + sum(split.dropped.values()) == split.read == len(lines)
    assert split.kept >= with_a_good_pair


@pytest.fixture(scope="module")
def translator(model_dir: Path) -> TorchTranslator:
    return TorchTranslator(model_dir, "cpu")


# Any code point, lone surrogates included (a JSON "\ud800" escape decodes to one).
ANY_TEXT = st.text(alphabet=st.characters(exclude_categories=()), max_size=300)


@SETTINGS
@given(st.lists(ANY_TEXT, min_size=1, max_size=4), st.integers(1, 3))
def test_translate_any_unicode_gives_one_line_per_input(translator: TorchTranslator,
                                                        sentences: list[str], beam: int) -> None:
    # Outputs of at most 5 tokens: random weights never stop, and the length is not what is
    # tested here.
    results = translator.translate(sentences, SearchOptions(beam=beam, max_len_a=0.0,
                                                            max_len_b=5))
    assert len(results) == len(sentences)
    assert all("\n" not in r.text for r in results)


def test_lone_surrogates_are_read_as_the_replacement_character(translator) -> None:
    assert normalize_text("a\ud800b \udfff") == "a\ufffdb \ufffd"
    options = SearchOptions(beam=2, max_len_a=0.0, max_len_b=5)
    results = translator.translate(["Der Hund \ud83d läuft.", "\udc15"], options)
    assert [r.source for r in results] == ["Der Hund \ud83d läuft.", "\udc15"]
    assert all(r.text.encode("utf-8") for r in results)  # nothing unencodable comes out


def test_a_sentence_longer_than_the_model_accepts_is_truncated_not_fatal(model_dir) -> None:
    long = " ".join(random.Random(0).choice(["dog", "Straße", "📚"]) for _ in range(500))
    result = TorchTranslator(model_dir, "cpu").translate([long], SearchOptions(beam=2))[0]
    assert result.truncated


# Everything str.splitlines() breaks a line at, and some text to put between.
LINE_BREAKS = ["\n", "\r\n", "\r", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
               "\u2029"]
WORDS = ["dog", "Straße", "📚", "日本", " "]


class Scripted(Translator):
    """An engine that can generate anything: for each source, its own tokens, each hypothesis
    followed by the token ids ``extra`` (line-break bytes among them). The text it outputs is
    then known, so the test can say what translate() must make of it."""

    engine = "scripted"

    def __init__(self, tokenizer, extra: list[int]) -> None:
        self.vocabs = Vocabularies.shared(tokenizer)
        # marks no language and records none: a bilingual model
        self.info = SimpleNamespace(language_marking=None, src_lang=None, tgt_lang=None,
                                    directions=())
        self.max_source_tokens = 10_000  # no truncation
        self.extra = extra

    def search(self, batch: list[list[int]], options: SearchOptions) -> list[list[Hypothesis]]:
        return [[Hypothesis(ids[:-1] + self.extra, score=0.0, log_prob=0.0)] for ids in batch]


@settings(max_examples=40, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.text(max_size=30), min_size=1, max_size=6),
       st.lists(st.sampled_from(LINE_BREAKS + WORDS), max_size=6))
def test_every_input_line_gets_exactly_one_output_line(tokenizer, sentences: list[str],
                                                       generated: list[str]) -> None:
    extra = [i for ids in encode_batch(tokenizer, generated) for i in ids]
    results = Scripted(tokenizer, extra).translate(sentences, SearchOptions(beam=1))
    assert [r.source for r in results] == sentences  # one result per input, in input order
    output = "".join(r.text + "\n" for r in results)
    assert output.splitlines() == [r.text for r in results]
    for sentence, result in zip(sentences, results):
        text = normalize_text(sentence)
        if not text:  # an empty or blank line stays empty
            assert result.text == ""
            continue
        # What the engine generated, with each line break turned into a space, nothing more.
        decoded = decode(tokenizer, encode_batch(tokenizer, [text])[0] + extra)
        assert len(result.text) == len(decoded)
        assert result.text.split() == decoded.split()


def test_bf16_weights_translate_every_input(model_dir: Path) -> None:
    translator = TorchTranslator(model_dir, "cpu", precision="bf16")
    assert next(translator.model.parameters()).dtype == torch.bfloat16
    results = translator.translate(["Der Hund läuft.", "", "📚"], SearchOptions(beam=2))
    assert len(results) == 3 and results[1].text == ""
