"""The one unit of text that every document format hands to translation, and takes back.

A format reads its file into segments: a paragraph, a table cell, a heading, a subtitle cue, a
catalogue entry. A segment's ``text`` is the words alone; it may hold several sentences (the
translation cuts them) and the line breaks its format keeps (a cue's lines). Markup *inside*
the text (bold, a link, a placeholder, inline code) is held apart as :class:`Tag` values over
character spans, as Bergamot's HTML translation holds a stack of open tags per span of text: the
model never sees it, and translation puts each tag back around the words it covered.

A tag carries no markup of its own, only the ``ref`` by which its format finds what to write
(an element, a run's formatting, a piece of code kept verbatim): the writer walks
``Segment.pieces()`` and writes its own markup at each opening and closing.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Tag:
    """Inline markup over ``text[start:end]`` of its segment.

    ``start == end`` is an empty element: a line break, an image, a placeholder, or text kept
    verbatim outside the model's sight (inline code, ``translate="no"``) whose content the
    format keeps under ``ref``. An empty tag lies inside the innermost span that holds its
    offset strictly (``start < offset < end``); one at a span's very start or end is inside it
    only when ``parent`` names that span's ref.
    """

    start: int
    end: int
    ref: int  # the format's own key for this tag's markup (unique within the segment)
    parent: int | None = None  # empty tags at a span's edge: the ref of the span holding it

    @property
    def empty(self) -> bool:
        return self.start == self.end


@dataclass(frozen=True)
class Segment:
    """Text to translate, with its inline tags: well nested (any two spans are disjoint or one
    holds the other; see ``check``), listed in document order (of their openings)."""

    text: str
    tags: tuple[Tag, ...] = field(default=())

    def check(self) -> None:
        """Raise ValueError unless every tag lies in the text, refs are unique, spans are well
        nested and every empty tag's ``parent`` is a span that reaches its offset."""
        refs = {t.ref: t for t in self.tags}
        if len(refs) != len(self.tags):
            raise ValueError("two tags share a ref")
        spans = [t for t in self.tags if not t.empty]
        for tag in self.tags:
            if not 0 <= tag.start <= tag.end <= len(self.text):
                raise ValueError(f"tag {tag.ref} ({tag.start}, {tag.end}) outside the text")
            parent = refs.get(tag.parent) if tag.parent is not None else None
            if tag.parent is not None and (parent is None or parent.empty or not (
                    parent.start <= tag.start <= parent.end)):
                raise ValueError(f"tag {tag.ref}'s parent {tag.parent} does not hold it")
        for i, a in enumerate(spans):
            for b in spans[i + 1:]:
                disjoint = a.end <= b.start or b.end <= a.start
                nested = (a.start <= b.start and b.end <= a.end) or (
                    b.start <= a.start and a.end <= b.end)
                if not (disjoint or nested):
                    raise ValueError(f"tags {a.ref} and {b.ref} overlap without nesting")

    def pieces(self) -> Iterator[tuple[str, str | Tag]]:
        """The segment as a writer walks it, in document order: ``("text", str)``,
        ``("open", Tag)``, ``("close", Tag)`` and ``("empty", Tag)``."""
        children = _tree(self.tags)
        yield from _walk(self.text, children, None, 0, len(self.text))


def _holder(tag: Tag, spans: list[Tag]) -> int | None:
    """The ref of the innermost span that holds ``tag`` (None: the segment itself)."""
    if tag.empty and tag.parent is not None:
        return tag.parent
    best = None
    for span in spans:
        if span is tag:
            continue
        if tag.empty:
            holds = span.start < tag.start < span.end
        else:  # for equal spans, the one listed first holds the other
            holds = span.start <= tag.start and tag.end <= span.end and (
                (span.start, span.end) != (tag.start, tag.end) or spans.index(span) <
                spans.index(tag))
        if holds and (best is None or _inside(span, best, spans)):
            best = span
    return None if best is None else best.ref


def _inside(a: Tag, b: Tag, spans: list[Tag]) -> bool:
    """Whether span ``a`` lies inside span ``b`` (equal spans: the later one is inside)."""
    if (a.start, a.end) == (b.start, b.end):
        return spans.index(a) > spans.index(b)
    return b.start <= a.start and a.end <= b.end


def _tree(tags: tuple[Tag, ...]) -> dict[int | None, list[Tag]]:
    """Each tag under its holder's ref (None: the top), in document order."""
    spans = [t for t in tags if not t.empty]
    children: dict[int | None, list[Tag]] = {}
    for tag in tags:
        children.setdefault(_holder(tag, spans), []).append(tag)
    for siblings in children.values():
        siblings.sort(key=lambda tag: tag.start)  # stable: equal starts keep the order given
    return children


def _walk(text: str, children: dict[int | None, list[Tag]], ref: int | None, start: int,
          end: int) -> Iterator[tuple[str, str | Tag]]:
    position = start
    for tag in children.get(ref, []):
        if tag.start > position:
            yield "text", text[position:tag.start]
            position = tag.start
        if tag.empty:
            yield "empty", tag
            continue
        yield "open", tag
        yield from _walk(text, children, tag.ref, tag.start, tag.end)
        yield "close", tag
        position = tag.end
    if end > position:
        yield "text", text[position:end]


def plain(text: str) -> Segment:
    """A segment without inline markup."""
    return Segment(text)
