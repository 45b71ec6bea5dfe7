"""Inline-tag augmentation (Hanneman and Dinu, WMT 2020): the tag tokens, where a tag pair
may go in a training pair, and the pair's token ids with the tags put there.

These are the pure steps that `tfm align DATA --tag-augment SHARE` (tfm.data.tagged_dataset)
applies to a drawn share of a prepared split's rows, with the token alignments `tfm align`
makes (tfm.data.word_alignment); docs/DOCUMENTS.md, "Inline-tag augmentation".

**The tag tokens** (``TAG_TOKENS``) are generic: a sentence's paired tags are ``<g1>``..``</g1>``
up to ``<g4>``..``</g4>``, numbered by the order in which they open; its empty tags (a line
break, an image, a placeholder) ``<x1/>`` up to ``<x4/>``, numbered in order. What a tag was
(bold, a link) never reaches the model, as in Hanneman and Dinu's generic tags: the model
learns where a tag goes, and the document's own markup is put back by number.

A tag pair goes around a source span of words and around the target span aligned to it, where
the two are consistent as phrase extraction requires (Koehn et al., 2003): the target span is
the smallest holding every target word aligned to the source span, and no word inside either
span is aligned outside the other. Then what the model learns to copy is where the alignment
puts the tag.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

Pairs = list[tuple[int, int]]
Span = tuple[int, int]  # [start, end) word positions

MAX_PAIRS = 4  # paired tags a sentence may hold as tokens
MAX_EMPTY = 4  # empty tags a sentence may hold as tokens


def open_tag(n: int) -> str:
    """The token of the ``n``-th (from 1) paired tag's opening."""
    return f"<g{n}>"


def close_tag(n: int) -> str:
    return f"</g{n}>"


def empty_tag(n: int) -> str:
    """The token of the ``n``-th (from 1) empty tag."""
    return f"<x{n}/>"


TAG_TOKENS: tuple[str, ...] = (
    *(t for n in range(1, MAX_PAIRS + 1) for t in (open_tag(n), close_tag(n))),
    *(empty_tag(n) for n in range(1, MAX_EMPTY + 1)))


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


# How a drawn row is tagged: one pair, two pairs (nested or side by side), or an empty tag.
SHAPES = (("pair", 0.6), ("two pairs", 0.2), ("empty", 0.2))


@dataclass(frozen=True)
class Placed:
    """One tag put into a pair: its token, and where it goes on each side as a token position
    (before the token there) with the rank that orders tags at one position."""

    token: str
    src: int
    tgt: int
    src_rank: tuple[int, ...]
    tgt_rank: tuple[int, ...]


def draw_tags(word_links: Pairs, n_src: int, rng: random.Random) -> list[tuple[str, Span, Span]]:
    """The tags of one drawn row as (shape, source word span, target word span): a pair's
    spans, or for an empty tag the one word it follows on each side. Empty: no consistent
    span was found."""
    roll, shape = rng.random(), SHAPES[-1][0]
    for name, share in SHAPES:
        if roll < share:
            shape = name
            break
        roll -= share
    if shape == "empty":
        found = pick_spans(word_links, n_src, rng, longest=1)
        return [("empty", *found)] if found else []
    first = pick_spans(word_links, n_src, rng)
    if first is None:
        return []
    spans = [("pair", *first)]
    if shape == "two pairs":
        second = _second_span(word_links, first[0], n_src, rng)
        if second is not None:
            spans.append(("pair", *second))
    return spans


def _second_span(word_links: Pairs, first: Span, n_src: int, rng: random.Random
                 ) -> tuple[Span, Span] | None:
    """A second consistent span: inside ``first`` (nested, half the time, where it has room)
    or beside it, never overlapping it."""
    nested = first[1] - first[0] > 1 and rng.random() < 0.5
    for _ in range(8):
        if nested:
            inner = [(a, b) for a, b in word_links if first[0] <= a < first[1]]
            found = pick_spans([(a - first[0], b) for a, b in inner], first[1] - first[0],
                               rng, longest=first[1] - first[0] - 1, tries=1)
            if found is not None:
                (a, b), target = found
                source = (a + first[0], b + first[0])
                if aligned_span(word_links, source) == target:
                    return source, target
            continue
        found = pick_spans(word_links, n_src, rng, tries=1)
        if found is not None and (found[0][1] <= first[0] or found[0][0] >= first[1]):
            return found
    return None


def place_tags(drawn: list[tuple[str, Span, Span]], src_words: Sequence[int],
               tgt_words: Sequence[int]) -> list[Placed]:
    """The drawn tags as tokens at token positions, numbered by order of appearance in the
    source (pairs by their opening; empty tags apart). At one position closings come first,
    then empty tags, then openings (outer before inner), so tags nest alike on both sides."""
    pairs = sorted((d for d in drawn if d[0] == "pair"), key=lambda d: (d[1][0], -d[1][1]))
    empties = sorted((d for d in drawn if d[0] == "empty"), key=lambda d: d[1][0])
    placed = []
    for n, (_, source, target) in enumerate(pairs, 1):
        s, t = token_span(src_words, source), token_span(tgt_words, target)
        placed.append(Placed(open_tag(n), s[0], t[0], (2, -source[1], n), (2, -target[1], n)))
        placed.append(Placed(close_tag(n), s[1], t[1], (0, -source[0], -n),
                             (0, -target[0], -n)))
    for n, (_, source, target) in enumerate(empties, 1):
        s, t = token_span(src_words, source), token_span(tgt_words, target)
        placed.append(Placed(empty_tag(n), s[1], t[1], (1, n), (1, n)))
    return placed


def insert_placed(ids: Sequence[int], tags: list[tuple[int, tuple[int, ...], int]]
                  ) -> tuple[list[int], list[int], list[int]]:
    """``ids`` with each tag (position, rank, token id) put before the token at its position;
    returns the new ids, each old token's new position, and each tag's new position (in the
    order given)."""
    order = sorted(range(len(tags)), key=lambda k: (tags[k][0], tags[k][1]))
    out: list[int] = []
    moved, where = [0] * len(ids), [0] * len(tags)
    k = 0
    for position in range(len(ids) + 1):
        while k < len(order) and tags[order[k]][0] == position:
            where[order[k]] = len(out)
            out.append(tags[order[k]][2])
            k += 1
        if position < len(ids):
            moved[position] = len(out)
            out.append(int(ids[position]))
    return out, moved, where


def tag_row(src: Sequence[int], tgt: Sequence[int], links: Sequence[tuple[int, int]],
            placed: list[Placed], ids: dict[str, int], tgt_ids: dict[str, int] | None = None
            ) -> tuple[list[int], list[int], Pairs]:
    """A row's source and target ids with ``placed`` tags put in (``ids``: each tag token's
    id; ``tgt_ids``: the target side's, where its vocabulary is another), and its token
    alignments moved with them, each tag aligned to its counterpart."""
    tgt_ids = ids if tgt_ids is None else tgt_ids
    new_src, src_moved, src_at = insert_placed(src, [(p.src, p.src_rank, ids[p.token])
                                                     for p in placed])
    new_tgt, tgt_moved, tgt_at = insert_placed(tgt, [(p.tgt, p.tgt_rank, tgt_ids[p.token])
                                                     for p in placed])
    moved = [(src_moved[s], tgt_moved[t]) for s, t in links]
    return new_src, new_tgt, sorted(moved + list(zip(src_at, tgt_at)))


def row_rng(seed: int, row: int) -> random.Random:
    """The random draws of row ``row``: a pure function of (seed, row), so that a row is
    tagged alike whatever else the split holds and however it is read."""
    return random.Random(f"tfm-tags:{seed}:{row}")
