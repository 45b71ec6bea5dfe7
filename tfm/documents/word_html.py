"""A Word file (.docx) shown as HTML: what the server's page previews of a translated DOCX.

The body is written in its order: paragraphs (headings as ``<h1>``-``<h6>``, list paragraphs as
items of a list), runs' bold, italic, underline, strikethrough, superscript and subscript,
line breaks, hyperlinks, and tables (cells spanning columns, tables inside cells). Headers,
footers, notes, pictures and fields' codes are left out: a preview, not a converter.

The HTML is made here, never copied: every text is escaped, no attribute of the file is
written except a hyperlink's address, and only an ``http:``, ``https:`` or ``mailto:`` one (a
``javascript:`` link is written as its words alone). The file is checked as the DOCX reader
checks it (its size, a zip bomb, a DTD) before python-docx opens it.
"""

from __future__ import annotations

import html
import re
from typing import Any

from tfm.documents.docx import open_checked
from tfm.documents.formats import Limits

_W = "{http://schemas.openxmlformats.org/wordprocessingml/2006/main}"
_R = "{http://schemas.openxmlformats.org/officeDocument/2006/relationships}"
MAX_DEPTH = 32  # tables in cells, links in insertions: deeper, only their words are shown
_SAFE_URL = re.compile(r"(https?|mailto):", re.IGNORECASE)
_HEADING = re.compile(r"(?:Heading|heading )([1-6])|(Title)")
_STYLE = ("body { font-family: Calibri, Arial, sans-serif; margin: 1.5rem; line-height: 1.4; }"
          " table { border-collapse: collapse; margin: 0.6rem 0; }"
          " td { border: 1px solid #888; padding: 0.2rem 0.5rem; vertical-align: top; }")
# A run's formatting (w:rPr's child) and the element that shows it.
_FORMATS = ((f"{_W}b", "b"), (f"{_W}i", "i"), (f"{_W}u", "u"), (f"{_W}strike", "s"),
            (f"{_W}dstrike", "s"))
_CONTAINERS = {f"{_W}ins", f"{_W}smartTag", f"{_W}customXml", f"{_W}fldSimple", f"{_W}sdt",
               f"{_W}sdtContent", f"{_W}moveTo"}


def word_html(data: bytes, limits: Limits) -> str:
    """The DOCX ``data`` as a whole HTML document of its body (refused as the reader refuses
    it: a DataError)."""
    document = open_checked(data, limits)
    links = {rid: rel.target_ref for rid, rel in document.part.rels.items() if rel.is_external}
    body = _Writer(links).blocks(document.element.body, 0)
    return ("<!doctype html><html><head><meta charset=\"utf-8\"><style>" + _STYLE +
            "</style></head><body>" + body + "</body></html>")


class _Writer:
    """Writes a body's blocks; ``links``: the file's external relationships by id."""

    def __init__(self, links: dict[str, str]) -> None:
        self.links = links

    def blocks(self, parent: Any, depth: int) -> str:
        """Paragraphs and tables under ``parent`` (a body, a cell, a content control), list
        paragraphs in a row gathered in one list."""
        out: list[str] = []
        items: list[str] = []
        for child in parent:
            if child.tag == f"{_W}p" and _listed(child):
                items.append(f"<li>{self.inline(child, depth)}</li>")
                continue
            if items:
                out.append("<ul>" + "".join(items) + "</ul>")
                items = []
            if child.tag == f"{_W}p":
                name = _heading(child)
                out.append(f"<{name}>{self.inline(child, depth)}</{name}>")
            elif child.tag == f"{_W}tbl":
                out.append(self.table(child, depth + 1))
            elif child.tag in (f"{_W}sdt", f"{_W}sdtContent"):
                out.append(self.blocks(child, depth + 1) if depth < MAX_DEPTH else
                           _words(child))
        if items:
            out.append("<ul>" + "".join(items) + "</ul>")
        return "".join(out)

    def table(self, table: Any, depth: int) -> str:
        if depth > MAX_DEPTH:
            return f"<p>{_words(table)}</p>"
        rows = []
        for row in table.findall(f"{_W}tr"):
            cells = []
            for cell in row.findall(f"{_W}tc"):
                span = cell.find(f"{_W}tcPr/{_W}gridSpan")
                columns = span.get(f"{_W}val", "1") if span is not None else "1"
                attribute = f' colspan="{int(columns)}"' if columns.isdigit() and \
                    int(columns) > 1 else ""
                cells.append(f"<td{attribute}>{self.blocks(cell, depth)}</td>")
            rows.append("<tr>" + "".join(cells) + "</tr>")
        return "<table>" + "".join(rows) + "</table>"

    def inline(self, parent: Any, depth: int) -> str:
        """A paragraph's (or a hyperlink's, an insertion's) runs, in order."""
        out: list[str] = []
        for child in parent:
            if child.tag == f"{_W}r":
                out.append(_run(child))
            elif child.tag == f"{_W}hyperlink":
                out.append(self.link(child, depth + 1))
            elif child.tag in _CONTAINERS:
                out.append(self.inline(child, depth + 1) if depth < MAX_DEPTH else
                           _words(child))
        return "".join(out)

    def link(self, link: Any, depth: int) -> str:
        words = self.inline(link, depth) if depth < MAX_DEPTH else _words(link)
        url = self.links.get(link.get(f"{_R}id", ""), "")
        if not _SAFE_URL.match(url.strip()):
            return words
        return f'<a href="{html.escape(url.strip(), quote=True)}" rel="noreferrer">{words}</a>'


def _run(run: Any) -> str:
    """A run's text and breaks, inside the elements of its formatting."""
    pieces = []
    for child in run:
        if child.tag == f"{_W}t":
            pieces.append(html.escape(child.text or ""))
        elif child.tag in (f"{_W}tab", f"{_W}ptab"):
            pieces.append("&emsp;")
        elif child.tag in (f"{_W}br", f"{_W}cr"):
            pieces.append("<br>")
        elif child.tag == f"{_W}noBreakHyphen":
            pieces.append("&#8209;")
    text = "".join(pieces)
    if not text:
        return ""
    for name in reversed(_formats(run.find(f"{_W}rPr"))):
        text = f"<{name}>{text}</{name}>"
    return text


def _formats(properties: Any) -> list[str]:
    """The elements a run's properties (``w:rPr``) show as, outermost first."""
    if properties is None:
        return []
    names = []
    for tag, name in _FORMATS:
        found = properties.find(tag)
        value = found.get(f"{_W}val", "") if found is not None else "0"
        if found is not None and value.lower() not in ("0", "false", "off", "none"):
            names.append(name)
    position = properties.find(f"{_W}vertAlign")
    align = position.get(f"{_W}val") if position is not None else None
    names += {"superscript": ["sup"], "subscript": ["sub"]}.get(align or "", [])
    return names


def _heading(paragraph: Any) -> str:
    """``h1``-``h6`` for a paragraph of a heading's (or the title's) style, else ``p``."""
    style = paragraph.find(f"{_W}pPr/{_W}pStyle")
    found = _HEADING.fullmatch(style.get(f"{_W}val", "")) if style is not None else None
    if found is None:
        return "p"
    return f"h{found.group(1) or 1}"


def _listed(paragraph: Any) -> bool:
    """Whether a paragraph is a list's item: numbered, or of a list style."""
    properties = paragraph.find(f"{_W}pPr")
    if properties is None:
        return False
    style = properties.find(f"{_W}pStyle")
    return properties.find(f"{_W}numPr") is not None or (
        style is not None and style.get(f"{_W}val", "").startswith("List"))


def _words(element: Any) -> str:
    """The text of ``element``, escaped, without its formatting (past :data:`MAX_DEPTH`)."""
    return html.escape("".join(t.text or "" for t in element.iter(f"{_W}t")))
