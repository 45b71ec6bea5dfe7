"""Markup written inside a string (a subtitle's ``<i>``, a catalogue's ``<b>`` and ``%s``) taken
out of the text as tags.

Formats whose library hands over text with markup still in it (srt, webvtt-py, polib) find their
markup by a pattern and say what each match is: an opening or a closing of a named element (a
pair becomes a span over the words between), text (an entity: its character), or anything else
kept verbatim as an empty tag (a placeholder, a code, a stray or unclosed tag). ``markup`` is
the document's list that a tag's ``ref`` indexes: the verbatim string of an empty tag, the
(opening, closing) pair of a span.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from tfm.documents.segments import Segment, Tag
from tfm.errors import DataError

Markup = str | tuple[str, str]  # an empty tag's verbatim text; a span's opening and closing
# What a match is: ("open", name), ("close", name), ("text", its characters), ("empty", "")
Classify = Callable[[str], tuple[str, str]]

MAX_TAGS = 1000  # inline tags in one segment (a subtitle or a paragraph has a handful)
_TAG = re.compile(r"<\s*(/?)\s*([A-Za-z][^\s.>/]*)")


def html_like(match: str) -> tuple[str, str]:
    """``<name ...>`` opens ``name``, ``</name>`` closes it; anything else is kept as it is."""
    found = _TAG.match(match)
    if found is None or match.endswith("/>"):
        return "empty", ""
    return ("close" if found.group(1) else "open"), found.group(2).lower()


def segment(text: str, pattern: re.Pattern[str], markup: list[Markup],
            classify: Classify = html_like, where: str = "a segment") -> Segment:
    """``text`` without the matches of ``pattern``, each held apart as a tag whose markup is
    appended to ``markup``; refused when it holds more than :data:`MAX_TAGS` (``where``
    names it)."""
    read = _Reader(markup, classify).read(text, pattern)
    check_tags(read, where)
    return read


def check_tags(segment: Segment, where: str) -> None:
    """Refuse a segment of more than :data:`MAX_TAGS` tags: placing and writing tags costs
    more than linear time in their number, and no real sentence holds so many."""
    if len(segment.tags) > MAX_TAGS:
        raise DataError(f"{where} holds {len(segment.tags)} inline tags, over the limit of "
                        f"{MAX_TAGS}")


def render(segment: Segment, markup: list[Markup]) -> str:
    """The segment's text with each tag's markup written back in its place."""
    out = []
    for kind, piece in segment.pieces():
        if kind == "text":
            out.append(str(piece))
        else:
            out.append(written(kind, markup[piece.ref]))
    return "".join(out)


def written(kind: str, markup: Markup) -> str:
    """What a piece of kind ``open``, ``close`` or ``empty`` writes (an empty span: both)."""
    if isinstance(markup, str):
        return markup if kind == "empty" else ""
    return {"open": markup[0], "close": markup[1]}.get(kind, markup[0] + markup[1])


class _Reader:
    def __init__(self, markup: list[Markup], classify: Classify) -> None:
        self.markup, self.classify = markup, classify
        self.text: list[str] = []
        self.length = 0
        self.tags: list[Tag | None] = []  # in document order; a span's slot filled at its close
        self.open: list[tuple[str, int, int, str]] = []  # name, slot, start, opening
        self.holders: dict[int, list[int]] = {}  # an empty tag's slot: the spans open over it

    def read(self, text: str, pattern: re.Pattern[str]) -> Segment:
        position = 0
        for match in pattern.finditer(text):
            self._text(text[position:match.start()])
            self._markup(match.group())
            position = match.end()
        self._text(text[position:])
        for _, slot, start, opening in self.open:  # never closed: kept where it stood
            self._empty(opening, slot, start)
        return Segment("".join(self.text), self._finished())

    def _text(self, text: str) -> None:
        self.text.append(text)
        self.length += len(text)

    def _markup(self, markup: str) -> None:
        kind, value = self.classify(markup)
        if kind == "text":
            self._text(value)
        elif kind == "open":
            self.holders[len(self.tags)] = [s for _, s, _, _ in self.open]
            self.open.append((value, len(self.tags), self.length, markup))
            self.tags.append(None)
        elif kind == "close" and self.open and self.open[-1][0] == value:
            _, slot, start, opening = self.open.pop()
            self.markup.append((opening, markup))
            self.tags[slot] = Tag(start, self.length, len(self.markup) - 1,
                                  paired=start == self.length)  # <b></b>: a span of no text
        else:  # a code, a placeholder, a close that closes nothing open
            self._empty(markup, None, self.length)

    def _empty(self, markup: str, slot: int | None, offset: int) -> None:
        self.markup.append(markup)
        tag = Tag(offset, offset, len(self.markup) - 1)
        if slot is None:
            slot = len(self.tags)
            self.tags.append(tag)
        else:
            self.tags[slot] = tag
        self.holders[slot] = [s for _, s, _, _ in self.open if s < slot]

    def _finished(self) -> tuple[Tag, ...]:
        """The tags, each of no width (empty, or a span over no text) inside the innermost
        span that was open over it (named as its ``parent``, which decides where it goes when
        it sits at the span's edge: ``<b><i></i></b>`` stays nested)."""
        tags: list[Tag] = []
        for slot, tag in enumerate(self.tags):
            assert tag is not None
            spans = [self.tags[s] for s in self.holders.get(slot, [])]
            spans = [s for s in spans if s is not None and not s.empty]
            if tag.point and spans:
                tag = Tag(tag.start, tag.end, tag.ref, spans[-1].ref, tag.paired)
            tags.append(tag)
        return tuple(tags)
