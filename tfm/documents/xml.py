"""XML with inline elements: the localisation case (DITA, DocBook, help articles).

The file is parsed by lxml without ever reading anything else: no external entity, DTD or
URL is loaded, and no entity is expanded (``&name;`` stays a reference, so "billion laughs"
costs nothing); a file that does not parse is refused naming its line and column.

A *block* element's words are segments: an element whose parent holds words around it (mixed
content) is inline, and so are DITA's phrase elements by name (``<ph>``, ``<b>``,
``<uicontrol>``, ``<xref>``, ``<term>``, ...); inline elements are tags over the words they
cover. Code-like phrases (``<codeph>``, ``<filepath>``, ``<cmdname>``, ...), comments, entity
references and any element marked ``translate="no"`` are kept whole as empty tags; blocks such
as ``<codeblock>``, ``<pre>`` and ``<draft-comment>`` are never translated. Runs of whitespace
inside a segment read as one space unless ``xml:space="preserve"``; an unchanged segment keeps
its text as it was.

Written back by lxml: the same tree, declaration, doctype and comments; an attribute's quotes,
character references and the spacing inside tags may be spelt differently from the source.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.documents.tree import Found, Rules, check_depth, names, put_back, segments_of
from tfm.errors import DataError

XML_SPACE = "{http://www.w3.org/XML/1998/namespace}space"
_SQUEEZE = re.compile(rb"\s+")

INLINE = names(  # DITA's phrases, DocBook's, and a few common to many vocabularies
    "ph b i u sup sub tt line-through overline uicontrol menucascade xref link term keyword "
    "wintitle q cite tm abbreviated-form synph fn indexterm emphasis em strong span a "
    "guilabel guibutton guimenu guimenuitem guisubmenu keycap quote phrase citetitle "
    "firstterm glossterm acronym abbrev superscript subscript foreignphrase wordasword")
VERBATIM = names(  # code, names and values that stay as written
    "codeph filepath cmdname varname apiname option parmname systemoutput userinput msgnum "
    "data data-about coderef code literal command filename function parameter envar "
    "computeroutput prompt classname methodname constant uri email")
SKIP = names("codeblock pre screen msgblock draft-comment required-cleanup programlisting")
BLOCK = names(
    "p ul ol sl li sli dl dlhead dlentry dt dd note lq fig figgroup table tgroup thead tbody "
    "row entry simpletable sthead strow stentry section example title shortdesc abstract "
    "steps steps-unordered step substeps substep cmd info stepresult stepxmp choices choice "
    "parml plentry pt pd lines object alt desc prereq context result postreq body conbody "
    "taskbody refbody topic concept task reference para simpara formalpara itemizedlist "
    "orderedlist listitem variablelist varlistentry caption chapter sect1 sect2 sect3 "
    "article book warning tip important caution")


def _no_translate(el: Any) -> bool:
    """``translate="no"`` (DITA, ITS, HTML) or Android's ``translatable="false"``."""
    return (el.get("translate", "").strip().lower() == "no"
            or el.get("translatable", "").strip().lower() == "false")


def _preserve(el: Any) -> bool:
    return isinstance(el.tag, str) and el.get(XML_SPACE) == "preserve"


RULES = Rules(inline=INLINE, verbatim=VERBATIM, skip=SKIP, block=BLOCK, mixed=True,
              no_translate=_no_translate, preserve_space=_preserve)


def parse(data: bytes, what: str) -> Any:
    """An XML tree, parsed safely: no entity expanded, no DTD, file or URL read; a file that
    does not parse refused naming line and column."""
    from lxml import etree

    parser = etree.XMLParser(resolve_entities=False, no_network=True, load_dtd=False,
                             huge_tree=False, strip_cdata=False, remove_blank_text=False)
    try:
        return etree.ElementTree(etree.fromstring(data, parser))
    except etree.XMLSyntaxError as error:
        line, column = error.position if error.position else (error.lineno, 0)
        message = (error.msg or str(error)).split(", line ")[0]
        raise DataError(f"{what} does not parse: line {line}, column {column}: "
                        f"{message}") from None


def serialize(tree: Any, data: bytes) -> bytes:
    """``tree`` as XML in the source's encoding. What lies around the root element (the
    declaration, the doctype and its entity declarations, comments) is the source's bytes
    where they can be found, else lxml's spelling of it."""
    from lxml import etree

    root = tree.getroot()
    encoding = tree.docinfo.encoding or "UTF-8"
    prolog = _prolog(root, data, encoding)
    if prolog is None:
        return etree.tostring(tree, encoding=encoding, xml_declaration=_declared(data))
    after = b"".join(etree.tostring(node, encoding=encoding, xml_declaration=False)
                     for node in root.itersiblings())
    body = etree.tostring(root, encoding=encoding, xml_declaration=False, with_tail=False)
    return prolog + body + _epilog(data, after)


def _declared(data: bytes) -> bool:
    """Whether the source starts with an XML declaration (in UTF-8 or UTF-16)."""
    head = data[:200]
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        head = head.decode("utf-16", errors="ignore").encode("utf-8", errors="ignore")
    return head.lstrip(b"\xef\xbb\xbf \t\r\n").lstrip("\ufeff".encode()).startswith(b"<?xml")


def _epilog(data: bytes, after: bytes) -> bytes:
    """What follows the root element: the source's bytes when they hold what lxml read there
    (comments, processing instructions, whitespace), else lxml's spelling of it."""
    end = data.rstrip()
    cut = end.rfind(b">", 0, len(end) - len(after.strip()) if after.strip() else len(end))
    source = data[cut + 1:] if cut >= 0 else b""
    if _SQUEEZE.sub(b"", source) == _SQUEEZE.sub(b"", after):
        return source
    return after + data[len(end):]


def _prolog(root: Any, data: bytes, encoding: str) -> bytes | None:
    """The source's bytes before the root's start tag (found on the line lxml read it from),
    or None where that is not sure: an encoding that is not ASCII's superset, a root not
    found where lxml says it starts."""
    import codecs

    try:
        if codecs.lookup(encoding).name not in ("utf-8", "ascii", "iso8859-1", "cp1252",
                                                "iso8859-15"):
            return None
    except LookupError:
        return None
    name = (f"{root.prefix}:" if root.prefix else "") + etree_local(root)
    lines = data.split(b"\n")
    row = (root.sourceline or 0) - 1
    if not 0 <= row < len(lines):
        return None
    before = sum(len(line) + 1 for line in lines[:row])
    column = lines[row].find(b"<" + name.encode(encoding))
    after = data[before + column + 1 + len(name):before + column + 2 + len(name)]
    if column < 0 or after not in (b" ", b"\t", b"\r", b"\n", b"/", b">"):
        return None
    return data[:before + column]


def etree_local(el: Any) -> str:
    return el.tag.rsplit("}", 1)[-1]


def check_size(data: bytes, limits: Limits, what: str) -> None:
    if len(data) > limits.max_bytes:
        raise DataError(f"{what} is {len(data)} bytes, over the limit of {limits.max_bytes}")
    if b"\x00" in data[:4096] and not data.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise DataError(f"{what} is not XML: it holds binary data (NUL bytes)")


XML_LANG = "{http://www.w3.org/XML/1998/namespace}lang"


class XmlDocument:
    """An XML file; ``write`` parses it again and puts the translations in."""

    def __init__(self, data: bytes, limits: Limits) -> None:
        self.data, self.limits = data, limits
        self.segments = _read(data, limits)[1].segments

    def write(self, translations: Sequence[Segment], language: str | None = None) -> bytes:
        """The file translated; ``language``, if given, in the root's ``xml:lang`` where it
        has one (a DITA topic's, a DocBook article's)."""
        tree, found = _read(self.data, self.limits)
        put_back(found, translations)
        root = tree.getroot()
        if language and root.get(XML_LANG) is not None:
            root.set(XML_LANG, language)
        return serialize(tree, self.data)


def read(data: bytes, limits: Limits) -> XmlDocument:
    """The file's segments (see the module's docstring)."""
    check_size(data, limits, "the XML file")
    return XmlDocument(data, limits)


def _read(data: bytes, limits: Limits) -> tuple[Any, Found]:
    tree = parse(data, "the XML file")
    check_depth(tree.getroot(), limits.max_depth, "the XML file")
    return tree, segments_of(tree.getroot(), RULES, limits.max_segments, "the XML file")
