"""Inline-tag augmentation's building blocks: consistent spans, tags put in, links moved."""

from __future__ import annotations

import random

from tfm.data.tag_augment import (
    aligned_span,
    insert_tags,
    pick_spans,
    shifted_links,
    token_span,
)


def test_a_source_span_gets_the_smallest_target_span_holding_its_links() -> None:
    # the cat sat -> die Katze sass ; "cat" 1 -> "Katze" 1, "sat" 2 -> "sass" 2
    links = [(0, 0), (1, 1), (2, 2)]
    assert aligned_span(links, (1, 3)) == (1, 3)
    assert aligned_span(links, (1, 2)) == (1, 2)


def test_a_span_whose_target_words_align_elsewhere_has_none() -> None:
    crossing = [(0, 1), (1, 0), (2, 2)]  # source words 0 and 1 swap places
    assert aligned_span(crossing, (0, 1)) == (1, 2)
    gap = [(0, 0), (1, 2), (2, 1)]  # source span [0, 2) covers target 0..2, but 1 is word 2's
    assert aligned_span(gap, (0, 2)) is None
    assert aligned_span([(0, 0)], (1, 2)) is None  # word 1 aligned to nothing


def test_drawn_spans_are_always_consistent() -> None:
    rng = random.Random(0)
    links = [(0, 0), (1, 2), (2, 1), (3, 3), (4, 3)]
    drawn = [pick_spans(links, 5, rng) for _ in range(50)]
    assert sum(p is not None for p in drawn) > 40
    for source, target in (p for p in drawn if p is not None):
        assert aligned_span(links, source) == target
    assert pick_spans([], 3, rng) is None


def test_tags_go_around_the_tokens_of_the_words_and_links_follow() -> None:
    src_words = [-1, 0, 1, 1, 2, -1]  # a tag, "The", "do"+"gs", "run", EOS
    span = token_span(src_words, (1, 2))
    assert span == (2, 4)
    ids = [9, 10, 11, 12, 13, 3]
    assert insert_tags(ids, span, 90, 91) == [9, 10, 90, 11, 12, 91, 13, 3]
    links = [(1, 0), (2, 1), (3, 1), (4, 2)]  # target "Die" "Hunde" "rennen"
    moved = shifted_links(links, span, (1, 2))
    assert moved == [(1, 0), (2, 1), (3, 2), (4, 2), (5, 3), (6, 4)]
