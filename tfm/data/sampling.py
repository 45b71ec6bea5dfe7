"""Sampling over translation directions: how much of each direction an epoch of a
multilingual run holds.

Direction i, with n_i training pairs, is drawn with probability p_i proportional to
n_i ** (1 / T) for a temperature T (T = 1: in proportion to the data, every pair once per
epoch; a large T: every direction alike), or in proportion to weights given with the corpora.
An epoch keeps the size of the data, N pairs, and holds about p_i * N pairs of direction i: a
direction drawn above its share repeats its pairs (each as often, give or take one), one drawn
below it takes a different part of them each epoch. Which pairs is a pure function of (data,
probabilities, seed, epoch), like the batches made of them (tfm.data.batching), so that a
resumed run sees exactly the epochs it would have seen.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tfm.errors import UsageError


def direction_probabilities(sizes: Sequence[int], temperature: float = 1.0,
                            weights: Sequence[float] | None = None) -> np.ndarray:
    """p_i of each direction: proportional to ``weights`` where given, else to
    sizes ** (1 / temperature)."""
    n = np.asarray(sizes, dtype=np.float64)
    if weights is not None:
        p = np.asarray(weights, dtype=np.float64)
    else:
        if temperature <= 0:
            raise UsageError(f"--sampling-temperature {temperature:g}: give a number above 0")
        p = n ** (1.0 / temperature)
    p = np.where(n > 0, p, 0.0)  # a direction without pairs cannot be drawn
    if p.sum() <= 0:
        raise UsageError("no direction has training pairs to sample")
    return p / p.sum()


def epoch_counts(sizes: Sequence[int], probabilities: np.ndarray) -> np.ndarray:
    """How many pairs of each direction an epoch of sum(sizes) pairs holds: p_i * N rounded so
    that they add up to N (the largest remainders round up; ties to the first direction)."""
    total = int(np.sum(sizes))
    exact = probabilities * total
    counts = np.floor(exact).astype(np.int64)
    short = total - int(counts.sum())
    order = np.argsort(-(exact - counts), kind="stable")
    counts[order[:short]] += 1
    return counts


def epoch_rows(directions: np.ndarray, probabilities: np.ndarray, seed: int, epoch: int
               ) -> np.ndarray | None:
    """The rows of the training split in epoch ``epoch`` (a row drawn twice appears twice,
    sorted), or None where every row is in it once: a bilingual run, or temperature 1, reads
    its data as it is, the same batches as without directions."""
    sizes = np.bincount(directions, minlength=len(probabilities))
    counts = epoch_counts(sizes, probabilities)
    if np.array_equal(counts, sizes):
        return None
    rng = np.random.default_rng([seed, epoch, 7])  # a stream of its own: not the batches'
    chosen = []
    for i, (want, have) in enumerate(zip(counts.tolist(), sizes.tolist())):
        if want == 0 or have == 0:
            continue
        rows = np.flatnonzero(directions == i)
        whole, rest = divmod(want, have)
        chosen += [rows] * whole
        if rest:
            chosen.append(rng.choice(rows, rest, replace=False))
    return np.sort(np.concatenate(chosen))
