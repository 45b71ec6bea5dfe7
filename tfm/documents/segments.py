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
    format keeps under ``ref``; unless ``paired``: a span that opens and closes over no text
    (bold whose words a translation left out), still written as an opening and a closing with
    the tags it held inside it. A tag of no width (empty or paired) lies inside the innermost
    span that holds its offset strictly (``start < offset < end``); one at a span's very start
    or end is inside it only when ``parent`` names that span's ref.
    """

    start: int
    end: int
    ref: int  # the format's own key for this tag's markup (unique within the segment)
    parent: int | None = None  # tags of no width at a span's edge: the span holding it
    paired: bool = False  # start == end is a span over no text, not an empty element

    @property
    def empty(self) -> bool:
        """An empty element (written once), not a span (written as an opening and a closing)."""
        return self.start == self.end and not self.paired

    @property
    def point(self) -> bool:
        """Of no width: placed by its offset and ``parent``, not by a span's extent."""
        return self.start == self.end


@dataclass(frozen=True)
class Segment:
    """Text to translate, with its inline tags: well nested (any two spans are disjoint or one
    holds the other; see ``check``), listed in document order (of their openings)."""

    text: str
    tags: tuple[Tag, ...] = field(default=())

    def check(self) -> None:
        """Raise ValueError unless every tag lies in the text, refs are unique, spans are well
        nested and every ``parent`` is a span that reaches its tag's offset and does not lie
        inside it."""
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
        _check_parents(refs)
        # Outermost first, each span must lie inside the innermost still open or after it.
        stack: list[Tag] = []
        for span in sorted(spans, key=lambda t: (t.start, -t.end)):
            while stack and stack[-1].end <= span.start:
                stack.pop()
            if stack and span.end > stack[-1].end:
                raise ValueError(f"tags {stack[-1].ref} and {span.ref} overlap without nesting")
            stack.append(span)

    def pieces(self) -> Iterator[tuple[str, str | Tag]]:
        """The segment as a writer walks it, in document order: ``("text", str)``,
        ``("open", Tag)``, ``("close", Tag)`` and ``("empty", Tag)``."""
        children = _tree(self.tags)
        yield from _walk(self.text, children, None, 0, len(self.text))


def holders(segment: Segment) -> dict[int, int | None]:
    """Each tag's ref: the ref of the span it lies inside (None: the top), as ``pieces``
    writes it."""
    held: dict[int, int | None] = {}
    stack: list[int] = []
    for kind, piece in segment.pieces():
        if not isinstance(piece, Tag):
            continue
        if kind == "close":
            stack.pop()
            continue
        held[piece.ref] = stack[-1] if stack else None
        if kind == "open":
            stack.append(piece.ref)
    return held


def _check_parents(refs: dict[int, Tag]) -> None:
    """Refuse a tag that is its own ancestor by ``parent`` (spans of no width may name each
    other): it would be held by nothing, and written nowhere."""
    for tag in refs.values():
        seen, parent = {tag.ref}, tag.parent
        while parent is not None and parent in refs and refs[parent].point:
            if parent in seen:
                raise ValueError(f"tag {tag.ref} is inside itself by its parents")
            seen.add(parent)
            parent = refs[parent].parent


def _tree(tags: tuple[Tag, ...]) -> dict[int | None, list[Tag]]:
    """Each tag under its holder's ref (None: the top), in document order.

    Spans sorted outermost first (start, then the farther end, then the order given) meet their
    holder on a stack of open spans, as a parser meets elements; each tag of no width (empty or
    paired) is held by its ``parent`` or else the innermost span that holds its offset
    strictly. O(n log n) for n tags.
    """
    order = {id(tag): i for i, tag in enumerate(tags)}
    spans = sorted((t for t in tags if not t.point),
                   key=lambda t: (t.start, -t.end, order[id(t)]))
    empties = sorted((t for t in tags if t.point), key=lambda t: (t.start, order[id(t)]))
    children: dict[int | None, list[Tag]] = {}
    stack: list[Tag] = []
    waiting = iter(empties)
    empty = next(waiting, None)
    for span in [*spans, None]:
        start = span.start if span is not None else None
        # empty tags before this span opens (or at its start, which is outside it)
        while empty is not None and (start is None or empty.start <= start):
            _place_empty(empty, stack, children)
            empty = next(waiting, None)
        if span is None:
            break
        while stack and stack[-1].end <= span.start:
            stack.pop()
        holder = stack[-1].ref if stack else None
        children.setdefault(holder, []).append(span)
        stack.append(span)
    for siblings in children.values():
        siblings.sort(key=lambda tag: (tag.start, order[id(tag)]))
    return children


def _place_empty(tag: Tag, stack: list[Tag], children: dict[int | None, list[Tag]]) -> None:
    """A tag of no width under its parent, or the innermost open span holding it strictly."""
    if tag.parent is not None:
        children.setdefault(tag.parent, []).append(tag)
        return
    while stack and stack[-1].end <= tag.start:
        stack.pop()
    holder = next((s.ref for s in reversed(stack) if s.start < tag.start < s.end), None)
    children.setdefault(holder, []).append(tag)


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
