"""The document formats tfm translates, and how a file's format is chosen.

Each format is a module of this package with a ``read(data: bytes, limits: Limits) ->
Document`` function; the module imports its own library (lxml, markdown-it-py, srt, polib,
python-docx, ...) when a file of its format is read, so that ``tfm translate`` on plain text
never pays for the others. ``format_for`` picks the format from ``--format`` or the file's
extension.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from tfm.documents.segments import Segment
from tfm.errors import UsageError


@dataclass(frozen=True)
class Limits:
    """What a document may hold before it is refused (the server reads files from anyone)."""

    max_bytes: int = 50 * 2**20  # the file as read
    max_segments: int = 200_000  # texts to translate
    max_depth: int = 512  # nesting of elements
    max_unpacked_bytes: int = 200 * 2**20  # a zip's members (DOCX), uncompressed


class Document(Protocol):
    """A file read by its format: the texts to translate, and the file written back."""

    segments: list[Segment]

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        """The file with ``translations[i]`` in place of ``segments[i]``; everything else as
        it was read, except that a format that names its language (HTML's ``lang``, XLIFF's
        target language, PO's ``Language:``, DOCX's) names ``language`` (a BCP 47 tag, see
        ``language_tag``), where the caller knows it (None: left as it was)."""
        ...


def language_tag(code: str | None) -> str | None:
    """A language as a document names it (BCP 47: ``de``, ``pt-BR``, ``deu-Latn``) from the
    code tfm's options and models use (``de``, ``>>de<<``, ``__de__``, ``pt_BR``,
    ``deu_Latn``); None for none. NLLB's three-letter codes stay three letters (well-formed
    BCP 47, though not the shortest tag: no table of ISO 639 is kept here)."""
    if not code:
        return None
    bare = code.strip().removeprefix(">>").removesuffix("<<").strip("_")
    return bare.replace("_", "-") or None


@dataclass(frozen=True)
class Format:
    name: str
    extensions: tuple[str, ...]
    module: str  # tfm.documents.<module>, with its read()
    function: str = "read"  # the module's reader of this format (subtitles: read_srt, read_vtt)

    def read(self, data: bytes, limits: Limits | None = None) -> Document:
        reader = importlib.import_module(f"tfm.documents.{self.module}")
        return getattr(reader, self.function)(data, limits or Limits())


FORMATS: tuple[Format, ...] = (
    Format("text", (".txt", ".text"), "text"),
    Format("html", (".html", ".htm", ".xhtml"), "html"),
    Format("xml", (".xml", ".dita", ".ditamap"), "xml"),
    Format("markdown", (".md", ".markdown"), "markdown"),
    Format("srt", (".srt",), "subtitles", "read_srt"),
    Format("vtt", (".vtt",), "subtitles", "read_vtt"),
    Format("po", (".po", ".pot"), "gettext"),
    Format("xliff", (".xlf", ".xliff"), "xliff"),
    Format("docx", (".docx",), "docx"),
)


def format_names() -> str:
    return ", ".join(f.name for f in FORMATS)


def format_for(path: Path | None, name: str | None = None) -> Format:
    """The format named (``--format``), else the one of ``path``'s extension."""
    if name is not None:
        for fmt in FORMATS:
            if fmt.name == name:
                return fmt
        raise UsageError(f"--format {name!r} is not a document format: {format_names()}")
    suffix = path.suffix.lower() if path is not None else ""
    for fmt in FORMATS:
        if suffix in fmt.extensions:
            return fmt
    shown = suffix or "no extension"
    raise UsageError(f"{path}: {shown} is not a document format tfm knows ({format_names()}); "
                     "name one with --format")
