"""Markdown: the words of paragraphs, headings, list items, quotes and table cells translated,
every other byte kept.

markdown-it-py (CommonMark, with GitHub's tables and strikethrough) gives each block's inline
source and its lines. The inline source is walked token by token to find what each token was
written as: emphasis, strong, strikethrough and links become tags over the words they cover
(a link's text is translated, its destination kept), an image a tag over its alt text (the
URL kept); inline code, inline HTML, autolinks and hard line breaks are empty tags, kept
verbatim. Code blocks, fences, HTML blocks, link reference definitions and the YAML front
matter lie outside every segment, but for the front matter's one-line ``title:``,
``description:`` and ``summary:`` values.

Writing replaces only the source range of each segment that came back changed: its words,
escaped where Markdown would read them as markup, with each tag's markup as the source spelt it
(``**`` or ``__``, the link's ``](url "title")``). A paragraph wrapped over several lines comes
back on one line. A block whose source cannot be matched token by token (rare: a tab inside
its indentation) is kept untranslated rather than guessed.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from tfm.documents.formats import Limits
from tfm.documents.segments import Segment, Tag
from tfm.documents.tree import check_tags, has_words
from tfm.errors import DataError

_FRONT_MATTER_END = re.compile(r"^(---|\.\.\.)[ \t]*$")
_SPECIAL = re.compile(r"([\\`*\[\]<>|~])")
_UNDERSCORE = re.compile(r"(?<![^\W_])_|_(?![^\W_])")  # inside a word it is a letter
_ENTITY = re.compile(r"&(?=#?\w+;)")
# What would start a heading or a list item: "#", "+", "-", or a number before "." or ")"
_LINE_START = re.compile(r"^(\d+(?=[.)])|(?=[#+-]))([#+.)-])")
_EMPHASIS = "*_~"
_TASK = re.compile(r"\[[ xX]\] ")  # a task list's box (GitHub), kept as written


class _Lost(Exception):
    """The inline source does not match its tokens: keep the block as it is."""


@dataclass
class _Place:
    """Where a segment's inline source lies in the file, and its tags' markup."""

    start: int
    end: int
    markup: dict[int, tuple[str, str]]  # ref -> (opening, closing); empty tags: (verbatim, "")
    quote: str | None = None  # a front matter value: its quote ("" plain); None: Markdown


class MarkdownDocument:
    def __init__(self, text: str, newline: str, bom: bool, segments: list[Segment],
                 places: list[_Place]) -> None:
        self.text, self.newline, self.bom = text, newline, bom
        self.segments, self.places = segments, places

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        # ``language``: the format has no place that names it
        """The file with each changed segment's source range rewritten, the rest as read."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} "
                             "segments")
        out, at = [], 0
        for place, old, new in zip(self.places, self.segments, translations):
            if new == old:
                continue
            new.check()
            unknown = [tag.ref for tag in new.tags if tag.ref not in place.markup]
            if unknown:
                raise ValueError(f"tags {unknown} are not the source segment's")
            rendered = (_render(new, place.markup) if place.quote is None
                        else _yaml(new.text, place.quote))
            out += [self.text[at:place.start], rendered]
            at = place.end
        out.append(self.text[at:])
        text = "".join(out)
        if self.newline != "\n":
            text = text.replace("\n", self.newline)
        return ("\ufeff" if self.bom else "").encode() + text.encode("utf-8")


def read(data: bytes, limits: Limits) -> MarkdownDocument:
    """The file's segments (see the module's docstring)."""
    if len(data) > limits.max_bytes:
        raise DataError(f"the Markdown file is {len(data)} bytes, over the limit of "
                        f"{limits.max_bytes}")
    if b"\x00" in data:
        raise DataError("not a Markdown file: it holds binary data (NUL bytes)")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise DataError(f"not a Markdown file: not UTF-8 text (byte {error.start})") from None
    bom = text.startswith("\ufeff")
    text = text.removeprefix("\ufeff")
    newline = "\r\n" if "\r\n" in text else "\n"
    text = text.replace("\r\n", "\n")
    segments, places = _segments(text, limits)
    return MarkdownDocument(text, newline, bom, segments, places)


def _parser() -> Any:
    from markdown_it import MarkdownIt

    # text_join would merge escapes and entities into text, losing how they were written
    return MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")


def _front_matter(lines: list[str]) -> int:
    """How many lines of YAML front matter (between ``---`` lines) the file starts with."""
    if not lines or lines[0].rstrip() != "---":
        return 0
    for i, line in enumerate(lines[1:], start=1):
        if _FRONT_MATTER_END.match(line):
            return i + 1
    return 0


def _segments(text: str, limits: Limits) -> tuple[list[Segment], list[_Place]]:
    lines = text.split("\n")
    starts = [0]
    for line in lines[:-1]:
        starts.append(starts[-1] + len(line) + 1)
    hidden = _front_matter(lines)
    parsed = "\n" * hidden + "\n".join(lines[hidden:])  # the same line numbers
    tokens = _parser().parse(parsed)
    segments, places, cursors = [], [], {}
    for segment, place in _front_matter_values(lines[:hidden], starts):
        segments.append(segment)
        places.append(place)
    for i, token in enumerate(tokens):
        if token.type != "inline" or token.map is None or not token.content:
            continue
        try:
            columns, escaped = _columns(token, tokens[i - 1], lines, cursors)
            segment, place = _inline(token, text, [starts[r] + c for r, c in columns], escaped)
        except _Lost:
            continue
        if has_words(segment.text):
            check_tags(segment, f"the Markdown file's line {token.map[0] + 1}")
            segments.append(segment)
            places.append(place)
    if len(segments) > limits.max_segments:
        raise DataError(f"the Markdown file holds {len(segments)} texts to translate, more "
                        f"than the limit of {limits.max_segments}")
    return segments, places


def _columns(token: Any, opener: Any, lines: list[str],
             cursors: dict[int, int]) -> tuple[list[tuple[int, int]], list[int]]:
    """(line, column) where each line of ``token.content`` starts in the source, and where
    a table cell's content has a ``|`` that the source escaped (``\\|``)."""
    first = token.map[0]
    found, escaped = [], []
    content_lines = token.content.split("\n")
    for i, piece in enumerate(content_lines):
        row = first + i
        if row >= len(lines):
            raise _Lost
        line = lines[row]
        if i == 0 and (opener.type in ("th_open", "td_open") or opener.markup.startswith("#")):
            if opener.type in ("th_open", "td_open"):  # a | in a cell was written \|
                escaped = [k for k, ch in enumerate(piece) if ch == "|"]
                piece = piece.replace("|", "\\|")
            column = line.find(piece, cursors.get(row, 0))  # after the #, or the cell's |
            if column < 0:
                raise _Lost
            cursors[row] = column + len(piece)
        else:  # a paragraph's line ends its source line, bar trailing spaces on the last
            if i == len(content_lines) - 1:
                line = line.rstrip(" \t")
            if not line.endswith(piece):
                raise _Lost
            column = len(line) - len(piece)
        found.append((row, column))
    return found, escaped


def _inline(token: Any, text: str, line_starts: list[int],
            escaped: list[int]) -> tuple[Segment, _Place]:
    """The segment of an inline token, and where its source lies in ``text``."""
    content = token.content
    offsets = [0]
    for piece in content.split("\n")[:-1]:
        offsets.append(offsets[-1] + len(piece) + 1)

    def source(at: int) -> int:
        row = bisect.bisect_right(offsets, at) - 1
        return line_starts[row] + at - offsets[row] + bisect.bisect_left(escaped, at)

    walk = _Walk(content)
    walk.tokens(token.children or [])
    if walk.pos != len(content):
        raise _Lost
    markup = {ref: tuple(text[source(a):source(b)] for a, b in spans)
              for ref, spans in walk.spans.items()}
    segment = Segment("".join(walk.parts), tuple(walk.tags))
    return segment, _Place(source(0), source(len(content)), markup)


class _Walk:
    """The inline tokens matched against their source: the words, the tags and the source
    spans of each tag's markup."""

    def __init__(self, src: str) -> None:
        self.src, self.pos = src, 0
        self.parts: list[str] = []
        self.length = 0
        self.tags: list[Tag] = []
        self.spans: dict[int, list[tuple[int, int]]] = {}
        self.open: list[tuple[int, int, int, int]] = []  # ref, text start, tag index, source
        self.refs = 0

    def expect(self, piece: str) -> None:
        if not self.src.startswith(piece, self.pos):
            raise _Lost
        self.pos += len(piece)

    def skip(self, chars: str) -> None:
        while self.pos < len(self.src) and self.src[self.pos] in chars:
            self.pos += 1

    def words(self, piece: str) -> None:
        self.parts.append(piece)
        self.length += len(piece)

    def new_ref(self) -> int:
        self.refs += 1
        return self.refs

    def empty(self, start: int) -> None:
        """An empty tag kept verbatim: the source from ``start`` to here."""
        ref = self.new_ref()
        self.spans[ref] = [(start, self.pos), (self.pos, self.pos)]
        parent = self.open[-1][0] if self.open else None
        self.tags.append(Tag(self.length, self.length, ref, parent))

    def opening(self, start: int) -> None:
        ref = self.new_ref()
        self.spans[ref] = [(start, self.pos)]
        self.open.append((ref, self.length, len(self.tags), start))

    def closing(self, start: int) -> None:
        ref, begin, index, source = self.open.pop()
        if self.length == begin:  # no words inside: the whole of it kept verbatim
            for tag in self.tags[index:]:
                del self.spans[tag.ref]
            del self.tags[index:]
            del self.spans[ref]
            self.empty(source)
            return
        self.spans[ref].append((start, self.pos))
        self.tags.insert(index, Tag(begin, self.length, ref))

    def tokens(self, tokens: list[Any]) -> None:
        i = 0
        while i < len(tokens):
            i = self.token(tokens, i)

    def token(self, tokens: list[Any], i: int) -> int:
        """Match ``tokens[i]``; the index of the next token to match."""
        token, start = tokens[i], self.pos
        kind = token.type
        if kind == "text":
            content = token.content
            box = _TASK.match(content) if start == 0 else None
            if box:
                self.expect(box.group())
                self.empty(start)
                content = content[box.end():]
            self.expect(content)
            self.words(content)
        elif kind == "text_special":
            self.expect(token.markup)
            self.words(token.content)
        elif kind == "softbreak":
            self.skip(" \t")
            self.expect("\n")
            self.skip(" \t")
            self.words(" ")
        elif kind == "hardbreak":
            self.skip(" \t\\")
            self.expect("\n")
            self.skip(" \t")
            self.empty(start)
            self.words(" ")  # the model reads two words (a line's leading space is ignored)
        elif kind == "code_inline":
            self._code(token.markup)
            self.empty(start)
        elif kind == "html_inline":
            self.expect(token.content)
            self.empty(start)
        elif kind == "link_open" and token.markup == "autolink":
            self.expect("<")
            end = self.src.find(">", self.pos)
            if end < 0:
                raise _Lost
            self.pos = end + 1
            self.empty(start)
            return _after_close(tokens, i)
        else:
            self._markup(token)
        return i + 1

    def _markup(self, token: Any) -> None:
        start, kind = self.pos, token.type
        if kind in ("em_open", "strong_open", "s_open"):
            self.expect(token.markup)
            self.opening(start)
        elif kind in ("em_close", "strong_close", "s_close"):
            self.expect(token.markup)
            self.closing(start)
        elif kind == "link_open":
            self.expect("[")
            self.opening(start)
        elif kind == "link_close":
            self.expect("]")
            self.pos = _link_tail(self.src, self.pos)
            self.closing(start)
        elif kind == "image":
            self.expect("![")
            self.opening(start)
            self.tokens(token.children or [])
            close = self.pos
            self.expect("]")
            self.pos = _link_tail(self.src, self.pos)
            self.closing(close)
        else:
            raise _Lost

    def _code(self, ticks: str) -> None:
        """Past a code span: its opening backticks and the first run as long after them."""
        self.expect(ticks)
        at = self.pos
        while True:
            found = self.src.find(ticks, at)
            if found < 0:
                raise _Lost
            end = found
            while end < len(self.src) and self.src[end] == "`":
                end += 1
            if end - found == len(ticks):
                self.pos = end
                return
            at = end


def _after_close(tokens: list[Any], i: int) -> int:
    for j in range(i + 1, len(tokens)):
        if tokens[j].type == "link_close":
            return j + 1
    raise _Lost


def _link_tail(src: str, pos: int) -> int:
    """Past what follows a link's ``]``: ``(destination "title")``, ``[label]`` or nothing."""
    from markdown_it.helpers import parseLinkDestination, parseLinkTitle

    n = len(src)

    def blank(at: int) -> int:
        while at < n and src[at] in " \t\n":
            at += 1
        return at

    if pos < n and src[pos] == "(":
        at = blank(pos + 1)
        if at < n and src[at] == ")":
            return at + 1
        destination = parseLinkDestination(src, at, n)
        if destination.ok:
            at = blank(destination.pos)
            if at < n and src[at] != ")":
                title = parseLinkTitle(src, at, n)
                at = blank(title.pos) if title.ok else at
            if at < n and src[at] == ")":
                return at + 1
    if pos < n and src[pos] == "[":
        end = src.find("]", pos + 1)
        if end >= 0:
            return end + 1
    return pos


def _render(segment: Segment, markup: dict[int, tuple[str, str]]) -> str:
    """A translated segment as Markdown source: words escaped, tags as the source spelt them,
    whitespace moved outside emphasis (``** bold**`` would not be bold)."""
    parts: list[list[Any]] = []  # [kind, source, ref]
    for kind, piece in segment.pieces():
        if kind == "text":
            if parts and "\n" in parts[-1][1]:  # a hard break's new line: no space to start it
                piece = piece.lstrip(" ")
            parts.append(["text", _escape(piece.replace("\n", " ")), None])
        elif kind == "empty":
            opening, closing = markup[piece.ref]
            spaced = opening and closing and opening[0] in _EMPHASIS
            parts.append(["empty", "" if spaced else opening + closing, piece.ref])
        else:  # emphasis over no words is no emphasis (``****``): left out, as when empty
            written = markup[piece.ref][0 if kind == "open" else 1]
            parts.append([kind, "" if piece.point and written[:1] in _EMPHASIS else written,
                          piece.ref])
    _outside_emphasis(parts)
    _intraword(parts)
    out = "".join(part[1] for part in parts).strip(" ")
    return _LINE_START.sub(r"\1\\\2", out, count=1)  # not a heading or a list item


def _escape(text: str) -> str:
    escaped = _UNDERSCORE.sub(r"\\_", _SPECIAL.sub(r"\\\1", text))
    return _ENTITY.sub(r"\\&", escaped)


def _outside_emphasis(parts: list[list[Any]]) -> None:
    for i, (kind, source, _) in enumerate(parts):
        if not source or source[0] not in _EMPHASIS:
            continue
        if kind == "open" and i + 1 < len(parts) and parts[i + 1][0] == "text":
            words = parts[i + 1][1]
            moved = len(words) - len(words.lstrip())
            parts[i + 1][1] = words[moved:]
            parts[i][1] = words[:moved] + source
        elif kind == "close" and i > 0 and parts[i - 1][0] == "text":
            words = parts[i - 1][1]
            kept = len(words.rstrip())
            parts[i - 1][1] = words[:kept]
            parts[i][1] = source + words[kept:]


def _intraword(parts: list[list[Any]]) -> None:
    """``_`` emphasis that the translation put inside a word, written ``*`` (an ``_`` there
    is a letter to Markdown, not emphasis)."""
    inside = set()
    for i, (kind, source, ref) in enumerate(parts):
        if kind not in ("open", "close") or not source.startswith("_"):
            continue  # (a space moved before the markup: not inside a word)
        if kind == "open":
            neighbour = "".join(part[1] for part in parts[:i])[-1:]
        else:  # a space moved after the markup is its neighbour
            neighbour = source[-1] if source.endswith(" ") else "".join(
                part[1] for part in parts[i + 1:])[:1]
        if neighbour.isalnum():
            inside.add(ref)
    for part in parts:
        if part[2] in inside and part[0] in ("open", "close"):
            part[1] = part[1].replace("_", "*")


_YAML_FIELD = re.compile(r"^(title|description|summary):[ \t]+(\S.*?)[ \t]*$")
_YAML_PLAIN = re.compile(r"^[^-?:,\[\]{}#&*!|>'\"%@`\s]([^:#]|:(?!\s)|(?<!\s)#)*$")


def _front_matter_values(lines: list[str], starts: list[int]) -> Iterator[tuple[Segment,
                                                                               _Place]]:
    """The front matter's ``title:``, ``description:`` and ``summary:`` values that are one
    line, plain or quoted without escapes; everything else in it is kept as written."""
    for row in range(1, max(len(lines) - 1, 1)):
        match = _YAML_FIELD.match(lines[row])
        if not match:
            continue
        value = match.group(2)
        quote = value[0] if value[0] in "'\"" else ""
        if quote and (len(value) < 2 or value[-1] != quote or "\\" in value):
            continue
        words = value[1:-1].replace("''", "'") if quote else value
        if not quote and not _YAML_PLAIN.match(value):
            continue  # a comment, an anchor, a list, a block: not a plain line of words
        if has_words(words):
            at = starts[row] + match.start(2)
            yield Segment(words), _Place(at, at + len(value), {}, quote)


def _yaml(text: str, quote: str) -> str:
    """A translated front matter value, quoted as the source was, or double-quoted where
    YAML would not read it as plain text."""
    text = " ".join(text.split())
    if quote == "'":
        return "'" + text.replace("'", "''") + "'"
    if quote == "" and _YAML_PLAIN.match(text):
        return text
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
