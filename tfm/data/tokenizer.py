"""Byte-level BPE with Hugging Face tokenizers: train, save, load, encode, decode.

Byte-level pre-tokenization means every string, in any script, encodes without unknown tokens,
and decoding gives back the exact (normalised) text, which is what BLEU is computed on.
The tokenizer file (the library's own JSON format) is the only source of the vocabulary.

A model has one joint vocabulary for both languages (the default; source and target
embeddings can then be shared) or one per side. On disk a joint tokenizer is one file,
``NAME.json``; separate ones are ``NAME.src.json`` and ``NAME.tgt.json`` beside each other.
Every command that takes a tokenizer path accepts either form under the same ``NAME.json``.

Special tokens (``<pad> <unk> <s> </s>``) enter a sequence only by id, from tfm's own code: a
text that spells one (a corpus line or a sentence to translate containing ``</s>``) is encoded
as the characters it is made of, never as the control token.

A model imported from MarianMT (tfm.interop.marian_import) also has a SentencePiece model per
side beside its tokenizer file (``NAME.src.spm``, ``NAME.tgt.spm``): its tokenizer file is then
the vocabulary, and text is cut into pieces by the side's SentencePiece model before the
vocabulary maps them to ids (tfm.data.sentencepiece). Loading, saving and ``encode_batch``
handle both kinds alike.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tokenizers import (
    AddedToken,
    Tokenizer,
    decoders,
    models,
    normalizers,
    pre_tokenizers,
    trainers,
)

from tfm.data.corpus import batched
from tfm.data.text import normalize_text, replace_surrogates
from tfm.errors import ModelError
from tfm.special_tokens import (  # noqa: F401 (re-exported: the tokenizer's special tokens)
    BOS,
    BOS_ID,
    EOS,
    EOS_ID,
    PAD,
    PAD_ID,
    SPECIAL_TOKENS,
    UNK,
    UNK_ID,
)


def new_tokenizer(lowercase: bool = False) -> Tokenizer:
    """An untrained byte-level BPE tokenizer with NFC normalisation, and lowercasing when
    ``lowercase`` (the normaliser is part of the tokenizer file, so every command that encodes
    with it lowercases too, and a model trained with it writes lowercased text)."""
    tok = Tokenizer(models.BPE(unk_token=UNK))
    tok.normalizer = (normalizers.Sequence([normalizers.NFC(), normalizers.Lowercase()])
                      if lowercase else normalizers.NFC())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=True, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    return _specials_only_by_id(tok)


def tokenizer_from_json(text: str) -> Tokenizer:
    """A tokenizer from its JSON text (as ``tokenizer_to_json`` or ``Tokenizer.to_str`` write
    it), with its SentencePiece segmenter if it has one."""
    data = json.loads(text) if text.startswith('{"tfm_segmenter"') else None
    if data is None:
        return _specials_only_by_id(Tokenizer.from_str(text))
    tok = _specials_only_by_id(Tokenizer.from_str(data["tokenizer"]))
    attach_segmenter(tok, base64.b64decode(data["tfm_segmenter"]), "segmenter")
    return tok


def tokenizer_to_json(tok: Tokenizer) -> str:
    """The tokenizer as one JSON text that ``tokenizer_from_json`` reads back whole: its own
    JSON, or, for one with a SentencePiece segmenter, both (for worker processes)."""
    seg = segmenter_of(tok)
    if seg is None:
        return tok.to_str()
    return json.dumps({"tfm_segmenter": base64.b64encode(seg.model.data).decode("ascii"),
                       "tokenizer": tok.to_str()})


def attach_segmenter(tok: Tokenizer, data: bytes, name: str) -> Tokenizer:
    """Give ``tok`` (the vocabulary) the SentencePiece model ``data`` (the file ``name``) that
    cuts text into its pieces."""
    from tfm.data.sentencepiece import Segmenter

    tok.tfm_segmenter = Segmenter.from_bytes(data, name)
    return tok


def segmenter_of(tok: Tokenizer) -> object | None:
    """The SentencePiece segmenter of ``tok`` (tfm.data.sentencepiece.Segmenter), or None."""
    return getattr(tok, "tfm_segmenter", None)


def _specials_only_by_id(tok: Tokenizer) -> Tokenizer:
    """Special tokens spelt in a text are encoded as text. The setting is not part of the
    tokenizer's JSON: every tokenizer tfm makes or loads goes through here."""
    tok.encode_special_tokens = True
    return tok


# The longest run of characters without a space that BPE learns from in one piece.
LONGEST_WORD = 256


def cut_long_words(text: str, longest: int = LONGEST_WORD) -> str:
    """``text`` with every run of more than ``longest`` characters without whitespace cut by
    spaces into pieces of ``longest``. The BPE trainer's time grows with the square of a word's
    length (docs/BENCHMARKS.md, "The test suite"), so one long line of base64 or repeated
    letters could keep it busy for longer than the rest of a corpus; cut, it costs what
    ordinary text does. Words of natural text (and sentences of scripts written without
    spaces) are shorter and pass unchanged."""
    if len(text) <= longest:
        return text
    words = text.split()
    if max(map(len, words), default=0) <= longest:
        return text
    pieces = []
    for word in words:
        pieces.extend(word[i:i + longest] for i in range(0, len(word), longest))
    return " ".join(pieces)


def train_tokenizer(
    texts: Iterable[str], vocab_size: int = 8000, min_frequency: int = 2,
    length: int | None = None, lowercase: bool = False, tags: Sequence[str] = (),
) -> Tokenizer:
    """Learn BPE merges from a stream of sentences (never held in memory all at once). Runs of
    over LONGEST_WORD characters without a space are learnt from in pieces (``cut_long_words``).
    ``tags``: target-language tags (``>>de<<``, tfm.data.directions) added after the BPE's
    entries, each one token wherever it is written, never split or lowercased.
    """
    texts = (cut_long_words(text) for text in texts)
    tok = new_tokenizer(lowercase)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=min_frequency,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(batched(texts, 1000), trainer=trainer, length=length)
    if tags:
        tok.add_tokens([AddedToken(t, normalized=False, special=False) for t in tags])
    return tok


def save_tokenizer(tok: Tokenizer, path: Path) -> None:
    from tfm.atomic import atomic_write_bytes

    atomic_write_bytes(path, tok.to_str(pretty=True).encode())


def load_tokenizer(path: Path, segmenter: Path | None = None) -> Tokenizer:
    """The tokenizer file ``path``; with ``segmenter``, the SentencePiece model that cuts text
    for it."""
    path = Path(path)
    if not path.is_file():
        raise ModelError(f"{path}: no such tokenizer file (train one with "
                         "`tfm train-tokenizer` and give it with --tokenizer)")
    try:
        tok = _specials_only_by_id(Tokenizer.from_file(str(path)))
    except Exception as e:  # the library raises a bare Exception on malformed JSON
        raise ModelError(f"{path}: not a tokenizer file ({_first_line(e)})") from e
    for i, token in enumerate(SPECIAL_TOKENS):
        if tok.token_to_id(token) != i:
            raise ModelError(
                f"{path}: special token {token} must have id {i}; "
                "train the tokenizer with `tfm train-tokenizer`"
            )
    if segmenter is not None:
        attach_segmenter(tok, segmenter.read_bytes(), str(segmenter))
    return tok


@dataclass(frozen=True)
class Vocabularies:
    """The tokenizers of a translation direction: the same one for both sides (joint), or one
    for the source language and one for the target language."""

    src: Tokenizer
    tgt: Tokenizer
    # One vocabulary in two objects: each side cuts text with its own SentencePiece model
    # (an imported MarianMT model), but the ids are the same on both sides.
    one_vocabulary: bool = False

    @property
    def joint(self) -> bool:
        return self.src is self.tgt or self.one_vocabulary

    @classmethod
    def shared(cls, tok: Tokenizer) -> Vocabularies:
        return cls(tok, tok)


def separate_paths(path: Path) -> tuple[Path, Path]:
    """Where the source and target tokenizers of ``path`` live when they are separate:
    ``dir/NAME.json`` -> ``dir/NAME.src.json``, ``dir/NAME.tgt.json``."""
    path = Path(path)
    stem = path.name[:-len(".json")] if path.name.endswith(".json") else path.name
    return path.with_name(f"{stem}.src.json"), path.with_name(f"{stem}.tgt.json")


def segmenter_paths(path: Path) -> tuple[Path, Path]:
    """Where the SentencePiece models of the tokenizer ``path`` live, if it has them:
    ``dir/NAME.json`` -> ``dir/NAME.src.spm``, ``dir/NAME.tgt.spm``."""
    src, tgt = separate_paths(path)
    return src.with_suffix(".spm"), tgt.with_suffix(".spm")


def _tokenizer_files(path: Path) -> list[Path]:
    path = Path(path)
    src, tgt = separate_paths(path)
    if not path.is_file() and (src.is_file() or tgt.is_file()):
        return [src, tgt]
    return [path]


def vocabulary_files(path: Path) -> list[Path]:
    """The files behind ``path``: [path] for a joint tokenizer, [src, tgt] for separate ones
    (whichever exists; the joint file when neither does), then the SentencePiece models beside
    them, if any."""
    return _tokenizer_files(path) + [p for p in segmenter_paths(path) if p.is_file()]


def load_vocabularies(path: Path) -> Vocabularies:
    """The joint tokenizer ``path``, or the separate pair ``NAME.src.json``/``NAME.tgt.json``
    beside it; with the SentencePiece models ``NAME.src.spm``/``NAME.tgt.spm`` if there."""
    files = _tokenizer_files(path)
    src_spm, tgt_spm = segmenter_paths(path)
    if src_spm.is_file() != tgt_spm.is_file():
        missing = tgt_spm if src_spm.is_file() else src_spm
        raise ModelError(f"{missing}: missing (the SentencePiece models of a tokenizer come in "
                         "pairs, one per side)")
    if src_spm.is_file():
        src = load_tokenizer(files[0], src_spm)
        tgt = load_tokenizer(files[-1], tgt_spm)
        return Vocabularies(src, tgt, one_vocabulary=len(files) == 1)
    if len(files) == 1:
        return Vocabularies.shared(load_tokenizer(files[0]))
    return Vocabularies(load_tokenizer(files[0]), load_tokenizer(files[1]))


def save_vocabularies(vocabs: Vocabularies, path: Path) -> list[Path]:
    """Write ``vocabs`` under ``path`` (see ``load_vocabularies``), removing a stale file of
    the other form so that loading finds what was written. Returns the files written."""
    from tfm.atomic import atomic_write_bytes

    path = Path(path)
    pair = separate_paths(path)
    written = [path] if vocabs.joint else list(pair)
    stale = list(pair) if vocabs.joint else [path]
    save_tokenizer(vocabs.src, written[0])
    if not vocabs.joint:
        save_tokenizer(vocabs.tgt, written[1])
    segmenters = [segmenter_of(vocabs.src), segmenter_of(vocabs.tgt)]
    for seg, spm in zip(segmenters, segmenter_paths(path)):
        if seg is not None and all(s is not None for s in segmenters):
            atomic_write_bytes(spm, seg.model.data)  # type: ignore[attr-defined]
            written.append(spm)
        else:
            stale.append(spm)
    for old in stale:
        old.unlink(missing_ok=True)
    return written


def text_normalizer(tok: Tokenizer) -> Callable[[str], str]:
    """What tfm does to a text before ``tok`` encodes it, in ``prepare`` and in translation
    alike: ``normalize_text`` (tfm.data.text); for a tokenizer that normalises as SentencePiece
    does (``reads_text_as_given``: an imported MarianMT, M2M100 or NLLB-200 model), only
    ``replace_surrogates``. Their own tokenizers hand the text to SentencePiece's normalisation
    as it is (its model's character map, nmt_nfkc, and the removal of extra spaces), which
    reads control characters, zero-width and other spaces its own way: U+200B is a space
    there, where normalize_text deletes it. Lone surrogates are replaced all the same: no
    tokenizer takes them (MarianTokenizer fails on them)."""
    return replace_surrogates if reads_text_as_given(tok) else normalize_text


def reads_text_as_given(tok: Tokenizer) -> bool:
    """Whether ``tok`` cuts text with a SentencePiece model, or normalises with one's
    precompiled character map (NLLB-200's tokenizer.json)."""
    if segmenter_of(tok) is not None:
        return True
    known = getattr(tok, "tfm_as_given", None)  # read once: the character map is large
    if known is None:
        known = tok.normalizer is not None and b'"Precompiled"' in tok.normalizer.__getstate__()
        tok.tfm_as_given = known
    return known


def normalize_reference(tok: Tokenizer, text: str) -> str:
    """``text`` as the tokenizer's normaliser writes it (NFC; lowercased for a lowercasing
    tokenizer): what a model trained with ``tok`` can at best produce, so what its output is
    scored against during training."""
    return tok.normalizer.normalize_str(text) if tok.normalizer is not None else text


def lowercases(tok: Tokenizer) -> bool:
    """Whether ``tok`` lowercases its input (a model trained with it writes lowercase)."""
    return tok.normalizer is not None and tok.normalizer.normalize_str("A") == "a"


def _first_line(e: Exception) -> str:
    return (str(e).splitlines() or [type(e).__name__])[0]


def encode_batch(tok: Tokenizer, texts: list[str]) -> list[list[int]]:
    """Token ids without special tokens (parallel in Rust). One text is encoded on the calling
    thread: handing it to the tokenizer's thread pool costs more than encoding it (tfm serve
    counts each request's tokens this way)."""
    seg = segmenter_of(tok)
    if seg is not None:  # SentencePiece pieces, then the vocabulary's ids
        return seg.encode(tok, texts)  # type: ignore[attr-defined]
    if len(texts) == 1:
        return [tok.encode(texts[0], add_special_tokens=False).ids]
    return [enc.ids for enc in tok.encode_batch(texts, add_special_tokens=False)]


def decode(tok: Tokenizer, ids: Iterable[int]) -> str:
    """Ids -> text; special tokens are dropped: tfm's four, and a tokenizer's other special
    entries (an imported model's language codes)."""
    return tok.decode([i for i in ids if i >= len(SPECIAL_TOKENS)],
                      skip_special_tokens=True).strip()


def decode_batch(tok: Tokenizer, batch: list[list[int]]) -> list[str]:
    n = len(SPECIAL_TOKENS)
    return [s.strip() for s in tok.decode_batch([[i for i in ids if i >= n] for ids in batch],
                                                 skip_special_tokens=True)]
