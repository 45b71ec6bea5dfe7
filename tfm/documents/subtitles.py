"""Subtitles: SubRip (.srt) and WebVTT (.vtt), a segment per cue, everything else byte for byte.

A cue's text lines are translated as one segment, joined by a space (a cue is usually one or two
sentences broken over two lines for the screen), and the translation is wrapped again into as
many lines as the cue had: broken at the spaces that balance the lines best, no line over
:data:`LINE_WIDTH` characters where the words allow. A two-speaker cue (each line opens with a
dash) is broken before each speaker's dash instead. Inline markup (``<i>``, ``<b>``, ``<u>``,
``<font color=...>``; WebVTT's ``<c.class>``, ``<v Speaker>``, ``<ruby>``, ``<lang>``) becomes
tags over the words it covers; what is not words (an ASS position code ``{\\an8}``, a karaoke
timestamp ``<00:01.500>``, a stray tag) is an empty tag written back as it was.

The cue numbers, the timing lines with their cue settings (``align:start position:10%``), the cue
identifiers, the WebVTT header and its NOTE, STYLE and REGION blocks, blank lines, line endings
and a byte-order mark are never touched: the file is cut into blocks at blank lines and only the
cues' text lines are replaced. Neither library can do that (``srt.compose`` writes every
timestamp in its own form, renumbers and writes LF line endings; webvtt-py rewrites
``NOTE text`` as ``NOTE`` + a line and drops REGION blocks), so they check what matters: each
timestamp is read by its format's library (``srt.srt_timestamp_to_timedelta``, webvtt-py's
``Timestamp.from_string``), and the tests parse every output with ``srt.parse`` and
``webvtt.from_buffer``.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

from tfm.documents import inline
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.errors import DataError

LINE_WIDTH = 42  # characters a subtitle line holds (the Netflix and BBC guidelines' limit)

_LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")
_TIMING = re.compile(r"^\s*(\S+?)[ \t]*-->[ \t]*(\S+)(.*)$")
# Markup inside a cue: a tag, an ASS override code ({\an8}); WebVTT also has entities.
_SRT_MARKUP = re.compile(r"<\s*/?\s*[A-Za-z][^<>]*>|\{\\[^{}]*\}")
_VTT_MARKUP = re.compile(r"<[^<>]*>|&(?:amp|lt|gt|nbsp|lrm|rlm);")
_ENTITIES = {"&amp;": "&", "&lt;": "<", "&gt;": ">", "&nbsp;": "\u00a0", "&lrm;": "\u200e",
             "&rlm;": "\u200f"}
_KEPT = re.compile(r"(NOTE|STYLE|REGION)([ \t\r\n]|$)")  # WebVTT's blocks that are not cues
_DASHES = "-\u2013\u2014"  # a speaker's turn in a two-speaker cue


@dataclass
class _Cue:
    """A cue's text lines as read, and what writing its translation needs."""

    original: str  # the text lines with their line endings, as in the file
    lines: int  # how many text lines the translation is wrapped into
    eol: str  # the line ending of its lines
    tail: str  # the last line's ending (none at the end of a file without one)
    dialogue: bool  # each line opens with a dash: break before the dashes
    segment: int  # its index in segments


@dataclass
class SubtitleDocument:
    """A subtitle file read into cue segments; ``write`` puts translations in their place."""

    segments: list[Segment]
    vtt: bool
    parts: list[str | _Cue] = field(repr=False)  # verbatim text and cues, in file order
    markup: list[inline.Markup] = field(repr=False)  # what a tag's ref writes
    escape: str = ""  # WebVTT: the characters written back as entities

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        # ``language``: the format has no place that names it
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} cues")
        out = []
        for part in self.parts:
            if isinstance(part, str):
                out.append(part)
            elif translations[part.segment] == self.segments[part.segment]:
                out.append(part.original)  # unchanged: its lines as they were
            else:
                out.append(self._cue_text(translations[part.segment], part))
        return "".join(out).encode("utf-8")

    def _cue_text(self, segment: Segment, cue: _Cue) -> str:
        """The translated cue's lines: wrapped, markup put back, each line ended as before."""
        text = re.sub(r"[\r\n]", " ", segment.text)  # the same length: tags stay in place
        breaks = wrap_points(text, cue.lines, cue.dialogue)
        table = {ord(value): entity for entity, value in _ENTITIES.items()
                 if value in self.escape}
        out, position = [], 0
        for kind, piece in segment.pieces():
            if kind != "text":
                out.append(inline.written(kind, self.markup[piece.ref]))
                continue
            end = position + len(piece)
            for cut in breaks[bisect.bisect_left(breaks, position):
                              bisect.bisect_left(breaks, end)]:
                out += [text[position:cut].translate(table), cue.eol]
                position = cut + 1
            out.append(text[position:end].translate(table))
            position = end
        return "".join(out) + cue.tail


def read(data: bytes, limits: Limits) -> SubtitleDocument:
    """A SubRip or WebVTT file, told apart by WebVTT's ``WEBVTT`` first line."""
    if data.lstrip(b"\xef\xbb\xbf").startswith(b"WEBVTT"):
        return read_vtt(data, limits)
    return read_srt(data, limits)


def read_srt(data: bytes, limits: Limits) -> SubtitleDocument:
    """A SubRip file: numbered cues, ``00:00:01,000 --> 00:00:02,500``, text lines."""
    return _Reader(_decode(data, limits, "SRT"), limits, vtt=False).read()


def read_vtt(data: bytes, limits: Limits) -> SubtitleDocument:
    """A WebVTT file: the ``WEBVTT`` header, then cues, NOTE, STYLE and REGION blocks."""
    text = _decode(data, limits, "WebVTT")
    first = text.lstrip("\ufeff")
    if not (first.startswith("WEBVTT") and first[6:7] in ("", " ", "\t", "\r", "\n")):
        raise DataError("not a WebVTT file: its first line must be WEBVTT")
    return _Reader(text, limits, vtt=True).read()


def _decode(data: bytes, limits: Limits, kind: str) -> str:
    """The file's text, once its size, its cue count and its encoding pass."""
    if len(data) > limits.max_bytes:
        raise DataError(f"{kind} file of {len(data)} bytes is over the limit of "
                        f"{limits.max_bytes}")
    if b"\x00" in data:
        raise DataError(f"binary data, not a {kind} subtitle file")
    arrows = data.count(b"-->")  # every cue has one: counted before anything is built
    if arrows > limits.max_segments:
        raise DataError(f"{kind} file holds {arrows} timing lines, over the limit of "
                        f"{limits.max_segments} cues")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data[:error.start].count(b"\n") + 1
        raise DataError(f"{kind} line {line} is not UTF-8 (convert the file first, e.g. "
                        "iconv -f cp1252 -t utf-8)") from None


def _blocks(text: str) -> Iterator[tuple[int, list[str]]]:
    """The file as runs of lines: each block of non-blank lines, and each blank line alone,
    with its first line's number (from 1). Lazy, so that a limit stops it early."""
    block: list[str] = []
    start = 1
    for number, match in enumerate(_LINE.finditer(text), 1):
        line = match.group()
        if line.strip():
            if not block:
                start = number
            block.append(line)
            continue
        if block:
            yield start, block
            block = []
        yield number, [line]
    if block:
        yield start, block


class _Reader:
    """One pass over the blocks: verbatim parts, cues' segments and their markup."""

    def __init__(self, text: str, limits: Limits, vtt: bool) -> None:
        self.text, self.limits, self.vtt = text, limits, vtt
        self.kind = "WebVTT" if vtt else "SRT"
        self.doc = SubtitleDocument([], vtt, [], [])
        self.cues = 0

    def read(self) -> SubtitleDocument:
        header = self.vtt  # WebVTT's first block is its header
        for number, lines in _blocks(self.text):
            blank = not lines[0].strip()
            if blank or header or self._kept_block(lines[0]):
                header = header and blank
                self.doc.parts.append("".join(lines))
                continue
            for first, cue in self._cues(number, lines):
                self._cue(first, cue)
        self.doc.escape = "".join(
            value for entity, value in _ENTITIES.items()
            if self.vtt and (value in "&<>" or entity in self.text))
        return self.doc

    def _kept_block(self, first: str) -> bool:
        """WebVTT's blocks that are not cues: comments, style sheets, regions."""
        return self.vtt and _KEPT.match(first) is not None

    def _cues(self, number: int, lines: list[str]) -> Iterator[tuple[int, list[str]]]:
        """The cues of a block: a timing line after a cue's own starts the next cue (with its
        number in SubRip), as both formats' parsers read a missing blank line."""
        start = 0
        for i in range(2, len(lines)):
            if "-->" in lines[i] and _TIMING.match(lines[i].strip()):
                cut = i - 1 if not self.vtt and lines[i - 1].strip().isdigit() else i
                if cut - start >= 2 and "-->" in "".join(lines[start:start + 2]):
                    yield number + start, lines[start:cut]
                    start = cut
        yield number + start, lines[start:]

    def _cue(self, number: int, lines: list[str]) -> None:
        self.cues += 1
        timing = 0 if "-->" in lines[0] or len(lines) == 1 else 1
        name = lines[0].strip() if timing else str(self.cues)  # its number or identifier
        where = f"{self.kind} cue {name} (line {number + timing})"
        self._check_timing(lines[timing].strip(), where)
        head, body = lines[:timing + 1], lines[timing + 1:]
        self.doc.parts.append("".join(head))
        if not body:
            return
        segment = self._segment(body, where)
        if not segment.text.strip():
            self.doc.parts.append("".join(body))
            return
        eol = _ending(body[0]) or "\n"
        dialogue = len(body) > 1 and all(line.lstrip()[:1] in _DASHES for line in body)
        self.doc.parts.append(_Cue("".join(body), len(body), eol, _ending(body[-1]), dialogue,
                                   len(self.doc.segments)))
        self.doc.segments.append(segment)

    def _check_timing(self, line: str, where: str) -> None:
        match = _TIMING.match(line)
        if match is None:
            raise DataError(f"{where}: expected a timing line 'start --> end', found "
                            f"{line[:60]!r}")
        for stamp in match.group(1, 2):
            if not _valid_timestamp(stamp, self.vtt):
                raise DataError(f"{where}: broken timestamp {stamp[:30]!r}")

    def _segment(self, body: list[str], where: str) -> Segment:
        """The cue's lines as one segment: joined by spaces, markup held apart as tags."""
        joined = " ".join(line.strip() for line in body)
        if self.vtt:
            return inline.segment(joined, _VTT_MARKUP, self.doc.markup, _vtt_markup, where)
        return inline.segment(joined, _SRT_MARKUP, self.doc.markup, where=where)


def _vtt_markup(match: str) -> tuple[str, str]:
    """WebVTT's entities are text; its tags are HTML-like (``<c.loud>`` opens ``c``)."""
    if match.startswith("&"):
        return "text", _ENTITIES[match]
    return inline.html_like(match)


def _ending(line: str) -> str:
    return line[len(line.rstrip("\r\n")):]


def _valid_timestamp(stamp: str, vtt: bool) -> bool:
    """Whether the format's own library reads ``stamp``."""
    if vtt:
        from webvtt.errors import MalformedCaptionError
        from webvtt.models import Timestamp
        try:
            Timestamp.from_string(stamp)
        except MalformedCaptionError:
            return False
        return True
    import srt
    return srt.TS_REGEX.match(stamp) is not None  # what srt_timestamp_to_timedelta reads


def _nearest(sorted_values: list[int], value: int) -> int:
    i = bisect.bisect_left(sorted_values, value)
    return min(sorted_values[max(0, i - 1):i + 1], key=lambda v: abs(v - value))


def wrap_points(text: str, lines: int, dialogue: bool = False) -> list[int]:
    """The offsets of the spaces in ``text`` to break at for ``lines`` lines: before each
    speaker's dash in a two-speaker cue, else those that balance the lines' lengths (the sum of
    their squares least), with any line over :data:`LINE_WIDTH` paying heavily."""
    spaces = [i for i, char in enumerate(text) if char == " "]
    if dialogue:
        turns = [i for i in spaces if text[i + 1:i + 2] in tuple(_DASHES)]
        if len(turns) == lines - 1:
            return turns
    if lines <= 1 or not spaces:
        return []
    if len(spaces) <= lines - 1:
        return spaces
    if lines * len(spaces) ** 2 > 100_000:  # a cue far longer than a screen: even parts
        return sorted({_nearest(spaces, k * len(text) // lines) for k in range(1, lines)})

    def cost(start: int, end: int) -> int:
        width = end - start
        return width * width + 1000 * max(0, width - LINE_WIDTH) ** 2

    # best[k][j]: the least cost of the text before spaces[j] in k + 1 lines, and its breaks
    best = [{j: (cost(0, s), [s]) for j, s in enumerate(spaces)}]
    for _ in range(lines - 2):
        best.append({j: min(((c + cost(spaces[i] + 1, s), b + [s])
                              for i, (c, b) in best[-1].items() if i < j), default=None)
                     for j, s in enumerate(spaces)})
        best[-1] = {j: v for j, v in best[-1].items() if v is not None}
    return min(((c + cost(spaces[j] + 1, len(text)), b) for j, (c, b) in best[-1].items()),
               key=lambda item: item[0])[1]
