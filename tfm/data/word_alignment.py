"""Word alignments of a training corpus by eflomal, mapped onto the prepared token positions.

Guided alignment (Garg et al., 2019) trains one cross-attention head towards the alignments of
a real aligner; `tfm align` computes them once over a prepared dataset and stores them beside
its splits, as the token pairs (source position, target position) of each row, where the
positions are those of the row's stored ids: ``src_ids`` (tags before the source and EOS
after it included, never aligned) and ``tgt_ids`` (no BOS or EOS).

Words are the tokenizer's own: a token whose symbol starts with the word-start mark of
byte-level BPE ('Ġ') or SentencePiece ('▁') starts a word, as tfm.decoding.alignment groups
them at decoding. eflomal (Östling and Tiedemann, 2016) aligns in both directions and the two
are symmetrised by grow-diag-final-and (Koehn et al., 2005), as fast_align's and Moses'
``atools`` do.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from tfm.atomic import atomic_write_bytes
from tfm.data.lexical_alignment import LEXICON_FILE, Lexicon, grow_diag_final_and
from tfm.errors import DataError, UsageError

WORD_MARKS = ("Ġ", "▁")  # byte-level BPE's and SentencePiece's word-start symbols
Pairs = list[tuple[int, int]]


def eflomal_alignments(sources: Sequence[Sequence[str]], targets: Sequence[Sequence[str]],
                       iterations: int | None = None) -> list[Pairs]:
    """Word alignments (source word, target word) of each pair of word lists, by eflomal in
    both directions, symmetrised by grow-diag-final-and. An empty side aligns nothing."""
    try:
        import eflomal
    except ImportError as e:
        raise UsageError("`tfm align` needs eflomal: pip install 'tfm[align]'") from e
    if len(sources) != len(targets):
        raise DataError(f"{len(sources)} sources but {len(targets)} targets to align")
    with tempfile.TemporaryDirectory(prefix="tfm-align-") as work:
        forward, reverse = Path(work) / "fwd", Path(work) / "rev"
        aligner = eflomal.Aligner(n_iterations=iterations)
        aligner.align(_lines(sources), _lines(targets), links_filename_fwd=str(forward),
                      links_filename_rev=str(reverse), quiet=True)
        fwd, rev = _read_links(forward), _read_links(reverse)
    return [grow_diag_final_and(f, r, len(s), len(t))
            for f, r, s, t in zip(fwd, rev, sources, targets)]


def _lines(sentences: Sequence[Sequence[str]]) -> io.StringIO:
    """Sentences as eflomal reads them: words separated by spaces, one sentence a line."""
    return io.StringIO("".join(" ".join(words) + "\n" for words in sentences))


def _read_links(path: Path) -> list[Pairs]:
    """A Pharaoh file ('i-j' pairs, one sentence a line) as lists of pairs."""
    return [[(int(i), int(j)) for i, j in (link.split("-") for link in line.split())]
            for line in path.read_text(encoding="utf-8").splitlines()]


def token_words(symbols: Sequence[str], special: Sequence[bool]) -> list[int]:
    """Word index of each token (-1 for special tokens: tags, EOS, which are no words). A
    token starts a word when its symbol starts with a word-start mark, or when it is the first
    token after the start or a special token."""
    words, word, after_special = [], -1, True
    for symbol, is_special in zip(symbols, special):
        if is_special:
            words.append(-1)
            after_special = True
            continue
        if after_special or symbol.startswith(WORD_MARKS):
            word += 1
        after_special = False
        words.append(word)
    return words


def word_strings(symbols: Sequence[str], words: Sequence[int]) -> list[str]:
    """The words' text (their tokens' symbols joined, word marks dropped), for the aligner."""
    out: list[str] = []
    for symbol, word in zip(symbols, words):
        if word < 0:
            continue
        if word == len(out):
            out.append("")
        out[word] += symbol.lstrip("".join(WORD_MARKS))
    return [w or "_" for w in out]


def token_pairs(word_pairs: Pairs, src_words: Sequence[int], tgt_words: Sequence[int]
                ) -> Pairs:
    """Word alignments -> token alignments: every (source token, target token) whose words
    are aligned. Special tokens (word -1) are never aligned."""
    src_tokens: dict[int, list[int]] = {}
    tgt_tokens: dict[int, list[int]] = {}
    for s, w in enumerate(src_words):
        src_tokens.setdefault(w, []).append(s)
    for t, w in enumerate(tgt_words):
        tgt_tokens.setdefault(w, []).append(t)
    return sorted({(s, t) for i, j in word_pairs if i >= 0 and j >= 0
                   for s in src_tokens.get(i, []) for t in tgt_tokens.get(j, [])})


def alignment_path(data_dir: Path, split: str) -> Path:
    """Where `tfm align` stores a split's token alignments."""
    return Path(data_dir) / f"{split}.align.npz"


def save_token_alignments(path: Path, rows: Sequence[Pairs]) -> None:
    """Each row's token pairs as flat (N, 2) int32 pairs with int64 row offsets."""
    offsets = np.zeros(len(rows) + 1, dtype=np.int64)
    offsets[1:] = np.cumsum([len(r) for r in rows])
    pairs = np.asarray([p for r in rows for p in r], dtype=np.int32).reshape(-1, 2)
    buffer = io.BytesIO()
    np.savez(buffer, pairs=pairs, offsets=offsets)
    atomic_write_bytes(path, buffer.getvalue())


class TokenAlignments:
    """A split's stored token alignments: ``row(i)`` is row i's (source, target) positions."""

    def __init__(self, pairs: np.ndarray, offsets: np.ndarray) -> None:
        self.pairs, self.offsets = pairs, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def row(self, i: int) -> np.ndarray:
        return self.pairs[self.offsets[i]:self.offsets[i + 1]]


def load_token_alignments(path: Path, rows: int) -> TokenAlignments:
    """A split's token alignments, refused in one line when missing or not the split's."""
    if not Path(path).is_file():
        raise UsageError(f"--guided-alignment needs {path}: run `tfm align` on the "
                         "prepared data first")
    with np.load(path) as data:
        found = TokenAlignments(data["pairs"], data["offsets"])
    if len(found) != rows:
        raise DataError(f"{path} has alignments of {len(found)} rows but the split has {rows}: "
                        "run `tfm align` again")
    return found


def special_ids(tok: Any) -> set[int]:
    """The ids of a tokenizer's added tokens (the reserved ones and the language tags)."""
    return set(tok.get_added_tokens_decoder())


def align_prepared(data_dir: Path, split: str = "train", iterations: int | None = None
                   ) -> Path:
    """Align a prepared split's pairs by eflomal and store their token alignments beside it
    (``alignment_path``); returns that file. The words are cut from the stored ids, so the
    positions are exactly those training reads."""
    from tfm.data.dataset import load_split
    from tfm.data.tokenizer import load_vocabularies
    from tfm.layout import TOKENIZER_FILE

    vocabs = load_vocabularies(Path(data_dir) / TOKENIZER_FILE)
    rows = load_split(Path(data_dir), split)
    src_side = WordSide(vocabs.src)
    tgt_side = WordSide(vocabs.tgt)
    src_words = [src_side.words(rows.src(i)) for i in range(len(rows))]
    tgt_words = [tgt_side.words(rows.tgt(i)) for i in range(len(rows))]
    word_pairs = eflomal_alignments([w for _, w in src_words], [w for _, w in tgt_words],
                                    iterations)
    tokens = [token_pairs(p, s[0], t[0]) for p, s, t in zip(word_pairs, src_words, tgt_words)]
    path = alignment_path(data_dir, split)
    save_token_alignments(path, tokens)
    if split == "train":  # the lexicon that places a translation's tags (models copy it)
        Lexicon.count([src_side.text(w) for _, w in src_words],
                      [tgt_side.text(w) for _, w in tgt_words],
                      word_pairs).save(Path(data_dir) / LEXICON_FILE)
    return path


class WordSide:
    """One side's tokenizer, read as symbols and words."""

    def __init__(self, tok: Any) -> None:
        self.symbols = [tok.id_to_token(i) or "" for i in range(tok.get_vocab_size())]
        self.special = special_ids(tok)
        self.decoder = tok.decoder
        self._texts: dict[str, str] = {}

    def text(self, words: list[str]) -> list[str]:
        """Words as ``words`` gives them (symbols joined) made text: byte-level BPE's bytes
        decoded (each distinct word once)."""
        if self.decoder is None:
            return words
        out = []
        for word in words:
            if word not in self._texts:
                self._texts[word] = self.decoder.decode([word]).strip() or word
            out.append(self._texts[word])
        return out

    def words(self, ids: np.ndarray) -> tuple[list[int], list[str]]:
        """Each token's word (-1: special) and the words' text."""
        symbols = [self.symbols[i] for i in ids]
        words = token_words(symbols, [int(i) in self.special for i in ids])
        return words, word_strings(symbols, words)
