"""Inline-tag augmentation's building blocks (Hanneman and Dinu, WMT 2020): where a tag pair
may go in a training pair, and the pair's token ids with the tags put there.

Not wired into a command yet (docs/DOCUMENTS.md, "Planned: inline-tag augmentation"): these
are the pure steps `tfm align --tag-augment` is to apply to a share of a prepared split's rows,
with the token alignments `tfm align` makes (tfm.data.word_alignment).

A tag pair goes around a source span of words and around the target span aligned to it, where
the two are consistent as phrase extraction requires (Koehn et al., 2003): the target span is
the smallest holding every target word aligned to the source span, and no word inside either
span is aligned outside the other. Then what the model learns to copy is where the alignment
puts the tag.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

Pairs = list[tuple[int, int]]
Span = tuple[int, int]  # [start, end) word positions


def aligned_span(links: Pairs, source: Span) -> Span | None:
    """The target span consistent with the source span ``source`` under the word alignment
    ``links`` ((source word, target word) pairs), or None where there is none: no target word
    aligned to it, or a word of the target span aligned outside ``source``, or a word of
    ``source`` aligned outside the target span (which cannot happen: it is the smallest)."""
    start, end = source
    inside = [j for i, j in links if start <= i < end]
    if not inside:
        return None
    target = (min(inside), max(inside) + 1)
    if any(target[0] <= j < target[1] and not start <= i < end for i, j in links):
        return None
    return target


def pick_spans(links: Pairs, n_src: int, rng: random.Random, longest: int = 4,
               tries: int = 8) -> tuple[Span, Span] | None:
    """A random source span of 1 to ``longest`` words with a consistent target span, drawn at
    most ``tries`` times; None where no draw had one."""
    for _ in range(tries if n_src else 0):
        length = rng.randint(1, min(longest, n_src))
        start = rng.randrange(n_src - length + 1)
        target = aligned_span(links, (start, start + length))
        if target is not None:
            return (start, start + length), target
    return None


def token_span(words: Sequence[int], span: Span) -> Span:
    """A word span -> the span of the tokens of its words (``words``: each token's word, -1 for
    special tokens, as tfm.data.word_alignment.token_words gives)."""
    positions = [t for t, w in enumerate(words) if span[0] <= w < span[1]]
    return positions[0], positions[-1] + 1


def insert_tags(ids: Sequence[int], span: Span, open_id: int, close_id: int) -> list[int]:
    """Token ids with ``open_id`` before token span ``span`` and ``close_id`` after it."""
    start, end = span
    return [*ids[:start], open_id, *ids[start:end], close_id, *ids[end:]]


def shifted_links(links: Sequence[tuple[int, int]], src_span: Span, tgt_span: Span
                  ) -> Pairs:
    """Token alignments of the pair after ``insert_tags`` on both sides: each position moved
    past the tags inserted before it, and each tag aligned to its counterpart."""
    def moved(position: int, span: Span) -> int:
        return position + (position >= span[0]) + (position >= span[1])

    tags = [(src_span[0], tgt_span[0]), (src_span[1] + 1, tgt_span[1] + 1)]
    return sorted([(moved(s, src_span), moved(t, tgt_span)) for s, t in links] + tags)
