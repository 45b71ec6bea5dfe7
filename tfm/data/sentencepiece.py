"""SentencePiece segmentation as MarianMT (OPUS-MT) and M2M100 tokenize, without the
sentencepiece package: the imported models' tokenizers (tfm.interop.marian_import,
tfm.interop.m2m100_import).

Such a checkpoint tokenizes in two steps: a SentencePiece model (a unigram one, source.spm and
target.spm, in MarianMT; one BPE model, sentencepiece.bpe.model, in M2M100) cuts the text into
pieces, and vocab.json maps each piece to the model's id (a piece it lacks, and the text of a
run of characters the SentencePiece model does not know, to ``<unk>``). The two steps cannot
be one ``tokenizers.Tokenizer``: the ids are vocab.json's, one vocabulary for both languages,
while a MarianMT model cuts each language with its own SentencePiece model, whose pieces are
not all in vocab.json. So tfm keeps them apart, as MarianTokenizer and M2M100Tokenizer do:

* the vocabulary is an ordinary tfm tokenizer file (``tokenizer.json``: a WordLevel model of
  vocab.json's pieces under tfm's ids, and SentencePiece's decoder), which everything that maps
  ids to tokens or text reads as it reads any other;
* the segmenter of each side is the checkpoint's own SentencePiece file, kept beside it
  (``tokenizer.src.spm``, ``tokenizer.tgt.spm``) and read here into a ``tokenizers`` model
  with SentencePiece's normalisation: the precompiled character map, the removal of extra
  spaces, the dummy prefix ``▁`` (SentencePiece normalises alike whatever the model type).
  ``tfm.data.tokenizer.encode_batch`` cuts a text with the segmenter and looks the pieces up
  in the vocabulary.

A unigram model becomes a ``tokenizers`` Unigram model of its pieces and scores. A BPE model
becomes a ``tokenizers`` BPE model of its normal pieces, with as merges every split of a piece
into two pieces, ranked by the merged piece's score (then id), as transformers'
SentencePieceExtractor derives them. SentencePiece merges, of the adjacent pairs whose joined
text is a piece, the pair of the highest-scoring piece, the leftmost of equals; tokenizers the
pair of the lowest rank, the leftmost of equals. The two agree where no two pieces made by
merges share a score (``read_spm`` refuses a model where two do; training gives each piece its
own). One difference remains in principle: SentencePiece ranks the splits of one piece alike,
tokenizers needs one rank per split (here: the shortest left part first), so the two could
differ only where two splits of one piece compete in one text. None does in exhaustive
comparisons of short texts over trained models and over models of random distinct scores,
with either order of the splits (tests/test_sentencepiece_bpe.py repeats some). Every
character of a BPE piece must itself be a piece, as in trained models: SentencePiece would
join unknown characters into a piece, tokenizers cannot.

Characters the model does not know come back as their text, a run of them as one piece, as
SentencePiece's ``encode(text, out_type=str)`` returns them: the unigram model scores such a
run as one unknown node; SentencePiece's BPE keeps each unknown character alone and then joins
adjacent ones, as tokenizers' BPE does with ``fuse_unk``, which names the run by its unknown
token, whose text ``pieces`` then takes from the normalised text.

MarianMT's leading language token (``>>fr<<``: text that starts with ``>>`` up to the first
``<<``) is kept whole and looked up as one piece, as MarianTokenizer does, before the rest is
cut; M2M100Tokenizer has no such rule. A ``Segmenter`` follows the first rule for a unigram
model and not for a BPE one unless told otherwise (``leading_tags``): the model type, in the
file kept beside the tokenizer, carries the choice through saving and loading.

What this module cannot reproduce exactly is refused by ``read_spm`` with one line: word or
character models, byte fallback, user-defined pieces, whitespace as a suffix; in BPE models,
unused pieces, pieces that merges make sharing a score, characters of pieces that are not
pieces, a control or unknown piece of one character.
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
# Model types of its TrainerSpec.
UNIGRAM, BPE = 1, 2
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
    if model.model_type not in (UNIGRAM, BPE):
        kind = {3: "word", 4: "character"}.get(model.model_type, str(model.model_type))
        problem = (f"a {kind} model (tfm reads unigram models, as OPUS-MT's are, and BPE "
                   "ones, as M2M100's are)")
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
    elif model.model_type == BPE:
        problem = _bpe_problem(model)
    if problem is not None:
        raise ModelError(f"{name}: a SentencePiece model with {problem} cannot be read exactly "
                         "by tfm; it is refused rather than tokenized differently")
    return model


def _bpe_problem(model: SpmModel) -> str | None:
    """What of a BPE model tfm's segmenter would cut otherwise than SentencePiece (module
    docstring), or None."""
    normal = {p: s for p, s, kind in model.pieces if kind == NORMAL}
    if any(kind == UNUSED for _, _, kind in model.pieces):
        return "unused pieces"  # SentencePiece's BPE cuts them again into pieces
    if any(len(p) == 1 for p, _, kind in model.pieces if kind in (CONTROL, UNKNOWN)):
        return "a control or unknown piece of one character"
    if any(c not in normal for p in normal for c in p):
        return "a character of a piece that is not itself a piece"
    made: dict[float, str] = {}  # score -> the piece that merges make with it
    for piece, score in normal.items():
        if _splits(piece, normal) and made.setdefault(score, piece) != piece:
            return f"two pieces made by merges of equal score ({made[score]!r}, {piece!r})"
    return None


def _splits(piece: str, known: dict[str, float]) -> list[tuple[str, str]]:
    """The ways of cutting ``piece`` in two ``known`` pieces, the shortest left part first."""
    return [(piece[:k], piece[k:]) for k in range(1, len(piece))
            if piece[:k] in known and piece[k:] in known]


# --- the segmenter ---------------------------------------------------------------------------

def segmenter(model: SpmModel) -> Tokenizer:
    """A tokenizers model (unigram or BPE, as ``model`` is) that cuts text into ``model``'s
    pieces as SentencePiece's ``encode(text, out_type=str)`` does, with SentencePiece's
    normalisation; ``pieces`` gives a run of unknown characters as its text."""
    tok = Tokenizer(_bpe(model) if model.model_type == BPE else _unigram(model))
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


def _unigram(model: SpmModel) -> models.Model:
    """The unigram model, which gives a run of unknown characters as its text."""
    normal = [(p, s) for p, s, kind in model.pieces if kind == NORMAL]
    # The unknown node scores min(normal scores) - 10 in both libraries; tokenizers takes the
    # minimum over every entry, so the unknown piece's own score must not lower it.
    lowest = min(s for _, s in normal)
    return models.Unigram([(_UNK_IN_SEGMENTER, lowest), *normal], unk_id=0, byte_fallback=False)


def _bpe(model: SpmModel) -> models.Model:
    """The BPE model of the normal pieces, merges ranked as the module docstring says; a run of
    unknown characters is one ``_UNK_IN_SEGMENTER``."""
    normal = {p: s for p, s, kind in model.pieces if kind == NORMAL}
    ids = {p: i for i, (p, _, kind) in enumerate(model.pieces) if kind == NORMAL}
    ranked = sorted((-score, ids[piece], k, pair) for piece, score in normal.items()
                    for k, pair in enumerate(_splits(piece, normal)))
    unk = next(i for i, (_, _, kind) in enumerate(model.pieces) if kind == UNKNOWN)
    return models.BPE(vocab={_UNK_IN_SEGMENTER: unk, **ids},
                      merges=[pair for *_, pair in ranked], unk_token=_UNK_IN_SEGMENTER,
                      fuse_unk=True, byte_fallback=False, dropout=None)


def pieces(seg: Tokenizer, texts: list[str]) -> list[list[str]]:
    """The pieces of each text (tokenizers' Metaspace leaves an empty text empty), a run of
    unknown characters as its normalised text."""
    out = [enc.tokens for enc in seg.encode_batch(texts, add_special_tokens=False)]
    for i, cut in enumerate(out):
        if _UNK_IN_SEGMENTER in cut:  # BPE names the run by its unknown token
            out[i] = _unknown_as_text(seg, texts[i])
    return out


def _unknown_as_text(seg: Tokenizer, text: str) -> list[str]:
    """The pieces of ``text``, each unknown token replaced by the text it stands for: the
    model's tokens of the normalised, pre-tokenized text, whose offsets are in bytes."""
    normalized = seg.normalizer.normalize_str(text) if seg.normalizer is not None else text
    parts = ([part for part, _ in seg.pre_tokenizer.pre_tokenize_str(normalized)]
             if seg.pre_tokenizer is not None else [normalized])
    out = []
    for part in parts:
        raw = part.encode("utf-8")
        for token in seg.model.tokenize(part):
            start, end = token.offsets
            out.append(raw[start:end].decode("utf-8") if token.value == _UNK_IN_SEGMENTER
                       else token.value)
    return out


def vocabulary_decoder() -> decoders.Decoder:
    """SentencePiece's decoding of pieces: ``▁`` is a space, the first one dropped."""
    return decoders.Sequence([decoders.Replace(SPACE, " "), decoders.Fuse(),
                              decoders.Strip(content=" ", left=1, right=0)])


class Segmenter:
    """A side's SentencePiece model, attached to the tokenizer (the vocabulary) it cuts text
    for (tfm.data.tokenizer.attach_segmenter). ``leading_tags``: whether a leading MarianMT
    language token is kept whole (``encode``); None, as the model type says: a unigram model
    (MarianMT's) keeps it, a BPE one (M2M100's) cuts it as any other text."""

    def __init__(self, model: SpmModel, leading_tags: bool | None = None) -> None:
        self.model = model
        self.tokenizer = segmenter(model)
        self.leading_tags = model.model_type == UNIGRAM if leading_tags is None else leading_tags
        self._vocab: dict[str, int] | None = None

    @classmethod
    def from_bytes(cls, data: bytes, name: str, leading_tags: bool | None = None) -> Segmenter:
        return cls(read_spm(data, name), leading_tags)

    def encode(self, vocab: Tokenizer, texts: list[str]) -> list[list[int]]:
        """The ids of ``texts`` in ``vocab``, as MarianTokenizer (M2M100Tokenizer) gives them,
        without ``</s>``: a leading language token whole where ``leading_tags``, the rest cut
        into pieces, each piece (or run of unknown characters) looked up in the vocabulary,
        ``<unk>`` where it is not there."""
        if self._vocab is None:
            self._vocab = vocab.get_vocab()
        table = self._vocab
        unk = table["<unk>"]
        split = ([split_leading_tag(text) for text in texts] if self.leading_tags
                 else [(None, text) for text in texts])
        out = []
        for (code, _), cut in zip(split, pieces(self.tokenizer, [rest for _, rest in split])):
            ids = [table.get(piece, unk) for piece in cut]
            out.append(ids if code is None else [table.get(code, unk), *ids])
        return out
