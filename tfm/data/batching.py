"""Token-sized, length-bucketed batches, and the collate step that pads them into tensors.

An epoch's batches are a pure function of (lengths, max_tokens, seed, epoch): a run resumed at
batch k of epoch e sees exactly the batches it would have seen, and each process of a
multi-process run takes its own shard of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from torch import Tensor

from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID
from tfm.data.word_alignment import TokenAlignments


def batch_sizes(src_lengths: np.ndarray, tgt_lengths: np.ndarray) -> np.ndarray:
    """Padded positions one example needs: its source (EOS included) or its decoder input
    (BOS + target), whichever is longer."""
    return np.maximum(src_lengths, tgt_lengths + 1)


def make_batches(
    src_lengths: np.ndarray,
    tgt_lengths: np.ndarray,
    max_tokens: int,
    seed: int = 0,
    epoch: int = 0,
    shuffle: bool = True,
    rows: np.ndarray | None = None,
) -> list[np.ndarray]:
    """Indices of each batch, so that rows x longest example <= ``max_tokens``; of the
    examples ``rows`` (an epoch's draw over directions, tfm.data.sampling) where given, else
    of every example once.

    Examples are sorted by their padded size (the longer of source and decoder input), then
    source and target length, with ties broken at random, so that a batch holds sentences of
    nearly one length on both sides (little padding) and the batches differ from epoch to
    epoch; then the order of the batches is shuffled. Sorting by the padded size first pads
    less than sorting by source length first (bench/data.py; docs/BENCHMARKS.md).
    """
    if rows is not None:
        return [rows[b] for b in make_batches(src_lengths[rows], tgt_lengths[rows], max_tokens,
                                              seed, epoch, shuffle)]
    n = len(src_lengths)
    rng = np.random.default_rng([seed, epoch])
    tie_break = rng.permutation(n) if shuffle else np.arange(n)
    sizes = batch_sizes(src_lengths, tgt_lengths)
    order = np.lexsort((tie_break, tgt_lengths, src_lengths, sizes))  # last key sorts first
    sizes = sizes[order]

    batches = []
    start = 0
    longest = 0
    for i in range(n):
        longest_with_i = max(longest, int(sizes[i]))
        if i > start and longest_with_i * (i - start + 1) > max_tokens:
            batches.append(order[start:i])
            start, longest_with_i = i, int(sizes[i])
        longest = longest_with_i
    if start < n:
        batches.append(order[start:n])
    if shuffle:
        batches = [batches[i] for i in rng.permutation(len(batches))]
    return batches


def shard(batches: list[np.ndarray], rank: int, world_size: int) -> list[np.ndarray]:
    """This process's share of the batches: every ``world_size``-th one, equally many per
    process (a remainder is dropped) so that all processes step together."""
    usable = len(batches) // world_size * world_size
    return batches[rank:usable:world_size]


@dataclass
class Batch:
    """Padded tensors of one batch.

    src (B, S): source ids + EOS; tgt_in (B, T): BOS + target ids; tgt_out (B, T): target ids +
    EOS, the labels. Padding is PAD_ID in all three.
    """

    src: Tensor
    tgt_in: Tensor
    tgt_out: Tensor
    # (B,) each row's direction, an index into the dataset's directions (``collate`` sets it;
    # the multilingual training levers read it: tfm.training.multilingual)
    directions: Tensor | None = None
    # (B, T, S) the guided-alignment targets (``alignment_targets``): row t is the distribution
    # over the source positions aligned to label t (zeros: none); None: not asked
    alignment: Tensor | None = None

    @property
    def src_mask(self) -> Tensor:
        """(B, S) True for real source tokens."""
        return self.src != PAD_ID

    @property
    def tgt_mask(self) -> Tensor:
        """(B, T) True for real target positions."""
        return self.tgt_out != PAD_ID

    @property
    def n_src_tokens(self) -> int:
        return int(self.src_mask.sum())

    @property
    def n_tgt_tokens(self) -> int:
        return int(self.tgt_mask.sum())

    def to(self, device: torch.device) -> Batch:
        return Batch(*(t.to(device, non_blocking=True) for t in (self.src, self.tgt_in,
                                                                 self.tgt_out)),
                     *(None if t is None else t.to(device, non_blocking=True)
                       for t in (self.directions, self.alignment)))


def collate(split: TokenizedSplit, indices: np.ndarray, width_multiple: int = 1,
            starts: Sequence[Sequence[int]] | None = None,
            alignments: TokenAlignments | None = None) -> Batch:
    """Rows ``indices`` of a split -> a padded Batch (see ``pad_pairs``). ``starts``: the
    forced decoder start of each of the dataset's directions (prepare.json's
    ``decoder_starts``: a model of language codes), by each row's direction; None: BOS.
    ``alignments``: the split's token alignments (`tfm align`), made the batch's guided
    alignment targets."""
    directions = split.directions[indices]
    rows = None if starts is None else [starts[d] for d in directions]
    batch = pad_pairs([split.src(i) for i in indices], [split.tgt(i) for i in indices],
                      width_multiple, rows)
    batch.directions = torch.from_numpy(np.asarray(directions, dtype=np.int64))
    if alignments is not None:
        fed = [0 if rows is None else len(rows[r]) - 1 for r in range(len(indices))]
        batch.alignment = alignment_targets([alignments.row(i) for i in indices], fed,
                                            tuple(batch.tgt_out.shape), batch.src.size(1))
    return batch


def alignment_targets(pairs: Sequence[np.ndarray], fed: Sequence[int], shape: tuple[int, int],
                      src_width: int) -> Tensor:
    """Each row's token alignments ((source position, target position) pairs, as `tfm align`
    stores them) -> (B, T, S) distributions: the label at column ``fed + t`` of ``tgt_out``
    (``fed``: forced decoder tokens before the first label) spreads 1 evenly over the source
    positions aligned to target token t; an unaligned label's row is all zeros."""
    targets = np.zeros((*shape, src_width), dtype=np.float32)
    for row, (links, shift) in enumerate(zip(pairs, fed)):
        if len(links):
            targets[row, links[:, 1] + shift, links[:, 0]] = 1.0
    totals = targets.sum(axis=2, keepdims=True)
    return torch.from_numpy(np.divide(targets, totals, out=targets, where=totals > 0))


def pad_pairs(sources: Sequence[Sequence[int]], targets: Sequence[Sequence[int]],
              width_multiple: int = 1, starts: Sequence[Sequence[int]] | None = None) -> Batch:
    """Source ids (EOS included, as a split stores them) and target ids (no special tokens) ->
    a padded Batch: ``tgt_in`` is BOS + target, ``tgt_out`` target + EOS. ``starts``: each
    pair's forced decoder tokens (tfm.decoding.steps.decoder_start; None: BOS alone), fed
    before the target as the search feeds them, and never labels: ``tgt_in`` is start +
    target, ``tgt_out`` padding under all of them but the last, then target + EOS. With
    ``width_multiple`` > 1 each tensor is padded wider, to a multiple of it: the rows and their
    tokens are the same, the extra columns are padding (masked, and no labels)."""
    b = len(sources)
    starts = starts if starts is not None else [(BOS_ID,)] * b
    src = np.full((b, _round_up(max(len(s) for s in sources), width_multiple)), PAD_ID,
                  dtype=np.int64)
    longest = max(len(t) + len(f) for t, f in zip(targets, starts))
    tgt_in = np.full((b, _round_up(longest, width_multiple)), PAD_ID, dtype=np.int64)
    tgt_out = np.full_like(tgt_in, PAD_ID)
    for row, (s, t, f) in enumerate(zip(sources, targets, starts)):
        src[row, : len(s)] = s
        fed = len(f) - 1  # the forced tokens before the first one that predicts a label
        tgt_in[row, : len(f)] = f
        tgt_in[row, len(f) : len(f) + len(t)] = t
        tgt_out[row, fed : fed + len(t)] = t
        tgt_out[row, fed + len(t)] = EOS_ID
    return Batch(torch.from_numpy(src), torch.from_numpy(tgt_in), torch.from_numpy(tgt_out))


def _round_up(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple
