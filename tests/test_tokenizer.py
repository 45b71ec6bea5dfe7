"""Specification of tfm.data.tokenizer: byte-level BPE that round-trips any text, and the checks
made when a tokenizer file is loaded."""

from __future__ import annotations

import json
import unicodedata
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, trainers

from tfm.data.text import normalize_text
from tfm.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    LONGEST_WORD,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK_ID,
    cut_long_words,
    decode,
    decode_batch,
    encode_batch,
    load_tokenizer,
    lowercases,
    new_tokenizer,
    normalize_reference,
    save_tokenizer,
    text_normalizer,
    train_tokenizer,
)
from tfm.errors import ModelError

ROUND_TRIP = [
    "A man is walking his dog in the park .",
    "Grüße aus München: Die Straße ist groß, die Bäume sind grün.",
    "Ça va ? L'élève a préféré le café crème à Noël.",
    "Příliš žluťoučký kůň úpěl ďábelské ódy.",
    "I ❤️ pizza 🍕 and 👩‍👩‍👧 families 😀!",
    "東京は日本の首都です。",
    "我爱北京天安门",
    "안녕하세요 세계",
    "Привет, мир!",
    "مرحبا بالعالم",
    "In 2024, 3.5% of 1,000,000 = 35,000 (approx.) -- \"quoted\" [brackets] {braces} <tags> #@$&*",
    "ab",
    "x",
]


def ids_of(tok: Tokenizer, text: str) -> list[int]:
    return encode_batch(tok, [text])[0]


# ---------------------------------------------------------------------------- training


def test_special_tokens_have_fixed_ids_after_training(tokenizer: Tokenizer) -> None:
    assert (PAD_ID, UNK_ID, BOS_ID, EOS_ID) == (0, 1, 2, 3)
    assert SPECIAL_TOKENS == ["<pad>", "<unk>", "<s>", "</s>"]
    for i, token in enumerate(SPECIAL_TOKENS):
        assert tokenizer.token_to_id(token) == i
        assert tokenizer.id_to_token(i) == token


def test_the_vocabulary_is_not_larger_than_requested(
    sentence_pairs: list[tuple[str, str]],
) -> None:
    texts = [t for pair in sentence_pairs for t in pair]
    for size in (260, 300, 400):
        tok = train_tokenizer(texts, vocab_size=size, min_frequency=1)
        assert tok.get_vocab_size() <= size
    # The 256 bytes and the 4 special tokens are always there: more merges with a larger size.
    assert train_tokenizer(texts, vocab_size=400, min_frequency=1).get_vocab_size() > 300


def test_training_streams_from_a_generator_with_a_length_hint(
        sentence_pairs: list[tuple[str, str]]) -> None:
    texts = [t for pair in sentence_pairs for t in pair]
    tok = train_tokenizer(iter(texts), vocab_size=300, length=len(texts))
    assert tok.get_vocab_size() <= 300
    assert decode(tok, ids_of(tok, texts[0])) == texts[0]


def test_runs_longer_than_a_word_are_learnt_from_in_pieces() -> None:
    # BPE training time grows with the square of a word's length: a run of characters without
    # a space longer than LONGEST_WORD is cut into pieces of that length; text is otherwise
    # passed on as it is, spaces, tabs and sentences of scripts without spaces included.
    assert cut_long_words("The dog\tsleeps.") == "The dog\tsleeps."
    sentence = "我们今天去公园散步" * 20  # 180 characters without a space
    assert cut_long_words(sentence) == sentence
    assert cut_long_words("word " * 100) == "word " * 100
    cut = cut_long_words("base64: " + "x" * (2 * LONGEST_WORD + 5))
    assert [len(w) for w in cut.split(" ")] == [7, LONGEST_WORD, LONGEST_WORD, 5]
    assert cut.replace(" ", "") == ("base64: " + "x" * (2 * LONGEST_WORD + 5)).replace(" ", "")


def test_encode_batch_adds_no_special_tokens(
    tokenizer: Tokenizer, sentence_pairs: list[tuple[str, str]],
) -> None:
    for ids in encode_batch(tokenizer, [s for s, _ in sentence_pairs[:5]]):
        assert ids and min(ids) >= len(SPECIAL_TOKENS)


def test_training_learns_merges_beyond_single_bytes(tokenizer: Tokenizer) -> None:
    text = "A man is walking his dog in the park ."
    assert tokenizer.get_vocab_size() == 300  # 260 bytes and specials + 40 merges
    assert len(ids_of(tokenizer, text)) < len(text.encode())
    unseen = "qxzj"  # no merge was learnt for these letters: one token per byte
    assert len(ids_of(tokenizer, unseen)) == len(" " + unseen)


# ---------------------------------------------------------------------------- round trip


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_decode_gives_back_the_encoded_text(tokenizer: Tokenizer, text: str) -> None:
    assert decode(tokenizer, ids_of(tokenizer, text)) == text


@pytest.mark.parametrize("text", ROUND_TRIP)
def test_no_text_encodes_to_the_unknown_token(tokenizer: Tokenizer, text: str) -> None:
    ids = ids_of(tokenizer, text)
    assert UNK_ID not in ids
    assert all(len(SPECIAL_TOKENS) <= i < tokenizer.get_vocab_size() for i in ids)


def test_characters_never_seen_in_training_are_encoded_as_bytes(tokenizer: Tokenizer) -> None:
    text = "\u0000\u0007\uffff\U0010fffd ҈ 𝔘𝔫𝔦𝔠𝔬𝔡𝔢"
    ids = ids_of(tokenizer, text)
    assert UNK_ID not in ids
    assert decode(tokenizer, ids) == text


def test_text_is_nfc_normalised(tokenizer: Tokenizer) -> None:
    decomposed = "Gru\u0308\u00dfe, cafe\u0301"  # u + combining diaeresis, e + acute accent
    composed = unicodedata.normalize("NFC", decomposed)
    assert composed != decomposed
    assert ids_of(tokenizer, decomposed) == ids_of(tokenizer, composed)
    assert decode(tokenizer, ids_of(tokenizer, decomposed)) == composed


def test_decode_strips_outer_whitespace_but_keeps_inner_spacing(tokenizer: Tokenizer) -> None:
    assert decode(tokenizer, ids_of(tokenizer, "  Hallo Welt  ")) == "Hallo Welt"
    assert decode(tokenizer, ids_of(tokenizer, "Hallo  Welt\tund   mehr")) == (
        "Hallo  Welt\tund   mehr")


def test_text_before_tfm_own_tokenizer_is_normalised_by_normalize_text(
        tokenizer: Tokenizer) -> None:
    """tfm's byte-level BPE reads text as tfm.data.text.normalize_text leaves it, exactly (an
    imported model's SentencePiece segmenter does its own: tests/test_import_marian.py)."""
    assert text_normalizer(tokenizer) is normalize_text
    assert text_normalizer(tokenizer)(" zero\u200bwidth\x00\ttab ") == "zerowidth tab"


def test_the_empty_string_encodes_to_nothing(tokenizer: Tokenizer) -> None:
    assert ids_of(tokenizer, "") == []
    assert decode(tokenizer, []) == ""


def test_decode_drops_special_tokens(tokenizer: Tokenizer) -> None:
    text = "Der Hund fängt den Ball ."
    ids = ids_of(tokenizer, text)
    assert decode(tokenizer, [BOS_ID, *ids, EOS_ID, PAD_ID, PAD_ID]) == text
    assert decode(tokenizer, [UNK_ID, *ids]) == text


def test_decode_batch_matches_decode(tokenizer: Tokenizer) -> None:
    texts = ROUND_TRIP[:6]
    batch = [[BOS_ID, *ids, EOS_ID, PAD_ID] for ids in encode_batch(tokenizer, texts)]
    assert decode_batch(tokenizer, batch) == texts
    assert decode_batch(tokenizer, batch) == [decode(tokenizer, ids) for ids in batch]


def test_a_text_that_spells_a_special_token_is_encoded_as_text(tokenizer: Tokenizer,
                                                                tmp_path: Path) -> None:
    text = "Schreib <s> , </s> , <pad> oder <unk> ."
    save_tokenizer(tokenizer, tmp_path / "tok.json")
    for tok in (tokenizer, load_tokenizer(tmp_path / "tok.json")):
        ids = ids_of(tok, text)
        assert not set(ids) & {PAD_ID, UNK_ID, BOS_ID, EOS_ID}
        assert decode(tok, ids) == text


# ---------------------------------------------------------------------------- save and load


def test_save_then_load_gives_the_same_encodings(tokenizer: Tokenizer, tmp_path: Path) -> None:
    path = tmp_path / "sub" / "tokenizer.json"
    save_tokenizer(tokenizer, path)
    json.loads(path.read_text(encoding="utf-8"))  # the library's own JSON format
    loaded = load_tokenizer(path)
    assert loaded.get_vocab_size() == tokenizer.get_vocab_size()
    assert encode_batch(loaded, ROUND_TRIP) == encode_batch(tokenizer, ROUND_TRIP)
    assert [decode(loaded, ids) for ids in encode_batch(loaded, ROUND_TRIP)] == ROUND_TRIP


def test_load_accepts_a_string_path(tokenizer: Tokenizer, tmp_path: Path) -> None:
    save_tokenizer(tokenizer, tmp_path / "tok.json")
    assert load_tokenizer(str(tmp_path / "tok.json")).get_vocab_size() == (
        tokenizer.get_vocab_size())


def test_load_refuses_a_missing_file_and_names_it(tmp_path: Path) -> None:
    path = tmp_path / "missing-tokenizer.json"
    with pytest.raises(ModelError, match="no such tokenizer file") as info:
        load_tokenizer(path)
    assert str(path) in str(info.value)
    assert "train-tokenizer" in str(info.value)


def test_load_refuses_a_directory(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such tokenizer file"):
        load_tokenizer(tmp_path)


@pytest.mark.parametrize("content", [
    b"this is not json at all\n",
    b'{"version": "1.0", "model": ',  # truncated
    b'{"hello": "world"}',  # JSON, but not a tokenizer
    b"\xff\xfe\x00garbage",
    b"",
])
def test_load_refuses_a_file_that_is_not_a_tokenizer(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_bytes(content)
    with pytest.raises(ModelError, match="not a tokenizer file") as info:
        load_tokenizer(path)
    message = str(info.value)
    assert str(path) in message
    assert "\n" not in message


def test_load_refuses_special_tokens_at_other_ids(
    tmp_path: Path, sentence_pairs: list[tuple[str, str]],
) -> None:
    # A BPE tokenizer from the library directly, special tokens in another order.
    tok = new_tokenizer()
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>", "</s>", "<pad>", "<unk>"],
                                  show_progress=False)
    tok.train_from_iterator([s for pair in sentence_pairs for s in pair], trainer=trainer)
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(ModelError, match="special token <pad> must have id 0") as info:
        load_tokenizer(path)
    assert str(path) in str(info.value)
    assert "train-tokenizer" in str(info.value)


def test_load_refuses_a_tokenizer_without_special_tokens(tmp_path: Path) -> None:
    tok = Tokenizer(models.WordLevel({"hello": 0, "world": 1, "foo": 2, "bar": 3},
                                     unk_token="hello"))
    path = tmp_path / "tokenizer.json"
    tok.save(str(path))
    with pytest.raises(ModelError, match="special token <pad> must have id 0"):
        load_tokenizer(path)


def test_load_refuses_a_special_token_missing_after_the_first(tmp_path: Path) -> None:
    vocab = {"<pad>": 0, "<unk>": 1, "<s>": 2, "hello": 3, "</s>": 4}
    path = tmp_path / "tokenizer.json"
    Tokenizer(models.WordLevel(vocab, unk_token="<unk>")).save(str(path))
    with pytest.raises(ModelError, match="special token </s> must have id 3"):
        load_tokenizer(path)


def test_save_leaves_no_temporary_files(tokenizer: Tokenizer, tmp_path: Path) -> None:
    save_tokenizer(tokenizer, tmp_path / "tokenizer.json")
    save_tokenizer(tokenizer, tmp_path / "tokenizer.json")  # over an existing file
    assert [p.name for p in tmp_path.iterdir()] == ["tokenizer.json"]


# ---------------------------------------------------------------------------- lowercasing


def test_a_lowercasing_tokenizer_encodes_any_casing_as_the_lowercased_text(
        tmp_path: Path) -> None:
    tok = train_tokenizer(["Ein Mann fährt Fahrrad .", "Zwei Hunde im Schnee ."] * 20,
                          vocab_size=300, lowercase=True)
    assert lowercases(tok)
    assert ids_of(tok, "EIN MANN Fährt") == ids_of(tok, "ein mann fährt")
    assert decode(tok, ids_of(tok, "Zwei HUNDE, Ärger")) == "zwei hunde, ärger"
    save_tokenizer(tok, tmp_path / "lc.json")  # the normaliser travels in the file
    loaded = load_tokenizer(tmp_path / "lc.json")
    assert lowercases(loaded)
    assert decode(loaded, ids_of(loaded, "Grüße")) == "grüße"


def test_the_default_tokenizer_keeps_case(tokenizer: Tokenizer) -> None:
    assert not lowercases(tokenizer)
    assert decode(tokenizer, ids_of(tokenizer, "Ein Mann")) == "Ein Mann"


def test_references_are_normalised_as_the_tokenizer_normalises_its_input(
        tokenizer: Tokenizer) -> None:
    lower = new_tokenizer(lowercase=True)
    decomposed = "Gru\u0308\u00dfe"
    assert normalize_reference(lower, decomposed) == "grüße"
    assert normalize_reference(tokenizer, decomposed) == "Grüße"
