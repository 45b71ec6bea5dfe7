"""Plain text: each line's words are a segment; everything else (line breaks as written, blank
lines, indentation, trailing spaces, a byte-order mark) comes out byte for byte.

A line is a segment, not a paragraph of lines: a line break always ends a sentence (as
everywhere in tfm), so the layout is the writer's and never re-wrapped. Text hard-wrapped in
the middle of its sentences is translated a line at a time; unwrap it first for better
translations. The file must be UTF-8 (with or without a BOM); a file that is not (a binary
file, another encoding) is refused in one line naming the first byte that is not.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from tfm.documents.formats import Limits
from tfm.documents.segments import Segment, plain
from tfm.errors import DataError

BOM = "\ufeff"
# A line's words: from its first to its last non-space character.
_LINE_BODY = re.compile(r"\S(?:.*\S)?")
_LINE_BREAK = re.compile("\r\n|[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


@dataclass
class TextDocument:
    """The file as ``between[0] + segment 0 + between[1] + ... + between[-1]``."""

    segments: list[Segment]
    between: list[str]

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        # ``language``: the format has no place that names it
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for "
                             f"{len(self.segments)} segments")
        parts = [gap + t.text for gap, t in zip(self.between, translations)]
        return ("".join(parts) + self.between[-1]).encode("utf-8")


def decode_text(data: bytes, limits: Limits) -> str:
    """``data`` as text, refused in one line if it is too big or not UTF-8 text (a NUL byte:
    a binary file)."""
    if len(data) > limits.max_bytes:
        raise DataError(f"{len(data):,} bytes is more than the {limits.max_bytes:,} a document "
                        "may have")
    if data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError("UTF-16 text (its byte-order mark): convert it to UTF-8 first")
    nul = data.find(b"\0")
    if nul != -1:
        raise DataError(f"not a text file (a NUL byte at byte {nul}): a binary file?")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise DataError(f"not UTF-8 text (byte {e.start} is 0x{data[e.start]:02x}): convert "
                        "it to UTF-8 first") from None


def read(data: bytes, limits: Limits) -> TextDocument:
    """Plain text read into one segment a non-blank line."""
    text = decode_text(data, limits)
    segments: list[Segment] = []
    between: list[str] = []
    position = len(BOM) if text.startswith(BOM) else 0  # kept, not translated
    gap = text[:position]
    for match in [*_LINE_BREAK.finditer(text, position), None]:
        end = match.start() if match else len(text)
        body = _LINE_BODY.search(text, position, end)
        if body is not None:
            between.append(gap + text[position:body.start()])
            segments.append(plain(body.group()))
            gap = text[body.end():end]
            if len(segments) > limits.max_segments:
                raise DataError(f"more than {limits.max_segments:,} lines to translate")
        else:
            gap += text[position:end]
        if match:
            gap += match.group()
            position = match.end()
    between.append(gap)
    return TextDocument(segments, between)
