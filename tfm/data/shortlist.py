"""Vocabulary shortlists: for each source token, the target tokens it is likely to be
translated into, learnt once from the training data and kept in the model directory
(tfm.layout.SHORTLIST_FILE).

Decoding with a shortlist (tfm.decoding.shortlist) computes the output layer and the softmax
over the union of a batch's shortlists only, as Marian's lexical shortlists and CTranslate2's
vocabulary map (vmap.txt, tfm.interop.ctranslate2) do. The union is the special tokens, the
``frequent`` most frequent target tokens of the training data, and each source token's
``per_token`` most probable translations under IBM Model 1 (Brown et al., 1993): lexical
translation probabilities p(target token | source token), estimated by a few rounds of EM
over the pairs of the training split, with the source's EOS as the NULL word (the source of
target tokens that translate nothing). These are the probabilities fast_align's lexical tables
hold, from which Marian's shortlists are made.

The file is safetensors: ``per_source`` (V_src, K) int32, each source token's target ids most
probable first, -1 past the end of a shorter list; ``frequent`` (N,) int32, most frequent
first; its metadata the format version, the parameters it was built with, and a digest of the
tokenizers whose ids it holds, so that a shortlist of another tokenizer is refused.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from safetensors.numpy import load as st_load
from safetensors.numpy import save as st_save

from tfm.config import ShortlistConfig
from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import Vocabularies
from tfm.errors import ModelError
from tfm.integrity import Manifest, digest
from tfm.special_tokens import SPECIAL_TOKENS

FORMAT_VERSION = 1
PER_TOKEN = ShortlistConfig.per_token
FREQUENT = ShortlistConfig.frequent
ITERATIONS = ShortlistConfig.iterations
_PAIRS_PER_CHUNK = 4_000_000  # (source, target) token pairs held in memory at once

Progress = Callable[[int, int], None]  # (steps done, steps in all)


@dataclass(frozen=True)
class Shortlist:
    """Target candidates per source token, and those always allowed."""

    per_source: np.ndarray  # (V_src, K) int32 target ids, most probable first; -1: none
    frequent: np.ndarray  # (N,) int32 target ids, most frequent first
    tgt_vocab_size: int
    # how it was built: per_token, frequent, iterations, data_fingerprint, vocabularies
    provenance: dict[str, Any] = field(default_factory=dict)

    def candidates(self, sources: Iterable[Sequence[int]], extra: Iterable[int] = ()
                   ) -> np.ndarray:
        """The sorted target ids a batch of ``sources`` (source token ids) may produce: the
        special tokens (ids 0 to 3, so at their own positions), the frequent tokens, each
        source token's list and ``extra`` (e.g. the tokens of constraint phrases)."""
        src = np.unique(np.fromiter((t for s in sources for t in s), dtype=np.int64))
        ids = np.concatenate([np.arange(len(SPECIAL_TOKENS)), self.frequent,
                              self.per_source[src].ravel(),
                              np.fromiter(extra, dtype=np.int64)])
        return np.unique(ids[ids >= 0])

    def batch_candidates(self, sources: Sequence[Sequence[int]],
                         extra: Sequence[Iterable[int]] | None = None
                         ) -> tuple[np.ndarray, np.ndarray]:
        """The sorted union of the candidates of each source (with its own ``extra``
        tokens), and which of them each may produce: (B, V') True where it may."""
        own = [self.candidates([src], more) for src, more in
               zip(sources, extra if extra is not None else [()] * len(sources))]
        ids = np.unique(np.concatenate(own))
        allowed = np.zeros((len(own), len(ids)), dtype=bool)
        for row, candidates in enumerate(own):
            allowed[row, np.searchsorted(ids, candidates)] = True
        return ids, allowed


def vocabularies_digest(vocabs: Vocabularies) -> str:
    """Identifies the token ids of both sides: a shortlist holds them, so it belongs to
    this tokenizer only."""
    return digest(f"{vocabs.joint}\n{vocabs.src.to_str()}\n{vocabs.tgt.to_str()}".encode())


# --- building ---------------------------------------------------------------------------------

def build_shortlist(split: TokenizedSplit, src_vocab_size: int, tgt_vocab_size: int,
                    per_token: int = PER_TOKEN, frequent: int = FREQUENT,
                    iterations: int = ITERATIONS, progress: Progress | None = None
                    ) -> Shortlist:
    """The shortlist of a training split: each source token's ``per_token`` most probable
    target tokens under IBM Model 1 fitted by ``iterations`` rounds of EM, and the
    ``frequent`` most frequent target tokens. ``progress``: called with (steps done, steps)
    as the passes over the data go."""
    chunks = list(_chunks(split))
    steps, done = len(chunks) * (iterations + 1), 0

    def advance() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, steps)

    pairs = np.zeros(0, dtype=np.int64)  # every co-occurring (source, target), as s * Vt + t
    for start, stop in chunks:
        keys, _ = _pairs(split, start, stop, tgt_vocab_size)
        pairs = np.union1d(pairs, keys)
        advance()
    prob = np.ones(len(pairs))  # p(t | s), up to a factor per s: EM's first round counts
    for _ in range(iterations):
        counts = np.zeros(len(pairs))
        for start, stop in chunks:
            counts += _expected_counts(split, start, stop, tgt_vocab_size, pairs, prob)
            advance()
        prob = _normalised(counts, pairs // tgt_vocab_size, src_vocab_size)
    return Shortlist(_best_per_source(pairs, prob, src_vocab_size, tgt_vocab_size, per_token),
                     _most_frequent(split, tgt_vocab_size, frequent), tgt_vocab_size,
                     {"per_token": per_token, "frequent": frequent, "iterations": iterations})


def _chunks(split: TokenizedSplit) -> Iterator[tuple[int, int]]:
    """Ranges of rows of about _PAIRS_PER_CHUNK token pairs each."""
    sizes = np.cumsum(split.src_lengths.astype(np.int64) * split.tgt_lengths)
    start = 0
    while start < len(split):
        base = sizes[start - 1] if start else 0
        stop = max(int(np.searchsorted(sizes, base + _PAIRS_PER_CHUNK, "right")), start + 1)
        yield start, stop
        start = stop


def _pairs(split: TokenizedSplit, start: int, stop: int, tgt_vocab_size: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Every (source token, target token) pair of rows ``start:stop`` within a sentence, as
    keys s * Vt + t (P,), and for each the target position it belongs to (P,), numbered
    from 0 in the chunk."""
    src_off = split.src_offsets[start:stop + 1]
    tgt_off = split.tgt_offsets[start:stop + 1]
    src_len, tgt_len = np.diff(src_off), np.diff(tgt_off)
    n = src_len * tgt_len  # pairs per sentence
    row = np.repeat(np.arange(stop - start), n)  # (P,)
    within = np.arange(n.sum()) - np.repeat(np.cumsum(n) - n, n)  # pair index in its sentence
    width = tgt_len[row]
    src = split.src_values[src_off[:-1][row] + within // width].astype(np.int64)
    position = tgt_off[:-1][row] + within % width
    tgt = split.tgt_values[position].astype(np.int64)
    return src * tgt_vocab_size + tgt, position - tgt_off[0]


def _expected_counts(split: TokenizedSplit, start: int, stop: int, tgt_vocab_size: int,
                     pairs: np.ndarray, prob: np.ndarray) -> np.ndarray:
    """EM's expectation over rows ``start:stop``: each target token shares one count among
    its sentence's source tokens in proportion to p(t | s); summed per pair (len(pairs),)."""
    keys, position = _pairs(split, start, stop, tgt_vocab_size)
    index = np.searchsorted(pairs, keys)
    p = prob[index]
    share = p / np.bincount(position, weights=p)[position]
    return np.bincount(index, weights=share, minlength=len(pairs))


def _normalised(counts: np.ndarray, src: np.ndarray, src_vocab_size: int) -> np.ndarray:
    """EM's maximisation: p(t | s) = count(s, t) / count(s)."""
    totals = np.bincount(src, weights=counts, minlength=src_vocab_size)
    return counts / totals[src]


def _best_per_source(pairs: np.ndarray, prob: np.ndarray, src_vocab_size: int,
                     tgt_vocab_size: int, k: int) -> np.ndarray:
    """(V_src, k) each source token's k most probable targets, -1 past its last."""
    src, tgt = pairs // tgt_vocab_size, pairs % tgt_vocab_size
    order = np.lexsort((tgt, -prob, src))  # by source, most probable first, ties by id
    src, tgt = src[order], tgt[order]
    rank = np.arange(len(src)) - np.searchsorted(src, src, "left")
    keep = rank < k
    table = np.full((src_vocab_size, k), -1, dtype=np.int32)
    table[src[keep], rank[keep]] = tgt[keep]
    return table


def _most_frequent(split: TokenizedSplit, tgt_vocab_size: int, n: int) -> np.ndarray:
    """(<= n,) the target tokens of the split, most frequent first (ties by id)."""
    counts = np.bincount(split.tgt_values.astype(np.int64), minlength=tgt_vocab_size)
    counts[: len(SPECIAL_TOKENS)] = 0
    order = np.argsort(-counts, kind="stable")[:n]
    return order[counts[order] > 0].astype(np.int32)


# --- the file ---------------------------------------------------------------------------------

def shortlist_bytes(shortlist: Shortlist) -> bytes:
    meta = {"format_version": str(FORMAT_VERSION), "tgt_vocab_size": str(shortlist.tgt_vocab_size),
            "provenance": json.dumps(shortlist.provenance, sort_keys=True)}
    return st_save({"per_source": np.ascontiguousarray(shortlist.per_source, dtype=np.int32),
                    "frequent": np.ascontiguousarray(shortlist.frequent, dtype=np.int32)},
                   metadata=meta)


def read_shortlist(path: Path, vocabs: Vocabularies) -> Shortlist:
    """The shortlist in ``path`` (of a model directory, checked against its manifest),
    refused with ModelError in one line where it is damaged, of a newer format, or made for
    other vocabularies than ``vocabs``."""
    path = Path(path)
    data = path.read_bytes()
    damage = Manifest.read(path.parent).damage(path, data)
    if damage is not None:
        raise ModelError(f"{path}: damaged since it was written ({damage}); build it again "
                         "with `tfm shortlist`")
    try:
        meta = _metadata(data)
        version = int(meta["format_version"])
        tensors = st_load(data)
        per_source, frequent = tensors["per_source"], tensors["frequent"]
        tgt_vocab_size = int(meta["tgt_vocab_size"])
        provenance = json.loads(meta["provenance"])
    except (ValueError, KeyError, TypeError) as e:
        raise ModelError(f"{path}: not a tfm shortlist ({str(e)[:80]}); build it again with "
                         "`tfm shortlist`") from None
    if version > FORMAT_VERSION:
        raise ModelError(f"{path}: shortlist format {version} is newer than this tfm "
                         f"understands ({FORMAT_VERSION}); upgrade tfm, or build it again "
                         "with `tfm shortlist`")
    fits = (per_source.ndim == 2 and per_source.shape[0] == vocabs.src.get_vocab_size()
            and tgt_vocab_size == vocabs.tgt.get_vocab_size()
            and int(max(per_source.max(initial=-1), frequent.max(initial=-1))) < tgt_vocab_size)
    if not fits or provenance.get("vocabularies") != vocabularies_digest(vocabs):
        raise ModelError(f"{path}: made for another tokenizer than the model's; build it "
                         "again with `tfm shortlist`")
    return Shortlist(per_source, frequent, tgt_vocab_size, provenance)


def _metadata(data: bytes) -> dict[str, str]:
    """The ``__metadata__`` of safetensors bytes (an 8-byte little-endian header length, then
    the JSON header)."""
    size = int.from_bytes(data[:8], "little")
    return json.loads(data[8:8 + size])["__metadata__"]
