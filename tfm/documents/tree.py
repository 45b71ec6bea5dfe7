"""Segments of an element tree (lxml), shared by the HTML, XML and XLIFF formats.

A *block* element (a paragraph, a cell, a heading) holds runs of inline content: its text,
the inline elements that follow (bold, a link, a placeholder) and their tails, up to the next
block child. Each run with words in it is one :class:`Segment`; its inline elements become
tags over the text they cover, or empty tags when they are kept whole (inline code, an
element marked ``translate="no"``, a comment). Which element is which is the format's
:class:`Rules`; the walk and the rebuild are the same for every format.

A run comes back by rebuilding its nodes from the translated segment's pieces: a span tag
is a fresh element with the original's name and attributes around the words it covers, an
empty tag a copy of the original element. A segment that comes back unchanged leaves its run
as it was read.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from tfm.documents.segments import Segment, Tag, holders
from tfm.errors import DataError

INLINE, VERBATIM, BLOCK, SKIP = "inline", "verbatim", "block", "skip"
_SPACE = re.compile(r"[ \t\n\r\f]+")
_LEAD = re.compile(r"^[ \t\n\r\f]*")
_TRAIL = re.compile(r"[ \t\n\r\f]*$")


# The most inline tags one segment may hold: placing tags costs time that grows faster than
# their number, and no real paragraph comes near (a page built to stall the server does).
MAX_TAGS = 256


def check_tags(segment: Segment, where: str) -> None:
    """Refuse a segment with more than MAX_TAGS inline tags."""
    if len(segment.tags) > MAX_TAGS:
        raise DataError(f"{where} has {len(segment.tags)} inline tags in one paragraph, more "
                        f"than {MAX_TAGS}")


def names(spaced: str) -> frozenset[str]:
    """Element names written as one string, space-separated."""
    return frozenset(spaced.split())


def has_words(text: str) -> bool:
    """Whether ``text`` has anything to translate (a letter); numbers and punctuation alone
    are kept as they are."""
    return any(ch.isalpha() for ch in text)


@dataclass(frozen=True)
class Rules:
    """How a format's elements divide into blocks and inline markup (by local name)."""

    inline: frozenset[str]  # inline markup: a tag over the words it covers
    verbatim: frozenset[str] = frozenset()  # inline, kept whole: an empty tag (code)
    skip: frozenset[str] = frozenset()  # blocks never translated (script, pre)
    block: frozenset[str] = frozenset()  # blocks even inside mixed content
    mixed: bool = False  # an unknown element among a parent's words is inline (XML)
    attributes: tuple[str, ...] = ()  # attribute values translated, each its own segment
    # empty elements that part words (a line break): where the source has no space at them,
    # the segment reads one after them, so that the model sees two words, not one
    parting: frozenset[str] = frozenset()
    opaque: frozenset[str] = frozenset()  # never looked into: their insides do not matter
    no_translate: Callable[[Any], bool] = lambda el: False
    preserve_space: Callable[[Any], bool] = lambda el: False

    def breaks(self, el: Any) -> bool:
        """Whether ``el`` ends a run wherever it stands (a block by its name)."""
        if not isinstance(el.tag, str):
            return False
        name = local(el)
        if self.mixed:
            return name in self.block or name in self.skip
        return name not in self.inline and name not in self.verbatim


def local(el: Any) -> str:
    """An element's name without namespace, lower-cased for HTML's sake."""
    tag = el.tag
    return tag.rsplit("}", 1)[-1].lower() if isinstance(tag, str) else ""


@dataclass
class Run:
    """Where one segment lies: the container's text (``anchor`` None) or a block child's
    tail, and the inline nodes after it up to the next block child."""

    container: Any
    anchor: Any
    nodes: list[Any]
    lead: str  # raw whitespace before the segment's words, kept on rebuild
    trail: str
    markup: dict[int, Any]  # tag ref -> original node
    whole: set[int] = field(default_factory=set)  # refs of nodes kept whole (empty tags)


@dataclass
class AttributeSlot:
    element: Any
    name: str


@dataclass
class Found:
    """A tree's segments and where each goes back (a Run or an AttributeSlot)."""

    segments: list[Segment] = field(default_factory=list)
    slots: list[Run | AttributeSlot] = field(default_factory=list)


def check_depth(root: Any, limit: int, what: str) -> None:
    """Refuse a tree nested deeper than ``limit`` (walked without recursion)."""
    stack = [(root, 1)]
    while stack:
        el, depth = stack.pop()
        if depth > limit:
            raise DataError(f"{what} is nested more than {limit} elements deep")
        stack.extend((child, depth + 1) for child in el)


def segments_of(root: Any, rules: Rules, max_segments: int, what: str) -> Found:
    """Every run and translated attribute under ``root``, in document order."""
    found = Found()
    breaking = _holders_of_blocks(root, rules)
    _container(root, rules, breaking, found, rules.preserve_space(root))
    for segment in found.segments:
        check_tags(segment, what)
    if rules.attributes:
        _attributes(root, rules, breaking, found)
    if len(found.segments) > max_segments:
        raise DataError(f"{what} holds {len(found.segments)} texts to translate, more than "
                        f"the limit of {max_segments}")
    return found


def whole(el: Any, rules: Rules, keep: bool, what: str) -> tuple[Segment, Run]:
    """The segment of all of ``el``'s content, every child inline (an XLIFF ``<source>``),
    and the run that puts a translation back into ``el``."""
    builder = _Builder(rules, set())
    builder.text(el.text)
    for node in el:
        builder.node(node)
    segment, lead, trail = builder.segment(keep)
    check_tags(segment, what)
    return segment, Run(el, None, list(el), lead, trail, builder.markup, builder.whole)


def _holders_of_blocks(root: Any, rules: Rules) -> set[Any]:
    """Elements with a block below them: never inline, whatever their name."""
    holders: set[Any] = set()
    stack = list(root)
    while stack:
        el = stack.pop()
        if rules.breaks(el):
            for up in el.iterancestors():
                if up in holders:
                    break
                holders.add(up)
        if local(el) not in rules.opaque:
            stack.extend(el)
    return holders


def kind(el: Any, rules: Rules, in_inline: bool, mixed: bool, breaking: set[Any]) -> str:
    """INLINE, VERBATIM, BLOCK or SKIP for ``el`` where it stands."""
    if not isinstance(el.tag, str):  # a comment, processing instruction or entity
        return VERBATIM
    name, no = local(el), rules.no_translate(el)
    inline = (name in rules.inline or name in rules.verbatim or in_inline
              or (rules.mixed and mixed and name not in rules.block and name not in rules.skip))
    if el in breaking or not inline:
        return SKIP if no or name in rules.skip or name in rules.verbatim else BLOCK
    return VERBATIM if no or name in rules.verbatim or name in rules.skip else INLINE


def _is_mixed(el: Any) -> bool:
    texts = [el.text] + [child.tail for child in el]
    return len(el) > 0 and any(t and t.strip() for t in texts)


def _container(el: Any, rules: Rules, breaking: set[Any], found: Found, keep: bool) -> None:
    """The runs of block ``el``, and of the blocks inside it, in document order."""
    mixed = _is_mixed(el)
    anchor, nodes = None, []
    for child in el:
        k = kind(child, rules, False, mixed, breaking)
        if k in (INLINE, VERBATIM):
            nodes.append(child)
            continue
        _run(el, anchor, nodes, rules, breaking, found, keep)
        if k == BLOCK:
            _container(child, rules, breaking, found, keep or rules.preserve_space(child))
        anchor, nodes = child, []
    _run(el, anchor, nodes, rules, breaking, found, keep)


def _run(el: Any, anchor: Any, nodes: list[Any], rules: Rules, breaking: set[Any],
         found: Found, keep: bool) -> None:
    start = el.text if anchor is None else anchor.tail
    if not nodes and not has_words(start or ""):
        return  # the whitespace between blocks
    builder = _Builder(rules, breaking)
    builder.text(start)
    for node in nodes:
        builder.node(node)
    segment, lead, trail = builder.segment(keep)
    if has_words(segment.text):
        found.segments.append(segment)
        found.slots.append(Run(el, anchor, list(nodes), lead, trail, builder.markup,
                               builder.whole))


class _Builder:
    """The text and tags of one run, as its inline nodes are walked."""

    def __init__(self, rules: Rules, breaking: set[Any]) -> None:
        self.rules, self.breaking = rules, breaking
        self.parts: list[str] = []
        self.length = 0
        self.tags: list[Tag] = []
        self.markup: dict[int, Any] = {}
        self.whole: set[int] = set()
        self.refs = 0
        self.open: list[int] = []

    def text(self, text: str | None) -> None:
        if text:
            self.parts.append(text)
            self.length += len(text)

    def _ref(self, node: Any) -> int:
        self.refs += 1
        ref = self.refs
        self.markup[ref] = node
        return ref

    def _empty(self, node: Any) -> None:
        parent = self.open[-1] if self.open else None
        ref = self._ref(node)
        self.whole.add(ref)
        self.tags.append(Tag(self.length, self.length, ref, parent))

    def node(self, node: Any) -> None:
        if kind(node, self.rules, True, True, self.breaking) != INLINE:
            self._empty(node)
        else:
            start, at, ref = self.length, len(self.tags), self._ref(node)
            self.open.append(ref)
            self.text(node.text)
            for child in node:
                self.node(child)
            self.open.pop()
            if self.length == start:  # nothing to translate inside: keep it whole
                for tag in self.tags[at:]:
                    del self.markup[tag.ref]
                    self.whole.discard(tag.ref)
                del self.tags[at:]
                self._empty(node)
            else:
                self.tags.insert(at, Tag(start, self.length, ref))
        if local(node) in self.rules.parting:
            self._part(node.tail)
        self.text(node.tail)

    def _part(self, tail: str | None) -> None:
        before = self.parts[-1][-1:] if self.parts else ""
        if before and not before.isspace() and not (tail or "")[:1].isspace():
            self.text(" ")

    def segment(self, keep: bool) -> tuple[Segment, str, str]:
        """The run's segment (whitespace squeezed unless ``keep``), and the raw whitespace
        before and after it that stays outside."""
        raw = "".join(self.parts)
        first = min((t.start for t in self.tags), default=len(raw))
        last = max((t.end for t in self.tags), default=0)
        lead = _LEAD.match(raw[:first]).group()
        trail = _TRAIL.search(raw[max(last, len(lead)):]).group()
        body = raw[len(lead):len(raw) - len(trail)]
        tags = [replace(t, start=t.start - len(lead), end=t.end - len(lead)) for t in self.tags]
        if not keep:
            body, tags = _squeeze(body, tags)
        return Segment(body, tuple(tags)), lead, trail


def _squeeze(text: str, tags: list[Tag]) -> tuple[str, list[Tag]]:
    """Runs of whitespace as one space (as HTML renders them), tags moved with the text; an
    empty tag (code, a placeholder) keeps a space on each side of it; a span left over no text
    (``<b> <i> </i></b>``) stays a span inside the one that held it."""
    held = holders(Segment(text, tuple(tags)))
    stops = {t.start for t in tags if t.empty}
    marks = sorted({0, len(text)} | {t.start for t in tags} | {t.end for t in tags})
    out: list[str] = []
    where: dict[int, int] = {}
    length, space = 0, False
    for start, end in zip(marks, marks[1:]):
        where[start] = length
        piece = _SPACE.sub(" ", text[start:end])
        if space and start not in stops and piece.startswith(" "):
            piece = piece[1:]  # the run goes on from the piece before
        if piece:
            out.append(piece)
            length += len(piece)
            space = piece.endswith(" ")
    where[len(text)] = length
    moved = [Tag(where[t.start], where[t.end], t.ref, t.parent, t.paired) for t in tags]
    return "".join(out), [Tag(t.start, t.end, t.ref, held[t.ref], paired=True)
                          if t.point and not before.point else t
                          for t, before in zip(moved, tags)]


def put_back(found: Found, translations: Sequence[Segment]) -> None:
    """Write ``translations`` into the tree ``found`` was read from: attributes first (the
    rebuilt runs copy their elements), then each run whose segment changed."""
    if len(translations) != len(found.segments):
        raise ValueError(f"{len(translations)} translations for {len(found.segments)} segments")
    pairs = list(zip(found.slots, found.segments, translations))
    for slot, _, new in pairs:
        if isinstance(slot, AttributeSlot):
            slot.element.set(slot.name, new.text)
    for slot, old, new in pairs:
        if isinstance(slot, Run) and new != old:
            new.check()
            rebuild(slot, new)


def rebuild(run: Run, segment: Segment) -> None:
    """Replace ``run``'s nodes by ``segment`` written with the run's markup."""
    unknown = [tag.ref for tag in segment.tags if tag.ref not in run.markup]
    if unknown:
        raise ValueError(f"tags {unknown} are not the source segment's")
    parent = run.container
    for node in run.nodes:
        parent.remove(node)
    if run.anchor is None:
        parent.text, index = None, 0
    else:
        run.anchor.tail, index = None, parent.index(run.anchor) + 1
    target = _Slot(parent, index, run.anchor)
    target.text(run.lead)
    fill(target, segment, run.markup, run.whole)
    target.text(run.trail)


def fill(target: _Slot, segment: Segment, markup: dict[int, Any], whole: set[int]) -> None:
    """Write ``segment``'s pieces into ``target``: spans as fresh elements named and
    attributed as the originals, empty tags as copies of the originals kept whole (a span
    left with no words is an empty element, never its source words again)."""
    stack = [target]
    for piece_kind, piece in segment.pieces():
        if piece_kind == "text":
            stack[-1].text(piece)
        elif piece_kind == "close":
            stack.pop()
        else:
            original = markup[piece.ref]
            if piece_kind == "open" or piece.ref not in whole:
                element = original.makeelement(original.tag, dict(original.attrib),
                                               _own_namespaces(original))
            else:
                element = copy.deepcopy(original)
                element.tail = None
            stack[-1].append(element)
            if piece_kind == "open":
                stack.append(_Slot(element, 0, None))


def _own_namespaces(el: Any) -> dict[str | None, str] | None:
    """The namespaces ``el`` declares itself (``<link xmlns:xlink=...>``), for its copy."""
    parent = el.getparent()
    inherited = parent.nsmap if parent is not None else {}
    own = {p: uri for p, uri in el.nsmap.items() if inherited.get(p) != uri}
    return own or None


class _Slot:
    """Where the next text and element of a rebuilt run go: after ``last`` (a node whose
    tail takes text) in ``parent`` at ``index``, or into ``parent.text``."""

    def __init__(self, parent: Any, index: int, anchor: Any) -> None:
        self.parent, self.index, self.last = parent, index, anchor

    def text(self, text: str | None) -> None:
        if not text:
            return
        if self.last is None:
            self.parent.text = (self.parent.text or "") + text
        else:
            self.last.tail = (self.last.tail or "") + text

    def append(self, element: Any) -> None:
        self.parent.insert(self.index, element)
        self.index += 1
        self.last = element


def _attributes(root: Any, rules: Rules, breaking: set[Any], found: Found) -> None:
    """Each translated attribute (alt, title, ...) of an element outside untranslated
    content: its own segment."""
    for el in _translated_elements(root, rules, breaking):
        for name in rules.attributes:
            value = el.get(name)
            if value is not None and has_words(value):
                found.segments.append(Segment(value))
                found.slots.append(AttributeSlot(el, name))


def _translated_elements(root: Any, rules: Rules, breaking: set[Any]) -> Iterator[Any]:
    stack = [root]
    while stack:
        el = stack.pop()
        if not isinstance(el.tag, str):
            continue
        if el is not root and (rules.no_translate(el) or local(el) in rules.skip
                               or local(el) in rules.verbatim):
            continue
        yield el
        stack.extend(reversed(list(el)))
