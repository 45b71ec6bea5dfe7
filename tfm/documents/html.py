"""HTML pages: the words of each block translated, tags and everything else kept.

The page is parsed by html5lib, the WHATWG algorithm browsers use, so broken HTML is repaired
as a browser repairs it and never refused. Each block (a paragraph, a list item, a table cell,
a heading, the title) is a segment of its inline content; inline elements (``<b>``, ``<a>``,
``<span>``, ``<br>``, ``<img>``) are tags over the words they cover. ``<script>``,
``<style>``, ``<pre>``, ``<code>`` and whatever is marked ``translate="no"`` or
``class="notranslate"`` never reach the model; of the attributes, only ``alt``, ``title``,
``placeholder`` and ``aria-label`` are translated, each its own segment.

An XHTML page (``<html xmlns="http://www.w3.org/1999/xhtml">``, an EPUB's chapters) that
is well-formed XML is read and written as XML is (tfm/documents/xml.py: nothing read from
outside, the prolog's bytes kept), so that it stays XML. Any other page is written back by
lxml's HTML serializer: the same element tree, comments and entities decoded and written again
as characters (``&amp;``, ``&lt;``, ``&gt;`` escaped); the bytes before ``<html>`` (the
doctype, comments) are the source's. Bytes change where html5lib's repair or the serializer's
spelling differ from the source (attribute quotes, ``<tbody>`` added, tags' case); a file
without ``<html>``, ``<head>`` or ``<body>`` (a fragment) is written back as a fragment. A
whole page told its target language names it on ``<html>`` (``lang``, and ``xml:lang`` where
the page has one or is XHTML); ``lang`` on elements inside is left as it was.
"""

from __future__ import annotations

import copy
import re
import warnings
from collections.abc import Sequence
from typing import Any

from tfm.documents import xml
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.documents.tree import Rules, check_depth, names, put_back, segments_of
from tfm.errors import DataError

INLINE = names("a abbr b bdi bdo br cite data del dfn em font i img input ins mark q rp rt ruby "
               "s small span strike strong sub sup time tt u wbr")
VERBATIM = names("code kbd samp var svg math")  # inline, kept whole
SKIP = names("script style pre textarea template noscript iframe object")
OPAQUE = names("svg math")  # foreign content: an icon or a formula, whole
ATTRIBUTES = ("alt", "title", "placeholder", "aria-label")
_WHOLE_PAGE = re.compile(rb"<(html|head|body)[\s>/]", re.IGNORECASE)
_TAG = re.compile(rb"<[^<>]*>")
_HTML_START = re.compile(rb"<html[\s>]", re.IGNORECASE)
_COERCED = re.compile(rb"U([0-9A-F]{5})")
_XHTML = re.compile(rb"<html[^>]*\sxmlns=[\"']http://www.w3.org/1999/xhtml[\"']")


def _no_translate(el: Any) -> bool:
    return (el.get("translate", "").strip().lower() == "no"
            or "notranslate" in el.get("class", "").split())


RULES = Rules(inline=INLINE, verbatim=VERBATIM, skip=SKIP, attributes=ATTRIBUTES,
              parting=names("br"), opaque=OPAQUE, no_translate=_no_translate)


class HtmlDocument:
    """A page read into a tree; ``write`` puts the translations into a copy of it."""

    def __init__(self, data: bytes, limits: Limits) -> None:
        self.data, self.limits = data, limits
        self.tree, self.xhtml, self.encoding = _parse(data, limits)
        self.segments = segments_of(self.tree.getroot(), RULES, limits.max_segments,
                                    "the HTML page").segments

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        tree = copy.deepcopy(self.tree)  # the same segments, found again in the copy
        put_back(segments_of(tree.getroot(), RULES, self.limits.max_segments, "the HTML page"),
                 translations)
        if language and (self.xhtml or _WHOLE_PAGE.search(self.data)):
            _name_language(tree.getroot(), language, self.xhtml)
        if self.xhtml:
            return xml.serialize(tree, self.data)
        _html_names(tree.getroot())
        if _WHOLE_PAGE.search(self.data):
            return _around_html(_serialize(tree, self.encoding), self.data)
        return _serialize_fragment(tree, self.encoding)


def read(data: bytes, limits: Limits) -> HtmlDocument:
    """The page's segments (see the module's docstring); refused only when it is too large,
    nested too deep, has a tag of too many attributes, or is not text at all."""
    if len(data) > limits.max_bytes:
        raise DataError(f"the HTML file is {len(data)} bytes, over the limit of "
                        f"{limits.max_bytes}")
    if b"\x00" in data:
        raise DataError("not an HTML file: it holds binary data (NUL bytes)")
    return HtmlDocument(data, limits)


def _parse(data: bytes, limits: Limits) -> tuple[Any, bool, str]:
    """The page's tree, whether it is XHTML (read and written as XML), and its encoding."""
    import html5lib

    if _XHTML.search(data[:4096]):
        try:
            tree = xml.parse(data, "the XHTML page")
        except DataError:
            pass  # not well-formed after all: read as browsers read it
        else:
            check_depth(tree.getroot(), limits.max_depth, "the XHTML page")
            return tree, True, tree.docinfo.encoding or "UTF-8"
    parser = _bounded_parser(html5lib.HTMLParser)(tree=_bounded_builder(limits.max_depth),
                                                  namespaceHTMLElements=False)
    with warnings.catch_warnings():  # names lxml cannot hold (xml:lang): see _uncoerce
        warnings.simplefilter("ignore", html5lib.constants.DataLossWarning)
        # A page that declares no encoding (no BOM, no <meta charset>) and reads as UTF-8 is
        # UTF-8, as tfm writes text everywhere: browsers' windows-1252 fallback would write
        # its translation in an encoding a terminal or an editor reads as mojibake.
        tree = parser.parse(data, default_encoding="utf-8" if _utf8(data) else "windows-1252")
    check_depth(tree.getroot(), limits.max_depth, "the HTML page")
    return tree, False, parser.documentEncoding or "utf-8"


def _utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# The most attributes one tag may have: html5lib compares each attribute's name with those
# before it (time squared); no page written by people comes near.
MAX_ATTRIBUTES = 256


def _bounded_parser(parser_class: type) -> type:
    """html5lib's parser, refusing a tag with more than MAX_ATTRIBUTES attributes."""
    from html5lib import _tokenizer

    class BoundedTokenizer(_tokenizer.HTMLTokenizer):
        def attributeNameState(self):  # noqa: N802 (html5lib's name)
            if len(self.currentToken["data"]) > MAX_ATTRIBUTES:
                raise DataError(f"the HTML page has a tag with more than {MAX_ATTRIBUTES} "
                                "attributes")
            return super().attributeNameState()

    class BoundedParser(parser_class):
        def reset(self) -> None:  # the parser makes its tokenizer, then resets
            if type(getattr(self, "tokenizer", None)) is _tokenizer.HTMLTokenizer:
                self.tokenizer.__class__ = BoundedTokenizer
            super().reset()

    return BoundedParser


def _bounded_builder(limit: int) -> type:
    """html5lib's lxml tree builder, refusing elements nested deeper than ``limit`` (its
    algorithm walks the stack of open elements for each tag, so depth costs time squared),
    and with text appended in constant time (html5lib asks ``len(element)``, which lxml
    counts child by child: a page's parse time grew with the square of its paragraphs)."""
    from html5lib.treebuilders import etree_lxml

    class Bounded(etree_lxml.TreeBuilder):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            self.elementClass = _fast_text(self.elementClass)

        def _deep(self) -> None:
            if len(self.openElements) > limit:
                raise DataError(f"the HTML page is nested more than {limit} elements deep")

        def insertElementNormal(self, token):  # noqa: N802 (html5lib's name)
            element = super().insertElementNormal(token)
            self._deep()
            return element

        def insertElementTable(self, token):  # noqa: N802
            element = super().insertElementTable(token)
            self._deep()
            return element

    return Bounded


def _fast_text(element_class: type) -> type:
    """html5lib's element wrapper with text added without counting the children."""

    def last(element: Any) -> Any:
        try:
            return element[-1]  # lxml finds the last child directly
        except IndexError:
            return None

    class FastText(element_class):
        def hasContent(self) -> bool:  # noqa: N802 (html5lib's name)
            return bool(self._element.text) or last(self._element) is not None

        def insertText(self, data, insertBefore=None):  # noqa: N802, N803
            if insertBefore is not None:
                return super().insertText(data, insertBefore)
            child = last(self._element)
            if child is None:
                self._element.text = (self._element.text or "") + data
            else:
                child.tail = (child.tail or "") + data
            return None

    return FastText


def _encoding(encoding: str) -> str:
    """The source's encoding when lxml and Python know it, else UTF-8."""
    import codecs

    try:
        codecs.lookup(encoding)
    except LookupError:
        return "utf-8"
    return encoding


def _serialize(tree: Any, encoding: str) -> bytes:
    from lxml import etree

    try:
        out = etree.tostring(tree, method="html", encoding=_encoding(encoding))
    except (LookupError, ValueError):
        out = etree.tostring(tree, method="html", encoding="utf-8")
    return _uncoerce(out)


_PREFIXES = {"http://www.w3.org/1999/xlink": "xlink", "http://www.w3.org/2000/xmlns/": "xmlns",
             "http://www.w3.org/XML/1998/namespace": "xml"}


def _html_names(root: Any) -> None:
    """SVG's and MathML's elements and attributes named as HTML writes them (``<svg>``,
    ``xlink:href``): html5lib gives them namespaces, which lxml's HTML serializer would
    write as ``<ns0:svg xmlns:ns0=...>``."""
    from lxml import etree

    for el in root.iter():
        if not isinstance(el.tag, str):
            continue
        if el.tag.startswith("{"):
            el.tag = el.tag.split("}", 1)[1]
        for name in [n for n in el.attrib if n.startswith("{")]:
            namespace, local_name = name[1:].split("}", 1)
            value = el.attrib.pop(name)
            prefix = _PREFIXES.get(namespace)
            el.set(f"{prefix}U0003A{local_name}" if prefix else local_name, value)  # _uncoerce
    etree.cleanup_namespaces(root)


_XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


def _name_language(root: Any, language: str, xhtml: bool) -> None:
    """``<html>`` names ``language``: its ``lang``, and its ``xml:lang`` where the page has one
    (html5lib holds it as ``xmlU0003Alang``) or is XHTML."""
    if not isinstance(root.tag, str) or root.tag.rsplit("}", 1)[-1] != "html":
        return
    root.set("lang", language)
    if xhtml:
        root.set(_XML_LANG, language)
    elif "xmlU0003Alang" in root.attrib:
        root.set("xmlU0003Alang", language)


def _around_html(out: bytes, data: bytes) -> bytes:
    """``out`` with the source's own bytes before ``<html>`` (the doctype, comments), where
    they hold what lxml wrote there but for spacing and case. (Not after ``</html>``: a
    browser reads text there into the body, so it would grow at each round trip.)"""
    found, written = _HTML_START.search(data), _HTML_START.search(out)
    if found and written and _same(data[:found.start()], out[:written.start()]):
        out = data[:found.start()] + out[written.start():]
    return out


def _same(a: bytes, b: bytes) -> bool:
    return re.sub(rb"\s+", b"", a.lower()) == re.sub(rb"\s+", b"", b.lower())


def _uncoerce(out: bytes) -> bytes:
    """Names with a colon (``xml:lang``, ``xmlns:epub``, ``svg:rect``) as the source spelt
    them: lxml holds no such HTML name, so html5lib gave it to lxml as ``xmlU0003Alang``."""
    if b"U000" not in out:
        return out
    return _TAG.sub(lambda tag: _COERCED.sub(
        lambda code: chr(int(code.group(1), 16)).encode(), tag.group()), out)


def _serialize_fragment(tree: Any, encoding: str) -> bytes:
    """A fragment's nodes without the ``<html>``, ``<head>`` and ``<body>`` html5lib put
    around them (what it moved into ``<head>`` comes first, as it did in the source)."""
    from lxml import etree

    root = tree.getroot()
    parts = [etree.tostring(n, method="html", encoding="unicode")
             for n in reversed(list(root.itersiblings(preceding=True)))]
    for holder in (root.find("head"), root.find("body")):
        if holder is not None:
            parts.append(holder.text or "")
            parts += [etree.tostring(n, method="html", encoding="unicode") for n in holder]
    parts += [etree.tostring(n, method="html", encoding="unicode")
              for n in root.itersiblings()]
    text = "".join(parts)
    try:
        return _uncoerce(text.encode(_encoding(encoding), errors="xmlcharrefreplace"))
    except LookupError:
        return _uncoerce(text.encode("utf-8"))
