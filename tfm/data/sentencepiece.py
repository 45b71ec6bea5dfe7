"""SentencePiece segmentation as MarianMT (OPUS-MT) tokenizes, without the sentencepiece
package: the imported models' tokenizers (tfm.interop.marian_import).

A MarianMT checkpoint tokenizes in two steps: a SentencePiece unigram model (source.spm for
the source, target.spm for the target) cuts the text into pieces, and vocab.json maps each
piece to the model's id (a piece it lacks, and the text of a run of characters the
SentencePiece model does not know, to ``<unk>``). The two steps cannot be one
``tokenizers.Tokenizer``: the ids are vocab.json's, one vocabulary for both languages, while
each language is cut by its own SentencePiece model, whose pieces are not all in vocab.json.
So tfm keeps them apart, as MarianTokenizer does:

* the vocabulary is an ordinary tfm tokenizer file (``tokenizer.json``: a WordLevel model of
  vocab.json's pieces under tfm's ids, and SentencePiece's decoder), which everything that maps
  ids to tokens or text reads as it reads any other;
* the segmenter of each side is the checkpoint's own ``.spm`` file, kept beside it
  (``tokenizer.src.spm``, ``tokenizer.tgt.spm``) and read here into a ``tokenizers`` unigram
  model with SentencePiece's normalisation: the precompiled character map, the removal of extra
  spaces, the dummy prefix ``▁``. ``tfm.data.tokenizer.encode_batch`` cuts a text with the
  segmenter and looks the pieces up in the vocabulary.

A leading language token (``>>fr<<``: text that starts with ``>>`` up to the first ``<<``) is
kept whole and looked up as one piece, as MarianTokenizer does, before the rest is cut.

What this module cannot reproduce exactly is refused by ``read_spm`` with one line: BPE, word
or character models, byte fallback, user-defined pieces, whitespace as a suffix.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

from tokenizers import Regex, Tokenizer, decoders, models, normalizers, pre_tokenizers

from tfm.data.language_marks import split_leading_tag
from tfm.errors import ModelError

SPACE = "\u2581"  # SentencePiece's visible space, "▁"
# Piece types of sentencepiece_model.proto.
NORMAL, UNKNOWN, CONTROL, USER_DEFINED, UNUSED, BYTE = 1, 2, 3, 4, 5, 6
# The unknown piece's text inside the segmenter, which no normalised text contains (the
# segmenter returns the text of a run of unknown characters, never this).
_UNK_IN_SEGMENTER = "\x00<unk>\x00"


@dataclass
class SpmModel:
    """What tfm reads of a SentencePiece ModelProto."""

    pieces: list[tuple[str, float, int]]  # (piece, score, type) in id order
    model_type: int = 1  # 1 unigram, 2 BPE, 3 word, 4 char
    byte_fallback: bool = False
    treat_whitespace_as_suffix: bool = False
    precompiled_charsmap: bytes = b""
    add_dummy_prefix: bool = True
    remove_extra_whitespaces: bool = True
    escape_whitespaces: bool = True
    normalization_rule: str = ""
    data: bytes = field(default=b"", repr=False)  # the file as read, written back on export


# --- a protobuf reader, just enough for ModelProto -------------------------------------------

def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    result = shift = 0
    while True:
        if pos >= len(buf):
            raise ValueError("truncated varint")
        byte = buf[pos]
        pos += 1
        result |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return result, pos
        shift += 7


def _fields(buf: bytes) -> list[tuple[int, int, object]]:
    """(field number, wire type, value) of one message; length-delimited values as bytes."""
    out: list[tuple[int, int, object]] = []
    pos = 0
    while pos < len(buf):
        key, pos = _varint(buf, pos)
        number, wire = key >> 3, key & 7
        value: object
        if wire == 0:
            value, pos = _varint(buf, pos)
        elif wire == 1:
            value, pos = buf[pos:pos + 8], pos + 8
        elif wire == 2:
            size, pos = _varint(buf, pos)
            value, pos = buf[pos:pos + size], pos + size
        elif wire == 5:
            value, pos = buf[pos:pos + 4], pos + 4
        else:
            raise ValueError(f"unsupported wire type {wire}")
        if pos > len(buf):
            raise ValueError("truncated message")
        out.append((number, wire, value))
    return out


def parse_spm(data: bytes) -> SpmModel:
    """A SentencePiece model file's pieces, trainer and normaliser settings (ValueError when it
    is not one)."""
    model = SpmModel(pieces=[], data=data)
    for number, wire, value in _fields(data):
        if number == 1 and wire == 2:  # SentencePiece
            piece, score, kind = "", 0.0, NORMAL
            for n, w, v in _fields(value):  # type: ignore[arg-type]
                if n == 1 and w == 2:
                    piece = v.decode("utf-8")  # type: ignore[union-attr]
                elif n == 2 and w == 5:
                    score = struct.unpack("<f", v)[0]  # type: ignore[arg-type]
                elif n == 3 and w == 0:
                    kind = v  # type: ignore[assignment]
            model.pieces.append((piece, score, kind))
        elif number == 2 and wire == 2:  # TrainerSpec
            for n, w, v in _fields(value):  # type: ignore[arg-type]
                if n == 3 and w == 0:
                    model.model_type = v  # type: ignore[assignment]
                elif n == 35 and w == 0:
                    model.byte_fallback = bool(v)
                elif n == 24 and w == 0:
                    model.treat_whitespace_as_suffix = bool(v)
        elif number == 3 and wire == 2:  # NormalizerSpec
            for n, w, v in _fields(value):  # type: ignore[arg-type]
                if n == 2 and w == 2:
                    model.precompiled_charsmap = bytes(v)  # type: ignore[arg-type]
                elif n == 3 and w == 0:
                    model.add_dummy_prefix = bool(v)
                elif n == 4 and w == 0:
                    model.remove_extra_whitespaces = bool(v)
                elif n == 5 and w == 0:
                    model.escape_whitespaces = bool(v)
                elif n == 6 and w == 2:
                    model.normalization_rule = v.decode("utf-8")  # type: ignore[union-attr]
    if not model.pieces:
        raise ValueError("no pieces")
    return model


def read_spm(data: bytes, name: str) -> SpmModel:
    """The SentencePiece model in ``data`` (the file ``name``), refused with one line when tfm
    cannot segment exactly as SentencePiece does."""
    try:
        model = parse_spm(data)
    except (ValueError, UnicodeDecodeError, struct.error) as e:
        raise ModelError(f"{name}: not a SentencePiece model ({e})") from e
    kinds = {kind for _, _, kind in model.pieces}
    problem = None
    if model.model_type != 1:
        kind = {2: "BPE", 3: "word", 4: "character"}.get(model.model_type, str(model.model_type))
        problem = f"a {kind} model (tfm reads unigram models, as OPUS-MT's are)"
    elif model.byte_fallback or BYTE in kinds:
        problem = "byte fallback"
    elif USER_DEFINED in kinds:
        problem = "user-defined pieces"
    elif model.treat_whitespace_as_suffix:
        problem = "whitespace as a suffix"
    elif not model.escape_whitespaces:
        problem = "unescaped whitespace"
    elif model.normalization_rule and not model.precompiled_charsmap:
        problem = "a normalisation rule without its precompiled character map"
    elif UNKNOWN not in kinds:
        problem = "no unknown piece"
    if problem is not None:
        raise ModelError(f"{name}: a SentencePiece model with {problem} cannot be read exactly "
                         "by tfm; it is refused rather than tokenized differently")
    return model


# --- the segmenter ---------------------------------------------------------------------------

def segmenter(model: SpmModel) -> Tokenizer:
    """A tokenizers unigram model that cuts text into ``model``'s pieces as SentencePiece's
    ``encode(text, out_type=str)`` does; a run of unknown characters comes back as its text."""
    normal = [(p, s) for p, s, kind in model.pieces if kind == NORMAL]
    # The unknown node scores min(normal scores) - 10 in both libraries; tokenizers takes the
    # minimum over every entry, so the unknown piece's own score must not lower it.
    lowest = min(s for _, s in normal)
    tok = Tokenizer(models.Unigram([(_UNK_IN_SEGMENTER, lowest), *normal], unk_id=0,
                                   byte_fallback=False))
    steps: list[normalizers.Normalizer] = []
    if model.precompiled_charsmap:
        steps.append(normalizers.Precompiled(model.precompiled_charsmap))
    if model.remove_extra_whitespaces:  # only spaces count, as in SentencePiece
        steps += [normalizers.Replace(Regex(r"\A +| +\z"), ""),
                  normalizers.Replace(Regex(" {2,}"), " ")]
    steps.append(normalizers.Replace(" ", SPACE))
    if model.add_dummy_prefix:
        # SentencePiece always adds the prefix; Metaspace not when the text starts with one.
        steps.append(normalizers.Replace(Regex(f"\\A{SPACE}"), SPACE * 2))
    tok.normalizer = normalizers.Sequence(steps)
    if model.add_dummy_prefix:
        tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement=SPACE, prepend_scheme="always",
                                                     split=False)
    return tok


def pieces(seg: Tokenizer, texts: list[str]) -> list[list[str]]:
    """The pieces of each text (tokenizers' Metaspace leaves an empty text empty)."""
    return [enc.tokens for enc in seg.encode_batch(texts, add_special_tokens=False)]


def vocabulary_decoder() -> decoders.Decoder:
    """SentencePiece's decoding of pieces: ``▁`` is a space, the first one dropped."""
    return decoders.Sequence([decoders.Replace(SPACE, " "), decoders.Fuse(),
                              decoders.Strip(content=" ", left=1, right=0)])


class Segmenter:
    """A side's SentencePiece model, attached to the tokenizer (the vocabulary) it cuts text
    for (tfm.data.tokenizer.attach_segmenter)."""

    def __init__(self, model: SpmModel) -> None:
        self.model = model
        self.tokenizer = segmenter(model)
        self._vocab: dict[str, int] | None = None

    @classmethod
    def from_bytes(cls, data: bytes, name: str) -> Segmenter:
        return cls(read_spm(data, name))

    def encode(self, vocab: Tokenizer, texts: list[str]) -> list[list[int]]:
        """The ids of ``texts`` in ``vocab``, as MarianTokenizer gives them (without ``</s>``):
        a leading language token whole, the rest cut into pieces, each piece (or run of
        unknown characters) looked up in the vocabulary, ``<unk>`` where it is not there."""
        if self._vocab is None:
            self._vocab = vocab.get_vocab()
        table = self._vocab
        unk = table["<unk>"]
        split = [split_leading_tag(text) for text in texts]
        out = []
        for (code, _), cut in zip(split, pieces(self.tokenizer, [rest for _, rest in split])):
            ids = [table.get(piece, unk) for piece in cut]
            out.append(ids if code is None else [table.get(code, unk), *ids])
        return out
