"""Decoding over a vocabulary shortlist (tfm.data.shortlist): the same search, over fewer
target tokens.

A sentence's candidates are the special tokens, the frequent target tokens, its source
tokens' shortlists and every token of its constraint phrases and prefix. The model scores
only the union of a batch's candidates (``ShortlistModel``: the output layer's rows for them
are gathered once per batch), so the output layer and the softmax cost in proportion to the
union, not the vocabulary; each sentence's tokens outside its own candidates get -inf, so that
its translation does not depend on the sentences that share its batch. Search runs unchanged
in the reduced id space: the union is sorted and starts with the special tokens, so they keep
their ids and its rules on them hold as they are; constraints are mapped into it before,
hypotheses back to full ids after. Scores are log-probabilities normalised over the
sentence's candidates (as in Marian and CTranslate2, whose shortlists are the batch's).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import Tensor

from tfm.checkpoint import save_recorded
from tfm.config import SearchOptions, ShortlistConfig
from tfm.data.dataset import load_split, read_prepare_info
from tfm.data.shortlist import (
    FREQUENT,
    ITERATIONS,
    PER_TOKEN,
    Shortlist,
    build_shortlist,
    read_shortlist,
    shortlist_bytes,
    vocabularies_digest,
)
from tfm.data.tokenizer import Vocabularies, load_vocabularies
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.search import Hypothesis, search
from tfm.errors import UsageError
from tfm.layout import TOKENIZER_FILE, ModelDir
from tfm.model import DecoderState, Transformer
from tfm.model_info import read_model_info

# --- building: `tfm shortlist` --------------------------------------------------------------

def make_shortlist(data_dir: Path, model_dir: Path, per_token: int = PER_TOKEN,
                   frequent: int = FREQUENT, iterations: int = ITERATIONS,
                   progress: Callable[[int, int], None] | None = None) -> Shortlist:
    """Build the shortlist of ``model_dir`` from the training split of the prepared dataset
    ``data_dir`` (tokenized as the model reads, refused in one line otherwise) and write it
    into the model directory, atomically and recorded in its manifest. The numbers are
    ShortlistConfig's, checked by it."""
    ShortlistConfig(per_token, frequent, iterations)
    files = ModelDir(model_dir)
    info = read_model_info(model_dir)
    vocabs = load_vocabularies(files.tokenizer)
    prepared = read_prepare_info(data_dir)
    theirs = load_vocabularies(Path(data_dir) / TOKENIZER_FILE)
    if vocabularies_digest(theirs) != vocabularies_digest(vocabs):
        raise UsageError(f"{data_dir} was prepared with another tokenizer than the model in "
                         f"{model_dir}: give the dataset the model was trained on")
    split = load_split(Path(data_dir), "train")
    shortlist = build_shortlist(split, info.model.src_vocab_size, info.model.tgt_vocab_size,
                                per_token, frequent, iterations, progress)
    shortlist = replace(shortlist, provenance={
        **shortlist.provenance, "data_fingerprint": prepared.fingerprint,
        "vocabularies": vocabularies_digest(vocabs)})
    save_recorded(files.root, {files.shortlist: shortlist_bytes(shortlist)})
    return shortlist


def load_shortlist(model_dir: Path, vocabs: Vocabularies, ensemble: Sequence[Path] = ()
                   ) -> Shortlist:
    """The shortlist of ``model_dir``, whose tokenizer is ``vocabs``; refused in one line
    where there is none (saying how to build it) and with an ``ensemble``."""
    if ensemble:
        raise UsageError("--shortlist decodes one model, not an --ensemble")
    path = ModelDir(model_dir).shortlist
    if not path.is_file():
        raise UsageError(f"--shortlist: {model_dir} has no shortlist; build one with `tfm "
                         f"shortlist --data DATA --model {model_dir}` (DATA: the dataset it "
                         "was trained on)")
    return read_shortlist(path, vocabs)


# --- decoding -------------------------------------------------------------------------------

@dataclass
class ShortlistState:
    """The model's DecoderState, and for each of its rows the candidates of the batch that its
    sentence may not produce; reordered and pruned together."""

    inner: DecoderState
    barred: Tensor  # (rows, V') True where the row's sentence's shortlist lacks the token

    def index_select(self, index: Tensor) -> ShortlistState:
        return ShortlistState(self.inner.index_select(index), self.barred.index_select(0, index))


class ShortlistModel:
    """``model`` as search sees it (encode, start_decoding, decode_step, config), scoring only
    the target ids ``ids`` (V',), sorted: token i of its logits is target id ids[i], and the
    tokens fed back to it are read the same way. ``allowed`` (B, V'): the candidates of each
    sentence; the others' logits are -inf, so that a sentence is scored over its own shortlist
    whichever sentences share its batch."""

    def __init__(self, model: Transformer, ids: Tensor, allowed: Tensor) -> None:
        self.model = model
        self.ids = ids
        self.allowed = allowed
        self.config = model.config
        self.rows = model.output_rows(ids)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        return self.model.encode(src)

    def start_decoding(self, memory: Tensor, memory_mask: Tensor, group: int = 1
                       ) -> ShortlistState:
        barred = ~self.allowed.repeat_interleave(group, dim=0)  # (B * group, V')
        return ShortlistState(self.model.start_decoding(memory, memory_mask, group), barred)

    def decode_step(self, tokens: Tensor, state: ShortlistState, need_weights: bool = False
                    ) -> tuple[Tensor, ShortlistState, Tensor | None]:
        """tokens (B,) of the reduced ids -> logits (B, V') over ``ids``, as
        Transformer.decode_step."""
        logits, inner, weights = self.model.decode_step(self.ids[tokens], state.inner,
                                                        need_weights, self.rows)
        logits = logits.masked_fill(state.barred, float("-inf"))
        return logits, ShortlistState(inner, state.barred), weights


def shortlist_search(model: Transformer | Any, shortlist: Shortlist, batch: list[list[int]],
                     src: Tensor, options: SearchOptions,
                     constraints: list[TargetConstraints | None] | None = None,
                     start: Tensor | None = None) -> list[list[Hypothesis]]:
    """tfm's search of ``src`` (``batch``'s token ids, padded) by ``model`` scoring only the
    candidates of ``batch`` in ``shortlist``, with the constraints and the forced decoder
    tokens ``start`` (B, P) in their ids and the hypotheses mapped back to full ids. (A forced
    token is a candidate of its sentence: the narrowed model reads every token it is fed by
    its place among the candidates.)"""
    extra = [_constraint_tokens(c) for c in constraints] if constraints else None
    if start is not None:
        extra = [sorted({*(extra[row] if extra else []), *tokens})
                 for row, tokens in enumerate(start.tolist())]
    ids, allowed = shortlist.batch_candidates(batch, extra)
    narrowed = ShortlistModel(model, torch.as_tensor(ids, device=src.device),
                              torch.as_tensor(allowed, device=src.device))
    reduced_start = None if start is None else torch.as_tensor(
        np.searchsorted(ids, start.cpu().numpy()), device=src.device)
    found = search(narrowed, src, options, _reduced_constraints(constraints, ids),
                   reduced_start)
    return [[replace(h, tokens=ids[h.tokens].tolist()) for h in hyps] for hyps in found]


def _constraint_tokens(constraints: TargetConstraints | None) -> list[int]:
    """Every token of a sentence's phrases (each form) and prefix."""
    if constraints is None:
        return []
    forms = (t for p in constraints.phrases for form in p.forms for t in form)
    return sorted({*constraints.prefix, *forms})


def _reduced_constraints(constraints: list[TargetConstraints | None] | None, ids: np.ndarray
                         ) -> list[TargetConstraints | None] | None:
    """``constraints`` in the ids of the candidates ``ids`` (sorted, holding their tokens)."""
    if constraints is None:
        return None

    def reduced(tokens: Any) -> list[int]:
        return np.searchsorted(ids, np.asarray(tokens, dtype=np.int64)).tolist()

    return [None if c is None else TargetConstraints(
        [replace(p, forms=tuple(tuple(reduced(f)) for f in p.forms)) for p in c.phrases],
        reduced(c.prefix)) for c in constraints]
