"""Training levers of multilingual models against zero-shot off-target output
(docs/multi30k.md measures each), which a run of one target language never sees:

- ``LanguageLoss`` (``--language-loss W``): target-language prediction (Yang et al., EMNLP
  2021) with no parameter of its own: at every target position the decoder's output is scored
  against the rows of the output layer that belong to the ``>>xx<<`` tags, and the target's
  tag is the label; W times that cross-entropy is added to the loss.
- ``BackTranslator`` (``--online-bt-from STEP``, or ``--online-bt-share F``: the last F of
  the budget): random online back-translation (Zhang et al., ACL 2020). From STEP on, each
  batch's pairs whose source language the model also translates into a third language
  (en->de, where en->fr is trained too) have their source translated on the fly by the model
  (greedy) into such a language, chosen at random, and the pair made of that translation and
  the original target (fr->de) is trained on too: pairs of the directions the data lacks.

(``--drop-residual-layer``, the third lever, is part of the model: tfm.config.ModelConfig.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from tfm.config import SearchOptions
from tfm.data.batching import Batch, pad_pairs
from tfm.data.dataset import TokenizedSplit
from tfm.data.directions import Direction, direction_names
from tfm.data.language_marks import LanguageError, ModelLanguages, ResolvedLanguage
from tfm.decoding.search import greedy_search
from tfm.errors import UsageError


def _targets(directions: Sequence[Direction], option: str) -> list[str]:
    """The data's target languages, sorted; refused in one line unless there are several."""
    targets = sorted({d.tgt for d in directions if d.tgt})
    if len(targets) < 2:
        raise UsageError(f"{option} needs several target languages (a multilingual run); "
                         f"this data has {len(targets)} ({', '.join(direction_names(directions))})")
    return targets


def _resolved(languages: ModelLanguages, direction: Direction, option: str
              ) -> ResolvedLanguage:
    """``direction`` as the model reads it (its tag, its decoder start), or one line naming
    ``option`` where the tokenizer lacks its language's tag."""
    try:
        return languages.direction(direction)
    except LanguageError:
        raise UsageError(f"{option} needs a tokenizer with the >>xx<< tag of each target "
                         "language (a multilingual run's `tfm train-tokenizer`)") from None


class LanguageLoss:
    """Target-language prediction over the tags' output rows, for ``--language-loss``."""

    def __init__(self, weight: float, languages: ModelLanguages,
                 directions: Sequence[Direction]) -> None:
        targets = _targets(directions, "--language-loss")
        self.weight = weight
        # Each target language's token, as the model marks a direction into it.
        tokens = [_resolved(languages, Direction(None, t), "--language-loss").token
                  for t in targets]
        ids = [languages.token_id(t) if t is not None else None for t in tokens]
        if any(i is None for i in ids):
            raise UsageError("--language-loss needs the >>xx<< tag of each target language "
                             "in the target vocabulary (a joint tokenizer)")
        self.tag_ids = torch.tensor(ids)
        # direction index -> the index of its target language among ``tag_ids``
        self.label_of = torch.tensor([targets.index(d.tgt) for d in directions])
    def __call__(self, logits: Tensor, batch: Batch) -> Tensor:
        """``weight`` x the summed cross-entropy of the tags' logits (N, L), taken from the
        logits (N, V) at the batch's real target positions, against each row's target
        language."""
        if batch.directions is None:
            raise ValueError("a batch without its rows' directions")
        if self.tag_ids.device != logits.device:  # moved once, not at every batch
            self.tag_ids, self.label_of = (t.to(logits.device) for t in (self.tag_ids,
                                                                         self.label_of))
        labels = self.label_of[batch.directions]  # (B,)
        labels = labels[:, None].expand_as(batch.tgt_mask)[batch.tgt_mask]  # (N,)
        tags = logits.index_select(1, self.tag_ids).float()  # (N, L)
        return self.weight * F.cross_entropy(tags, labels, reduction="sum")


class BackTranslator:
    """Random online back-translation, for ``--online-bt-from`` and ``--online-bt-share``
    (``option``, the one a refusal names). Each direction is read as the model marks it
    (``languages``: tfm.data.language_marks), resolved once: a row is translated into the
    third language through that language's direction (its source tag, its decoder start),
    and the pair made is marked as the row's own direction."""

    GREEDY = SearchOptions(beam=1)

    def __init__(self, languages: ModelLanguages, directions: Sequence[Direction], seed: int,
                 option: str = "--online-bt-from") -> None:
        _targets(directions, option)
        if languages.needs_source:
            raise UsageError(f"{option}: for models of >>xx<< tags; an NLLB-200 or M2M100 "
                             "model marks its languages by its own codes")
        self.marks = [_resolved(languages, d, option) for d in directions]
        self.seed = seed
        # Each direction's routes: the directions from its source into a third language.
        self.routes = [tuple(j for j, other in enumerate(directions)
                             if other.src == d.src and other.tgt not in (d.src, d.tgt))
                       for d in directions]
        if not any(self.routes):
            raise UsageError(f"{option}: no direction's source language is also translated "
                             f"into a third language ({', '.join(direction_names(directions))}"
                             "): there is nothing to translate its sources into")

    @torch.no_grad()  # not inference_mode: the pairs made are trained on
    def batch(self, model, split: TokenizedSplit, indices: np.ndarray, step: int,
              device: torch.device, width_multiple: int = 1) -> Batch | None:
        """The back-translated pairs of the rows ``indices`` at optimizer step ``step`` (the
        third languages drawn from (seed, step): a resumed run draws the same), or None where
        no row has a route. ``model`` translates in eval mode; its mode is restored."""
        rows = [int(i) for i in indices if self.routes[split.directions[i]]]
        if not rows:
            return None
        rng = np.random.default_rng([self.seed, step])
        picks = [int(rng.integers(len(self.routes[split.directions[i]]))) for i in rows]
        # Each row translated by the direction that route picked, one search per direction.
        by_via: dict[int, list[int]] = {}
        for k, (i, pick) in enumerate(zip(rows, picks)):
            by_via.setdefault(self.routes[split.directions[i]][pick], []).append(k)
        was_training = model.training
        model.eval()
        try:
            translations = self._translate(model, split, rows, by_via, device)
        finally:
            model.train(was_training)
        keep = [k for k, t in enumerate(translations) if t]
        if not keep:
            return None
        own = [self.marks[int(split.directions[rows[k]])] for k in keep]
        sources = [m.source_ids(translations[k]) for m, k in zip(own, keep)]
        batch = pad_pairs(sources, [split.tgt(rows[k]) for k in keep], width_multiple,
                          [m.start for m in own])
        return replace(batch, directions=torch.tensor(
            [int(split.directions[rows[k]]) for k in keep]))

    def _translate(self, model, split: TokenizedSplit, rows: list[int],
                   by_via: dict[int, list[int]], device: torch.device) -> list[list[int]]:
        """Each row's source translated greedily by the direction ``by_via`` gives it: read
        as that direction's sources are (its marking instead of the row's own) and decoded
        from that direction's start."""
        translations: list[list[int]] = [[] for _ in rows]
        for via, ks in by_via.items():
            into = self.marks[via]
            sources = [into.source_ids(self.marks[int(split.directions[rows[k]])].text_ids(
                split.src(rows[k]))) for k in ks]
            padded = pad_pairs(sources, [[]] * len(ks)).src.to(device)
            start = torch.tensor([into.start] * len(ks), device=device)
            for k, h in zip(ks, greedy_search(model, padded, self.GREEDY, start=start)):
                translations[k] = list(h[0].tokens)
        return translations
