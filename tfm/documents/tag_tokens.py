"""Inline tags as tokens, for a model trained to copy them (`tfm align --tag-augment`).

A model whose metadata lists inline-tag tokens (ModelInfo.inline_tags; tfm.data.tag_augment)
reads a sentence's inline tags as those tokens: ``mark`` puts each tag that lies inside one
sentence into its text as the token of its kind and order (paired tags ``<g1>``.. by the order
they open, empty ones ``<x1/>``.. in order), where training put them: glued to the end of the
word before (an opening, so that the next word keeps its word-start mark as in training) or
after (a closing, an empty tag), never inside a word. ``read`` takes the tokens back out of
the translation and says where each landed, as a character offset in the clean text; a tag
the model lost, doubled or opened after its closing gives None, and the caller places that
sentence's tags by alignment instead (tfm.documents.translate.project).

A tag over a whole sentence, across sentences, in the whitespace between them or at a
sentence's edge is not sent: projection maps it exactly.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tfm.data.tag_augment import MAX_EMPTY, MAX_PAIRS, close_tag, empty_tag, open_tag
from tfm.documents.segments import Segment, Tag

_WORD = re.compile(r"\S+")
Event = tuple[str, int]  # ("open" | "close" | "empty", the tag's ref)


@dataclass(frozen=True)
class Marked:
    """A sentence with tag tokens in it (``text``), and the event each token stands for."""

    text: str
    tokens: dict[str, Event]


def mark(segment: Segment, start: int, sentence: str, inventory: Sequence[str]
         ) -> Marked | None:
    """``sentence`` (``segment.text[start:]``'s first ``len(sentence)`` characters) with the
    tokens of the tags inside it; None where none goes in, or they would not nest once moved
    to word edges, or there are more than the inventory holds."""
    if literal(sentence, inventory):  # the text's own "<g1>" would read as a tag's token
        return None
    end = start + len(sentence)
    words = [(start + m.start(), start + m.end()) for m in _WORD.finditer(sentence)]
    points: list[tuple[int, int, Event]] = []
    for order, (kind, tag) in enumerate(e for e in segment.pieces() if e[0] != "text"):
        if isinstance(tag, Tag) and _inside(tag, start, end) and _covers_a_word(tag, words):
            point = _point(kind, tag, words, start)
            points.append((point, order, (kind, tag.ref)))
    points.sort()
    tokens = _numbered([event for _, _, event in points], inventory)
    if tokens is None:
        return None
    by_event = {event: token for token, event in tokens.items()}
    text, position = [], start
    for point, _, event in points:
        text += [sentence[position - start:point - start], by_event[event]]
        position = point
    text.append(sentence[position - start:])
    return Marked("".join(text), tokens)


def literal(sentence: str, inventory: Sequence[str]) -> tuple[str, ...]:
    """The inventory's tokens that ``sentence`` holds as text ("the <x1/> element" in a
    manual): the tokenizer reads them as the tokens, so the model copies them; they are
    the text's own, kept in its translation and never taken for a tag."""
    return tuple(token for token in inventory if token in sentence)


def _inside(tag: Tag, start: int, end: int) -> bool:
    """Whether a tag is one to send with this sentence (see the module)."""
    if tag.empty:
        return start < tag.start < end
    return start <= tag.start and tag.end <= end and (tag.start, tag.end) != (start, end)


def _covers_a_word(tag: Tag, words: list[tuple[int, int]]) -> bool:
    return tag.empty or any(a < tag.end and tag.start < b for a, b in words)


def _point(kind: str, tag: Tag, words: list[tuple[int, int]], start: int) -> int:
    """Where an edge goes: an opening at the end of the word before its first word (or the
    sentence's start); a closing at the end of its last word; an empty tag at the end of the
    word it is in or follows (or the sentence's start)."""
    if kind == "open":
        first = next(k for k, (a, b) in enumerate(words) if b > tag.start)
        return words[first - 1][1] if first else start
    if kind == "close":
        return [b for a, b in words if a < tag.end][-1]
    ends = [b for a, b in words if a < tag.start]
    return ends[-1] if ends else start


def _numbered(events: list[Event], inventory: Sequence[str]) -> dict[str, Event] | None:
    """Each event's token, numbered in order (None: nothing, not nested, or too many)."""
    tokens: dict[str, Event] = {}
    open_numbers: dict[int, int] = {}
    stack: list[int] = []
    pairs = empties = 0
    for kind, ref in events:
        if kind == "open":
            pairs += 1
            open_numbers[ref] = pairs
            stack.append(ref)
            tokens[open_tag(pairs)] = (kind, ref)
        elif kind == "close":
            if not stack or stack.pop() != ref:
                return None
            tokens[close_tag(open_numbers[ref])] = (kind, ref)
        else:
            empties += 1
            tokens[empty_tag(empties)] = (kind, ref)
    if not tokens or pairs > MAX_PAIRS or empties > MAX_EMPTY or stack:
        return None
    return tokens if all(t in inventory for t in tokens) else None


def read(text: str, inventory: Sequence[str], marked: Marked | None
         ) -> tuple[str, dict[Event, int] | None]:
    """A translation's clean text (every inventory token taken out, the spaces around it
    made single) and where each of ``marked``'s tags landed in it: an opening before the
    word after it, a closing after the word before it. None: no tags were sent, or the model
    lost, doubled or added one, or put a closing before its opening."""
    found, clean = _strip(text, inventory)
    if marked is None:
        return clean, None
    tokens = [token for token, _ in found]
    if sorted(tokens) != sorted(marked.tokens):
        return clean, None
    placed: dict[Event, int] = {}
    for token, at in found:
        kind, ref = marked.tokens[token]
        if kind == "open":
            while at < len(clean) and clean[at].isspace():
                at += 1
        elif kind == "close":
            while at > 0 and clean[at - 1].isspace():
                at -= 1
        placed[kind, ref] = at
    if any(placed["open", ref] > placed["close", ref] for kind, ref in placed if kind == "open"):
        return clean, None
    return clean, placed


def _strip(text: str, inventory: Sequence[str]) -> tuple[list[tuple[str, int]], str]:
    """The inventory tokens of ``text`` with their offsets in the text without them, and that
    text: no space at its ends, none doubled where a token was taken out."""
    pattern = "(" + "|".join(re.escape(t) for t in sorted(inventory, key=len, reverse=True)) \
        + ")"
    found: list[tuple[str, int]] = []
    clean = ""
    for piece in re.split(pattern, text) if inventory else [text]:
        if piece in inventory:
            found.append((piece, len(clean)))
            continue
        if not clean or clean[-1].isspace():
            piece = piece.lstrip()
        clean += piece
    end = len(clean.rstrip())
    return [(token, min(at, end)) for token, at in found], clean[:end]


def clean_words(text: str, inventory: Sequence[str]) -> list[int | None]:
    """For each whitespace word of a translation with tag tokens, its word in the clean text
    (None: a word of tag tokens only), to carry an alignment over to the clean text."""
    out: list[int | None] = []
    n = 0
    for word in _WORD.findall(text):
        if _strip(word, inventory)[1]:
            out.append(n)
            n += 1
        else:
            out.append(None)
    return out
