"""Word files (.docx), read and written by python-docx: a segment per paragraph, each run's
formatting a tag over the words it covers.

Every paragraph with words is a segment: the body's, tables' cells' (nested tables too), text
boxes', and the headers', footers', footnotes' and endnotes'. A paragraph's runs are grouped by
their formatting (the run properties ``w:rPr``: bold, italic, underline, font, size, colour,
style...): each group of formatted text is a span tag, and a hyperlink (or a tracked insertion)
is a span holding its runs' spans. What is not text is an empty tag kept as it is: a tab, a
line break, a picture, a footnote mark, a bookmark, a field (a page number, a table of contents
entry: the whole field, from its beginning to its end, stays as it was), a content control. The
translated paragraph is rebuilt as runs: each piece of text a run with the formatting of the
span it lands in, inside a copy of the hyperlink it lands in, and every empty tag's elements
moved back where the translation puts it. The paragraph's own properties (its style,
numbering, alignment), the tables, styles, sections, pictures and every other part of the
package are python-docx's to keep; a paragraph whose translation is its source unchanged is not
touched at all.

A DOCX is a zip read from anyone, so it is checked with ``zipfile`` before python-docx opens it:
at most :data:`MAX_MEMBERS` members, a zip at all ("truncated or not a DOCX"), its members'
declared sizes and the bytes they really inflate to within ``Limits.max_unpacked_bytes`` (each
member read in chunks and counted, so a member that lies about its size is caught before it
fills memory), no member claiming a ratio deflate cannot reach (:data:`MAX_RATIO`), and no XML
part with a document type declaration (Word never writes one; it is how external entities and
entity expansion get in). python-docx parses its XML with lxml, ``resolve_entities=False``, no
DTD loaded and no network.
"""

from __future__ import annotations

import copy
import io
import re
import zipfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from tfm.documents import inline
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment, Tag
from tfm.errors import DataError

MAX_MEMBERS = 10_000  # files in the zip (a Word file has tens)
MAX_NESTING = 8  # hyperlinks, insertions, smart tags inside each other; deeper: kept whole
MAX_RATIO = 1100  # uncompressed to compressed size of a member, above what deflate reaches
_CHUNK = 1 << 20
_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
_CONTAINERS = {f"{_W}hyperlink", f"{_W}ins", f"{_W}smartTag", f"{_W}customXml"}
_DROPPED = {f"{_W}proofErr", f"{_W}lastRenderedPageBreak"}  # where Word last saw them
_SPACES = {f"{_W}tab", f"{_W}br", f"{_W}cr", f"{_W}ptab"}
_PARTS = re.compile(r"/word/(document|header\d*|footer\d*|footnotes|endnotes)\.xml")


@dataclass
class _Item:
    """What a tag's ref stands for in one paragraph: a run formatting (``format``: its rPr, a
    span), a container (``container``: a hyperlink, an insertion, a span; ``whole`` when it held
    no text and goes back entire), or elements kept as they are (``kept``: at the paragraph's
    level; ``child``: a run's tab or picture, put in a run of its formatting ``element``)."""

    kind: str
    element: Any = None
    kept: list[Any] = field(default_factory=list)
    space: bool = False  # a tab or break: the text has a space before it, not written


@dataclass
class WordDocument:
    """A Word file read into paragraph segments; ``write`` rebuilds the paragraphs translated."""

    segments: list[Segment]
    data: bytes = field(repr=False)
    where: list[tuple[int, int]] = field(repr=False)  # each segment's part and paragraph

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        """The file with its paragraphs translated; ``language``, if given, named where Word
        reads it: the file's properties (``dc:language``, where it has them) and the proofing
        language (``w:lang``) of the styles and of the translated paragraphs' runs."""
        if len(translations) != len(self.segments):
            raise ValueError(f"{len(translations)} translations for {len(self.segments)} "
                             "paragraphs")
        document = _open(self.data)  # afresh: each write starts from the file as read
        parts = _parts(document)
        paragraphs = [_paragraphs(root) for _, root in parts]
        for (part, index), source, target in zip(self.where, self.segments, translations):
            if target != source:
                paragraph = paragraphs[part][index]
                _rebuild(paragraph, target, _Paragraph().read(paragraph)[1])
                if language:
                    _name_language(paragraph, language)
        if language:
            _name_document_language(document, language)
        for part, root in parts:
            _store(part, root)
        out = io.BytesIO()
        document.save(out)
        return out.getvalue()


def read(data: bytes, limits: Limits) -> WordDocument:
    """A .docx file: a segment per paragraph with words, in the body, tables, text boxes,
    headers and footers."""
    document = open_checked(data, limits)
    doc = WordDocument([], data, [])
    count = 0
    for p, (part, root) in enumerate(_parts(document)):
        for i, paragraph in enumerate(_paragraphs(root)):
            count += 1
            if count > limits.max_segments:
                raise DataError(f"DOCX holds more than {limits.max_segments} paragraphs "
                                "(the limit)")
            segment, _ = _Paragraph().read(paragraph)
            inline.check_tags(segment, f"DOCX paragraph {i + 1} of {part.partname}")
            if segment.text.strip():
                doc.segments.append(segment)
                doc.where.append((p, i))
    return doc


def open_checked(data: bytes, limits: Limits) -> Any:
    """The python-docx Document of ``data``, opened once the zip is checked (a DataError in
    one line for what is refused)."""
    _check_zip(data, limits)
    return _open(data)


def _check_zip(data: bytes, limits: Limits) -> None:
    """Refuse, before python-docx reads it, what is not a zip, or a zip that unpacks to more
    than the limit, or XML with a document type declaration."""
    if len(data) > limits.max_bytes:
        raise DataError(f"DOCX of {len(data)} bytes is over the limit of {limits.max_bytes}")
    entries = data.count(b"PK\x01\x02")  # the central directory's, before zipfile reads it
    if entries > MAX_MEMBERS:
        raise DataError(f"DOCX holds {entries} files, over the limit of {MAX_MEMBERS}")
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        members = archive.infolist()
    except (zipfile.BadZipFile, OSError, ValueError, EOFError):
        raise DataError("truncated or not a DOCX (not a zip archive)") from None
    declared = sum(m.file_size for m in members)
    if declared > limits.max_unpacked_bytes:
        raise DataError(f"DOCX unpacks to {declared} bytes, over the limit of "
                        f"{limits.max_unpacked_bytes} (a zip bomb?)")
    for m in members:  # deflate cannot pass about 1032:1: a header saying more lies
        if m.file_size > _CHUNK and m.file_size > MAX_RATIO * max(m.compress_size, 1):
            raise DataError(f"DOCX member {m.filename} claims a {m.file_size}-byte content "
                            f"from {m.compress_size} bytes (a zip bomb?)")
    names = {m.filename for m in members}
    if "word/document.xml" not in names or "[Content_Types].xml" not in names:
        raise DataError("not a DOCX: a zip without word/document.xml")
    unpacked = 0
    for member in members:
        unpacked += _inflate(archive, member, limits.max_unpacked_bytes - unpacked)


def _inflate(archive: zipfile.ZipFile, member: zipfile.ZipInfo, room: int) -> int:
    """The bytes ``member`` really unpacks to (at most ``room``), its XML checked for a DTD."""
    size, tail = 0, b""
    xml = member.filename.endswith((".xml", ".rels"))
    try:
        with archive.open(member) as stream:
            while chunk := stream.read(_CHUNK):
                size += len(chunk)
                if size > room:
                    raise DataError(f"DOCX member {member.filename} unpacks to more than the "
                                    "limit of the whole file (a zip bomb?)")
                if xml and (b"<!DOCTYPE" in tail + chunk or b"<!ENTITY" in tail + chunk):
                    raise DataError(f"DOCX part {member.filename} declares a DTD, which Word "
                                    "never writes (external entities, entity bombs): refused")
                tail = chunk[-16:]
    except (zipfile.BadZipFile, OSError, EOFError, ValueError, NotImplementedError,
            RuntimeError):  # RuntimeError: encrypted
        raise DataError(f"truncated or not a DOCX (member {member.filename} is damaged)"
                        ) from None
    return size


def _name_language(element: Any, language: str) -> None:
    """Each ``w:lang`` under ``element`` names ``language`` as the text's (``w:val``; the East
    Asian and complex-script languages, ``w:eastAsia`` and ``w:bidi``, left as they were)."""
    for lang in element.iter(f"{_W}lang"):
        if lang.get(f"{_W}val") is not None:
            lang.set(f"{_W}val", language)


def _name_document_language(document: Any, language: str) -> None:
    """The styles' proofing language and the file's ``dc:language`` (only where the file has
    properties: python-docx would otherwise make them, naming itself their author)."""
    from docx.opc.constants import RELATIONSHIP_TYPE

    try:  # (document.styles would make a styles part where the file has none)
        _name_language(document.part.part_related_by(RELATIONSHIP_TYPE.STYLES).element,
                       language)
    except KeyError:
        pass
    try:
        document.part.package.part_related_by(RELATIONSHIP_TYPE.CORE_PROPERTIES)
    except KeyError:
        return
    document.core_properties.language = language


def _open(data: bytes) -> Any:
    import docx
    from docx.opc.exceptions import PackageNotFoundError
    from lxml import etree
    try:
        return docx.Document(io.BytesIO(data))
    except (PackageNotFoundError, KeyError, ValueError, zipfile.BadZipFile) as error:
        kind = re.search(r"content type is '([^']*)'", str(error))
        problem = f"its main part is {kind.group(1)}" if kind else str(error).splitlines()[0]
        raise DataError(f"not a Word document python-docx opens ({problem})") from None
    except etree.LxmlError as error:
        message = re.sub(r" \(<string>, line \d+\)", "", str(error).splitlines()[0])
        raise DataError(f"DOCX XML does not parse: {message}") from None


def _parts(document: Any) -> list[tuple[Any, Any]]:
    """The XML parts with paragraphs to translate, each with its root element: the body
    first, then headers, footers, footnotes and endnotes, in a fixed order (a write finds them
    as the read did). python-docx keeps footnotes and endnotes as bytes: they are parsed by its
    parser here, and written back by :func:`_store`."""
    from docx.oxml.parser import parse_xml
    parts = [part for part in document.part.package.iter_parts()
             if _PARTS.fullmatch(str(part.partname))]
    kinds = ["document", "header", "footer", "footnotes", "endnotes"]
    parts.sort(key=lambda part: (kinds.index(re.sub(r"\d+$", "", str(part.partname)[6:-4])),
                                 str(part.partname)))
    return [(part, part.element if hasattr(part, "element") else parse_xml(part.blob))
            for part in parts]


def _store(part: Any, root: Any) -> None:
    """A part python-docx holds as bytes takes its rebuilt XML back."""
    if not hasattr(part, "element"):
        from lxml import etree
        part._blob = etree.tostring(root, xml_declaration=True, encoding="UTF-8",
                                    standalone=True)


def _paragraphs(root: Any) -> list[Any]:
    return list(root.iter(f"{_W}p"))


class _Paragraph:
    """One walk over a paragraph's inline content: its text, tags, and what each ref is."""

    def __init__(self) -> None:
        self.text: list[str] = []
        self.length = 0
        self.tags: list[Tag] = []  # a span's end is set when it closes
        self.items: list[_Item] = []
        self.spans: list[int] = []  # the open spans' indices in tags (containers, a format)
        self.format: bytes | None = None  # the open format span's key
        self.field: list[Any] | None = None  # a field's elements, from its beginning
        self.depth = 0  # fields nested in it
        self.depth_open = 0  # containers open (deeper ones are kept whole)

    def read(self, paragraph: Any) -> tuple[Segment, list[_Item]]:
        self._children(paragraph)
        self._flush_field()
        self._close_format()
        return Segment("".join(self.text), tuple(self.tags)), self.items

    def _children(self, parent: Any) -> None:
        for child in parent:
            if child.tag == f"{_W}pPr":
                continue
            if self.field is None and child.tag == f"{_W}r" and _begins_field(child):
                self.field, self.depth = [], 0
            if self.field is not None:
                self._in_field(child)
            elif child.tag == f"{_W}r":
                self._run(child)
            elif child.tag in _DROPPED:  # spelling marks: Word's to find again
                continue
            elif child.tag in _CONTAINERS and self.depth_open < MAX_NESTING:
                self._container(child)
            else:  # a bookmark, a proofing mark, a content control, a simple field, math
                self._empty(_Item("kept", kept=[child]))

    def _run(self, run: Any) -> None:
        rpr = run.find(f"{_W}rPr")
        key = _key(rpr)
        for child in run:
            if child.tag == f"{_W}t":
                if child.text:
                    self._text(child.text, key, rpr)
            elif child.tag == f"{_W}noBreakHyphen":  # a hyphen, to the model and in the run
                self._text("\u2011", key, rpr)
            elif child.tag in _SPACES:  # words on either side stay apart for the model
                space = not "".join(self.text[-1:]).endswith((" ", "\u00a0"))
                if space:
                    self.text.append(" ")
                    self.length += 1
                self._empty(_Item("child", rpr, [child], space))
            elif child.tag not in _DROPPED and child.tag != f"{_W}rPr":
                self._empty(_Item("child", rpr, [child]))

    def _in_field(self, element: Any) -> None:
        """Collect a field's elements until its end: it is kept whole, as one empty tag."""
        assert self.field is not None
        self.field.append(element)
        for mark in element.iter(f"{_W}fldChar"):
            self.depth += {"begin": 1, "end": -1}.get(mark.get(f"{_W}fldCharType"), 0)
        if self.depth <= 0:
            self._flush_field()

    def _flush_field(self) -> None:
        if self.field:
            self._empty(_Item("kept", kept=self.field))
        self.field = None

    def _container(self, element: Any) -> None:
        self._close_format()
        index = self._open(_Item("container", element))
        start = self.length
        self.depth_open += 1
        self._children(element)
        self.depth_open -= 1
        self._flush_field()
        self._close_format()
        self.spans.pop()
        ref = self.tags[index].ref
        if self.length > start:
            self.tags[index] = Tag(start, self.length, ref)
            return
        del self.tags[index:]  # no text inside: the container goes back whole, as it was
        self.items[ref] = _Item("whole", element)
        self.tags.append(Tag(start, start, ref, self._parent()))

    def _open(self, item: _Item) -> int:
        self.items.append(item)
        self.tags.append(Tag(self.length, self.length, len(self.items) - 1))
        self.spans.append(len(self.tags) - 1)
        return len(self.tags) - 1

    def _text(self, text: str, key: bytes, rpr: Any) -> None:
        if self.format is not None and self.format != key:
            self._close_format()
        if self.format is None and key:
            self._open(_Item("format", rpr))
            self.format = key
        self.text.append(text)
        self.length += len(text)

    def _close_format(self) -> None:
        if self.format is not None:
            index = self.spans.pop()
            tag = self.tags[index]
            self.tags[index] = Tag(tag.start, self.length, tag.ref)
            self.format = None

    def _parent(self) -> int | None:
        """The innermost open span (an empty tag at its edge belongs inside it)."""
        return self.tags[self.spans[-1]].ref if self.spans else None

    def _empty(self, item: _Item) -> None:
        self.items.append(item)
        self.tags.append(Tag(self.length, self.length, len(self.items) - 1, self._parent()))


def _begins_field(run: Any) -> bool:
    return any(mark.get(f"{_W}fldCharType") == "begin" for mark in run.iter(f"{_W}fldChar"))


def _key(rpr: Any) -> bytes:
    """A run formatting's identity: its XML without the revision ids Word scatters; none
    for plain text."""
    if rpr is None or len(rpr) == 0:
        return b""
    from lxml import etree
    return re.sub(rb' w:rsid\w*="[^"]*"', b"", etree.tostring(rpr))


def _rebuild(paragraph: Any, segment: Segment, items: list[_Item]) -> None:
    """Replace the paragraph's inline content with the translation's: runs carrying their
    span's formatting, inside copies of the containers they land in, kept elements moved."""
    for child in list(paragraph):
        if child.tag != f"{_W}pPr":
            paragraph.remove(child)
    containers, formats = [paragraph], [None]
    pieces = list(segment.pieces())
    for (kind, piece), (after, following) in zip(pieces, pieces[1:] + [("", "")]):
        if kind == "text":
            text = str(piece)
            if after == "empty" and items[following.ref].space and text.endswith(" "):
                text = text[:-1]  # the space read in for a tab or a break
            if text:
                containers[-1].append(_new_run(text, formats[-1]))
            continue
        assert isinstance(piece, Tag)
        item = items[piece.ref]
        if kind == "open" and item.kind == "format":
            formats.append(item.element)
        elif kind == "close" and item.kind == "format":
            formats.pop()
        elif kind == "open":
            containers.append(_shallow(item.element))
            containers[-2].append(containers[-1])
        elif kind == "close":
            containers.pop()
        elif item.kind == "whole":
            containers[-1].append(item.element)
        elif item.kind == "container":  # its words translated away: the empty element
            containers[-1].append(_shallow(item.element))
        elif item.kind == "kept":
            containers[-1].extend(item.kept)
        elif item.kind == "child":  # a run's tab or picture: in a run of its formatting
            containers[-1].append(_run_of(item.kept, item.element))


def _new_run(text: str, rpr: Any) -> Any:
    from docx.oxml import OxmlElement
    t = OxmlElement("w:t")
    t.text = text
    if text != text.strip():
        t.set(_XML_SPACE, "preserve")
    return _run_of([t], rpr)


def _run_of(children: list[Any], rpr: Any) -> Any:
    from docx.oxml import OxmlElement
    run = OxmlElement("w:r")
    if rpr is not None:
        run.append(copy.deepcopy(rpr))
    run.extend(children)
    return run


def _shallow(element: Any) -> Any:
    """A copy of ``element`` with its attributes, without its children."""
    from docx.oxml import OxmlElement
    copied = OxmlElement(f"{element.prefix}:{element.tag.split('}')[1]}")
    for name, value in element.attrib.items():
        copied.set(name, value)
    return copied
