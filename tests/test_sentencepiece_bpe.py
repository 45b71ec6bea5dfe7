"""tfm.data.sentencepiece on BPE SentencePiece models (M2M100's kind): the segmenter cuts text
exactly as ``SentencePieceProcessor.encode(text, out_type=str)`` does, on the training lines
and on unusual text, and ``Segmenter.encode`` gives the ids M2M100Tokenizer's lookup gives
(``vocab.get(piece, unk)``); what it cannot cut alike is refused in one line."""

from __future__ import annotations

import io
import itertools
import random
import struct
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models

from tfm.data.sentencepiece import (
    BPE,
    CONTROL,
    NORMAL,
    UNKNOWN,
    UNUSED,
    Segmenter,
    parse_spm,
    pieces,
    read_spm,
    segmenter,
)
from tfm.data.tokenizer import (
    SPECIAL_TOKENS,
    attach_segmenter,
    encode_batch,
    load_tokenizer,
    save_tokenizer,
    segmenter_of,
    tokenizer_from_json,
    tokenizer_to_json,
)
from tfm.errors import ModelError

spm = pytest.importorskip("sentencepiece")

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"

UNUSUAL = [
    # empty, spaces only, odd spaces
    "", " ", "    ", "\t", " \t\n ", "\u00a0", "\u3000", "\u2028\u2029",
    "  leading and trailing  ", "runs    of     spaces", "tab\tbetween", "new\nline\r\nend",
    "no\u00a0break", "ideographic\u3000space", "thin\u2009and\u202fnarrow",
    # control characters
    "\x00", "nul\x00inside", "bell\x07 and escape\x1b[31m", "del\x7f", "\x01\x02\x03",
    # zero-width and format characters
    "zero\u200bwidth", "\u200b", "join\u200dme", "\ufeffbyte order mark", "rtl\u202eoverride",
    "soft\u00adhyphen", "word\u2060joiner",
    # combining accents (NFD), compatibility forms
    "e\u0301te\u0301 a\u0300 la\u0300", "Cafe\u0301", "A\u0308pfel u\u0308ber", "ﬁne ligature",
    "①②③ Ⅻ ｆｕｌｌｗｉｄｔｈ", "x²",
    # scripts absent from the training data
    "中文文本", "日本語のテキスト", "한국어", "ζωή και жизнь", "עברית العربية",
    # emoji and emoji sequences
    "😀", "😀😀 smile", "👍🏽 👨\u200d👩\u200d👧\u200d👦 🏳️\u200d🌈", "🇩🇪🇫🇷", "a😀b",
    # unknown runs between known pieces, SentencePiece's own space sign, tags, specials
    "☃☃☃x☃", "Der ☃ Zug", "▁", "▁▁Zug", "Zug▁fährt", ">>fr<< Der Zug", ">>de<<", "<unk> </s>",
    # long repetitions
    "a" * 60, "ab" * 40, "Zug" * 25, "." * 30, "-=" * 20,
]


def demo_lines() -> list[str]:
    return [line for name in ("train.en", "train.de")
            for line in (DEMO / name).read_text(encoding="utf-8").splitlines()]


def train(model_type: str = "bpe", **options: object) -> bytes:
    model = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(demo_lines()), model_writer=model, model_type=model_type,
        normalization_rule_name="nmt_nfkc", minloglevel=2, **options)
    return model.getvalue()


@pytest.fixture(scope="module", params=[(300, 1.0), (1000, 0.9995)],
                ids=["300-pieces", "1000-pieces-coverage-0.9995"])
def bpe_model(request: pytest.FixtureRequest) -> bytes:
    size, coverage = request.param
    return train(vocab_size=size, character_coverage=coverage)


def test_the_segmenter_cuts_as_sentencepiece_does(bpe_model: bytes) -> None:
    sp = spm.SentencePieceProcessor(model_proto=bpe_model)
    model = read_spm(bpe_model, "bpe.model")
    assert model.model_type == BPE
    texts = demo_lines() + UNUSUAL
    got = pieces(segmenter(model), texts)
    for text, cut in zip(texts, got):
        assert cut == sp.encode(text, out_type=str), repr(text)


def test_unknown_characters_come_back_as_their_text_a_run_as_one_piece(bpe_model: bytes) -> None:
    """What SentencePiece's BPE returns for characters it does not know (and the vocabulary
    then maps to <unk>): each run of them, normalised, as one piece."""
    sp = spm.SentencePieceProcessor(model_proto=bpe_model)
    seg = segmenter(read_spm(bpe_model, "bpe.model"))
    for text, expected in (("☃", ["▁", "☃"]), ("☃☃☃x☃", ["▁", "☃☃☃", "x", "☃"]),
                           ("😀😀", ["▁", "😀😀"]), ("中文 ζ", ["▁", "中文", "▁", "ζ"])):
        assert sp.encode(text, out_type=str) == expected
        assert pieces(seg, [text]) == [expected]
    assert sp.encode("☃☃☃x☃") == [sp.piece_to_id("▁"), sp.unk_id(), sp.piece_to_id("x"),
                                  sp.unk_id()]


def test_short_texts_of_few_letters_are_cut_alike_exhaustively(bpe_model: bytes) -> None:
    """Every text of up to 7 characters of ``ein `` (where pieces made by different merges meet
    side by side, if anywhere)."""
    sp = spm.SentencePieceProcessor(model_proto=bpe_model)
    seg = segmenter(read_spm(bpe_model, "bpe.model"))
    texts = ["".join(t) for n in range(1, 8) for t in itertools.product("ein ", repeat=n)]
    assert pieces(seg, texts) == sp.encode(texts, out_type=str)


def vocabulary(piece_list: list[str]) -> Tokenizer:
    """A vocabulary as an imported model has one: tfm's special tokens, then the pieces, every
    seventh left out (so that pieces it lacks map to <unk>)."""
    entries = list(SPECIAL_TOKENS) + [p for i, p in enumerate(piece_list) if i % 7 != 3]
    return Tokenizer(models.WordLevel({p: i for i, p in enumerate(entries)}, unk_token="<unk>"))


def sp_pieces(data: bytes) -> list[str]:
    sp = spm.SentencePieceProcessor(model_proto=data)
    return [sp.id_to_piece(i) for i in range(sp.get_piece_size())
            if not (sp.is_control(i) or sp.is_unknown(i))]


def test_segmenter_encode_gives_the_ids_of_looking_the_pieces_up(bpe_model: bytes) -> None:
    sp = spm.SentencePieceProcessor(model_proto=bpe_model)
    vocab = vocabulary(sp_pieces(bpe_model))
    table, unk = vocab.get_vocab(), vocab.token_to_id("<unk>")
    texts = demo_lines() + UNUSUAL
    seg = Segmenter.from_bytes(bpe_model, "bpe.model")
    assert not seg.leading_tags  # M2M100Tokenizer has no rule for Marian's >>fr<<
    expected = [[table.get(p, unk) for p in sp.encode(t, out_type=str)] for t in texts]
    assert seg.encode(vocab, texts) == expected
    assert unk in expected[texts.index("☃☃☃x☃")]


def test_leading_tags_is_a_switch_and_survives_saving_as_the_model_type(
        bpe_model: bytes, tmp_path: Path) -> None:
    sp = spm.SentencePieceProcessor(model_proto=bpe_model)
    vocab = vocabulary([">>fr<<", *sp_pieces(bpe_model)])
    table, unk = vocab.get_vocab(), vocab.token_to_id("<unk>")
    text = ">>fr<< Der Zug fährt."
    cut = [table.get(p, unk) for p in sp.encode(text, out_type=str)]
    rest = [table.get(p, unk) for p in sp.encode(" Der Zug fährt.", out_type=str)]
    assert Segmenter.from_bytes(bpe_model, "m").encode(vocab, [text]) == [cut]
    marian_rule = Segmenter.from_bytes(bpe_model, "m", leading_tags=True)
    assert marian_rule.encode(vocab, [text]) == [[table[">>fr<<"], *rest]]
    assert cut != [table[">>fr<<"], *rest]

    # Saved and loaded again (a model directory, a worker process): the same cut.
    (tmp_path / "tokenizer.src.spm").write_bytes(bpe_model)
    save_tokenizer(vocab, tmp_path / "tokenizer.json")
    loaded = load_tokenizer(tmp_path / "tokenizer.json", tmp_path / "tokenizer.src.spm")
    again = tokenizer_from_json(tokenizer_to_json(attach_segmenter(vocab, bpe_model, "m")))
    for tok in (loaded, again):
        assert not segmenter_of(tok).leading_tags  # type: ignore[union-attr]
        assert encode_batch(tok, [text, "Der ☃ Zug"]) == [
            cut, [table.get(p, unk) for p in sp.encode("Der ☃ Zug", out_type=str)]]


def test_a_unigram_model_keeps_marians_leading_tags() -> None:
    assert Segmenter.from_bytes(train("unigram", vocab_size=200), "u.spm").leading_tags


# --- refusals --------------------------------------------------------------------------------

def test_a_bpe_model_with_byte_fallback_is_refused_in_one_line() -> None:
    data = train(vocab_size=400, byte_fallback=True)
    with pytest.raises(ModelError, match="byte fallback") as e:
        read_spm(data, "fallback.model")
    assert "\n" not in str(e.value) and str(e.value).startswith("fallback.model: ")


def _key(number: int, wire: int) -> bytes:
    return _varint(number << 3 | wire)


def _varint(n: int) -> bytes:
    out = b""
    while True:
        out += bytes([n & 0x7F | (0x80 if n > 0x7F else 0)])
        n >>= 7
        if not n:
            return out


def _message(number: int, body: bytes) -> bytes:
    return _key(number, 2) + _varint(len(body)) + body


def crafted(normal: list[tuple[str, float]], extra: list[tuple[str, int]] = (),
            model_type: int = BPE) -> bytes:
    """A ModelProto written by hand: <unk>, <s>, </s>, ``extra`` (piece, type), then the normal
    pieces; no dummy prefix, no character map."""
    listed = [("<unk>", 0.0, UNKNOWN), ("<s>", 0.0, CONTROL), ("</s>", 0.0, CONTROL),
              *((p, 0.0, kind) for p, kind in extra), *((p, s, NORMAL) for p, s in normal)]
    out = b""
    for piece, score, kind in listed:
        out += _message(1, _message(1, piece.encode()) + _key(2, 5) + struct.pack("<f", score)
                        + _key(3, 0) + _varint(kind))
    out += _message(2, _key(3, 0) + _varint(model_type))
    return out + _message(3, _key(3, 0) + _varint(0))  # add_dummy_prefix: false


def test_crafted_models_of_distinct_scores_are_cut_alike() -> None:
    """Pieces of two letters, made by merges in random order, with random distinct scores (not
    ordered as training orders them): every text of up to 10 letters is cut alike, whichever
    split of a piece the text meets first."""
    rng = random.Random(5)
    for _ in range(8):
        made = {"a", "b"}
        for _ in range(rng.randint(5, 30)):
            piece = rng.choice(sorted(made)) + rng.choice(sorted(made))
            if len(piece) <= 7:
                made.add(piece)
        ordered = sorted(made)
        scores = rng.sample(range(3 * len(ordered)), len(ordered))
        data = crafted([(p, -float(s)) for p, s in zip(ordered, scores)])
        sp = spm.SentencePieceProcessor(model_proto=data)
        texts = ["".join(t) for n in range(1, 11) for t in itertools.product("ab", repeat=n)]
        assert pieces(segmenter(read_spm(data, "crafted")), texts) == sp.encode(
            texts, out_type=str)


SINGLE = [("a", -1.0), ("b", -2.0), ("c", -3.0)]


@pytest.mark.parametrize(("data", "message"), [
    (crafted([*SINGLE, ("bc", -5.0), ("ab", -5.0)]), "of equal score"),
    (crafted(SINGLE, extra=[("ab", UNUSED)]), "unused pieces"),
    (crafted([("a", -1.0), ("b", -2.0), ("ad", -3.0)]), "not itself a piece"),
    (crafted(SINGLE, extra=[("x", CONTROL)]), "control or unknown piece of one character"),
    (crafted(SINGLE, model_type=3), "a word model"),
    (crafted(SINGLE, model_type=4), "a character model"),
], ids=["equal-scores", "unused", "character-not-a-piece", "one-character-control", "word",
        "character"])
def test_what_cannot_be_cut_alike_is_refused_in_one_line(data: bytes, message: str) -> None:
    spm.SentencePieceProcessor(model_proto=data)  # a model SentencePiece itself loads
    with pytest.raises(ModelError, match=message) as e:
        read_spm(data, "crafted.model")
    assert "\n" not in str(e.value) and "cannot be read exactly" in str(e.value)


def test_equal_scores_would_be_cut_otherwise() -> None:
    """Why they are refused: SentencePiece merges the leftmost pair of equal scores, tokenizers
    the pair of the lower rank."""
    data = crafted([*SINGLE, ("bc", -5.0), ("ab", -5.0)])
    sp = spm.SentencePieceProcessor(model_proto=data)
    assert sp.encode("abc", out_type=str) == ["ab", "c"]
    assert pieces(segmenter(parse_spm(data)), ["abc"]) == [["a", "bc"]]
