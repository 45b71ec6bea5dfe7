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
from dataclasses import dataclass, replace

import numpy as np
import torch
import torch.nn.functional as F
from torch import Tensor

from tfm.config import SearchOptions
from tfm.data.batching import Batch, pad_pairs
from tfm.data.dataset import TokenizedSplit
from tfm.data.language_marks import LanguageMarking, tag
from tfm.decoding.search import greedy_search
from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID, EOS_ID


def _languages(directions: Sequence[str]) -> list[tuple[str, str]]:
    return [tuple(d.split("-", 1)) for d in directions]  # type: ignore[misc]


def _targets(directions: Sequence[str], option: str) -> list[str]:
    """The data's target languages, sorted; refused in one line unless there are several."""
    targets = sorted({tgt for _, tgt in _languages(directions)})
    if len(targets) < 2:
        raise UsageError(f"{option} needs several target languages (a multilingual run); "
                         f"this data has {len(targets)} ({', '.join(directions)})")
    return targets


def _tag_ids(languages: Sequence[str], token_id, option: str) -> list[int]:
    ids = [token_id(tag(lang)) for lang in languages]
    if any(i is None for i in ids):
        raise UsageError(f"{option} needs a tokenizer with the >>xx<< tag of each target "
                         "language (a multilingual run's `tfm train-tokenizer`)")
    return ids  # type: ignore[return-value]


class LanguageLoss:
    """Target-language prediction over the tags' output rows, for ``--language-loss``."""

    def __init__(self, weight: float, directions: Sequence[str], token_id) -> None:
        targets = _targets(directions, "--language-loss")
        self.weight = weight
        self.tag_ids = torch.tensor(_tag_ids(targets, token_id, "--language-loss"))
        # direction index -> the index of its target language among ``tag_ids``
        self.label_of = torch.tensor([targets.index(tgt) for _, tgt in _languages(directions)])

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


@dataclass(frozen=True)
class _Route:
    """A direction's back-translation: the trained directions that translate its source
    language into a third language (``via``), each with that language's tag id."""

    via: tuple[int, ...]
    via_tag: tuple[int, ...]


class BackTranslator:
    """Random online back-translation, for ``--online-bt-from`` and ``--online-bt-share``
    (``option``, the one a refusal names)."""

    GREEDY = SearchOptions(beam=1)

    def __init__(self, directions: Sequence[str], token_id, marking: LanguageMarking | None,
                 starts: Sequence[Sequence[int]] | None, seed: int,
                 option: str = "--online-bt-from") -> None:
        targets = _targets(directions, option)
        if marking is not None and marking.where == "language_codes":
            raise UsageError(f"{option}: for models of >>xx<< tags; an NLLB-200 or M2M100 "
                             "model marks its languages by its own codes")
        tag_of = dict(zip(targets, _tag_ids(targets, token_id, option)))
        pairs = _languages(directions)
        self.in_source = marking is None or marking.in_source
        self.starts = [tuple(s) for s in starts] if starts is not None else None
        self.seed = seed
        self.routes = []
        for src, tgt in pairs:
            via = [j for j, (s, t) in enumerate(pairs) if s == src and t not in (src, tgt)]
            self.routes.append(_Route(tuple(via), tuple(tag_of[pairs[j][1]] for j in via)))
        if not any(r.via for r in self.routes):
            raise UsageError(f"{option}: no direction's source language is also translated "
                             f"into a third language ({', '.join(directions)}): there is "
                             "nothing to translate its sources into")

    def _start(self, direction: int) -> tuple[int, ...]:
        return self.starts[direction] if self.starts is not None else (BOS_ID,)

    @torch.no_grad()  # not inference_mode: the pairs made are trained on
    def batch(self, model, split: TokenizedSplit, indices: np.ndarray, step: int,
              device: torch.device, width_multiple: int = 1) -> Batch | None:
        """The back-translated pairs of the rows ``indices`` at optimizer step ``step`` (the
        third languages drawn from (seed, step): a resumed run draws the same), or None where
        no row has a route. ``model`` translates in eval mode; its mode is restored."""
        rows = [int(i) for i in indices if self.routes[split.directions[i]].via]
        if not rows:
            return None
        rng = np.random.default_rng([self.seed, step])
        picks = [int(rng.integers(len(self.routes[split.directions[i]].via))) for i in rows]
        # Each row translated by the direction that route picked, one search per direction.
        by_via: dict[int, list[int]] = {}
        for k, (i, pick) in enumerate(zip(rows, picks)):
            by_via.setdefault(self.routes[split.directions[i]].via[pick], []).append(k)
        translations: list[list[int]] = [[] for _ in rows]
        was_training = model.training
        model.eval()
        try:
            for via, ks in by_via.items():
                sources = [self._source_for(split.src(rows[k]), self._via_tag(rows[k], via,
                                                                               split))
                           for k in ks]
                padded = pad_pairs(sources, [[]] * len(ks)).src.to(device)
                start = torch.tensor([self._start(via)] * len(ks), device=device)
                hyps = greedy_search(model, padded, self.GREEDY, start=start)
                for k, h in zip(ks, hyps):
                    translations[k] = list(h[0].tokens)
        finally:
            model.train(was_training)
        keep = [k for k, t in enumerate(translations) if t]
        if not keep:
            return None
        sources, targets, starts = [], [], []
        for k in keep:
            i = rows[k]
            own = split.src(i)
            sources.append(([int(own[0])] if self.in_source else []) + translations[k]
                           + [EOS_ID])
            targets.append(split.tgt(i))
            starts.append(self._start(int(split.directions[i])))
        batch = pad_pairs(sources, targets, width_multiple, starts)
        return replace(batch, directions=torch.tensor(
            [int(split.directions[rows[k]]) for k in keep]))

    def _via_tag(self, row: int, via: int, split: TokenizedSplit) -> int:
        route = self.routes[split.directions[row]]
        return route.via_tag[route.via.index(via)]

    def _source_for(self, source: Sequence[int], via_tag: int) -> list[int]:
        """A row's source as the direction into the third language reads it: its own tag
        replaced by that language's (a model of source tags), else as stored."""
        source = [int(t) for t in source]
        return [via_tag] + source[1:] if self.in_source else source
