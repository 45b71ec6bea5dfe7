"""Specification of Word files (tfm/documents/docx.py): a segment per paragraph (body, tables,
headers, footers), runs' formatting and hyperlinks as tags rebuilt around the translated words;
tables, styles, sections and fields kept; the zip checked before python-docx opens it."""

from __future__ import annotations

import functools
import io
import re
import zipfile

import pytest

docx = pytest.importorskip("docx")

from docx.oxml import OxmlElement  # noqa: E402
from docx.oxml.ns import qn  # noqa: E402
from docx.shared import Pt, RGBColor  # noqa: E402

from tfm.documents import docx as word  # noqa: E402
from tfm.documents.formats import Limits  # noqa: E402
from tfm.documents.segments import Segment, Tag  # noqa: E402
from tfm.errors import DataError  # noqa: E402

LINK = "http://schemas.openxmlformats.org/officeDocument/2006/relationships/hyperlink"


def add_hyperlink(paragraph, url: str, text: str, italic: bool = False) -> None:
    """A hyperlink as Word writes it: w:hyperlink r:id="..." around a run styled Hyperlink."""
    link = OxmlElement("w:hyperlink")
    link.set(qn("r:id"), paragraph.part.relate_to(url, LINK, is_external=True))
    run, rpr, style = OxmlElement("w:r"), OxmlElement("w:rPr"), OxmlElement("w:rStyle")
    style.set(qn("w:val"), "Hyperlink")
    rpr.append(style)
    if italic:
        rpr.append(OxmlElement("w:i"))
    t = OxmlElement("w:t")
    t.text = text
    run.extend([rpr, t])
    link.append(run)
    paragraph._p.append(link)


def add_page_field(paragraph) -> None:
    """A PAGE field: begin, instruction, separate, its result, end (five runs)."""
    for kind, text in [("begin", None), ("instr", " PAGE "), ("separate", None),
                       ("text", "1"), ("end", None)]:
        run = OxmlElement("w:r")
        if kind in ("begin", "separate", "end"):
            child = OxmlElement("w:fldChar")
            child.set(qn("w:fldCharType"), kind)
        else:
            child = OxmlElement("w:instrText" if kind == "instr" else "w:t")
            child.text = text
        run.append(child)
        paragraph._p.append(run)


@functools.cache
def make_docx() -> bytes:
    """A small report: a heading, paragraphs with bold, italic, underlined, coloured and
    sized runs, a hyperlink, a tab and a line break, a table with a formatted cell, a header
    and a footer with a page number."""
    document = docx.Document()
    document.add_heading("The garden report", 1)
    p = document.add_paragraph("The ")
    p.add_run("dog").bold = True
    p.add_run(" sleeps in the ")
    add_hyperlink(p, "https://example.org/garden", "garden", italic=True)
    p.add_run(". My sister ")
    run = p.add_run("buys bread")
    run.italic, run.font.color.rgb = True, RGBColor(0xC0, 0x10, 0x10)
    p.add_run("\tat the market.")
    p = document.add_paragraph("Two men are ", style="List Bullet")
    run = p.add_run("climbing")
    run.underline, run.font.name, run.font.size = True, "Courier New", Pt(14)
    p.add_run(" a mountain.")
    p.add_run().add_break()
    p.add_run("A second line after a break.")
    document.add_paragraph()  # an empty paragraph: nothing to translate
    table = document.add_table(rows=3, cols=2)
    table.style = "Table Grid"
    for row, (animal, place) in enumerate([("Animal", "Place"), ("A dog", "the garden"),
                                           ("A cat", "the roof")]):
        table.cell(row, 0).text = animal
        table.cell(row, 1).paragraphs[0].add_run(place).bold = row == 0
    table.cell(2, 1).paragraphs[0].add_run(" at night").italic = True
    section = document.sections[0]
    section.header.paragraphs[0].text = "Annual report of the garden club"
    footer = section.footer.paragraphs[0]
    footer.add_run("Page ")
    add_page_field(footer)
    out = io.BytesIO()
    document.save(out)
    return out.getvalue()


def upper(segment: Segment) -> Segment:
    return Segment(segment.text.upper(), segment.tags)


def runs(paragraph) -> list[tuple]:
    """The paragraph as formatted stretches: text, bold, italic, underline, font, size,
    colour and the hyperlink it lies in, adjacent runs of the same formatting merged."""
    out: list[list] = []
    for item in paragraph.iter_inner_content():
        link = getattr(item, "url", None)
        for run in (item.runs if link is not None else [item]):
            f = run.font
            key = (run.bold, run.italic, run.underline, f.name, f.size,
                   f.color.rgb if f.color.type else None, link)
            if out and out[-1][1] == key:
                out[-1][0] += run.text
            else:
                out.append([run.text, key])
    return [(text, key) for text, key in out]


def all_paragraphs(document) -> list:
    cells = [p for t in document.tables for row in t.rows for c in row.cells
             for p in c.paragraphs]
    section = document.sections[0]
    return [*document.paragraphs, *cells, *section.header.paragraphs,
            *section.footer.paragraphs]


def test_paragraphs_cells_headers_and_footers_are_segments():
    doc = word.read(make_docx(), Limits())
    texts = [s.text for s in doc.segments]
    assert texts[:3] == [
        "The garden report",
        "The dog sleeps in the garden. My sister buys bread at the market.",
        "Two men are climbing a mountain. A second line after a break."]
    assert "A cat" in texts and "the roof at night" in texts
    assert texts[-2:] == ["Annual report of the garden club", "Page "]  # the field kept out
    for segment in doc.segments:
        segment.check()


def test_runs_formatting_and_hyperlinks_are_tags_over_their_words():
    doc = word.read(make_docx(), Limits())
    segment = doc.segments[1]
    spans = [segment.text[t.start:t.end] for t in segment.tags if not t.empty]
    assert spans == ["dog", "garden", "garden", "buys bread "]  # link, then its italic run
    [tab] = [t for t in segment.tags if t.empty]
    assert segment.text[tab.start - 1:tab.start + 2] == " at"  # a space stands for the tab


def test_writing_the_sources_back_keeps_the_document():
    data = make_docx()
    doc = word.read(data, Limits())
    before, after = docx.Document(io.BytesIO(data)), docx.Document(io.BytesIO(
        doc.write(doc.segments)))
    assert [p._p.xml for p in all_paragraphs(after)] == [p._p.xml for p in
                                                         all_paragraphs(before)]
    assert [len(t.rows) for t in after.tables] == [3] and len(after.tables[0].columns) == 2
    assert after.tables[0].style.name == "Table Grid"


def test_upper_casing_changes_only_the_words_and_keeps_every_runs_formatting():
    data = make_docx()
    doc = word.read(data, Limits())
    out = doc.write([upper(s) for s in doc.segments])
    before, after = docx.Document(io.BytesIO(data)), docx.Document(io.BytesIO(out))
    for a, b in zip(all_paragraphs(before), all_paragraphs(after), strict=True):
        assert b.style.name == a.style.name
        assert [(text.upper(), key) for text, key in runs(a)] == runs(b)
    assert [h.url for h in after.paragraphs[1].hyperlinks] == ["https://example.org/garden"]
    assert after.paragraphs[2].runs[-2]._r.xml.count("<w:br/>") == 1
    footer = after.sections[0].footer.paragraphs[0]._p.xml
    assert "PAGE" in footer and footer.count("w:fldChar ") == 3
    assert [[c.text for c in row.cells] for row in after.tables[0].rows] == [
        [c.text.upper() for c in row.cells] for row in before.tables[0].rows]


def test_a_translation_that_moves_words_carries_their_formatting():
    doc = word.read(make_docx(), Limits())
    segment = doc.segments[1]
    dog, link, italic, bread, tab = segment.tags
    # "Der Hund schläft im Garten. Meine Schwester kauft Brot auf dem Markt."
    text = "Der Hund schläft im Garten. Meine Schwester kauft Brot auf dem Markt."
    moved = Segment(text, (
        type(dog)(4, 8, dog.ref), type(link)(20, 26, link.ref), type(italic)(20, 26, italic.ref),
        type(bread)(44, 55, bread.ref), type(tab)(55, 55, tab.ref, bread.ref)))
    out = doc.write([moved if s is segment else s for s in doc.segments])
    paragraph = docx.Document(io.BytesIO(out)).paragraphs[1]
    stretches = runs(paragraph)
    assert ("Hund", (True, None, None, None, None, None, None)) in stretches
    assert [text for text, key in stretches if key[6]] == ["Garten"]
    assert paragraph.text == "Der Hund schläft im Garten. Meine Schwester kauft Brot\tauf dem " \
        "Markt."


def test_a_hyperlink_whose_words_were_translated_away_stays_a_hyperlink_holding_nothing():
    doc = word.read(make_docx(), Limits())
    segment = doc.segments[1]
    dog, link, italic, bread, tab = segment.tags
    text = "Der Hund schläft. Meine Schwester kauft Brot auf dem Markt."
    at, brot = text.index("."), text.index("Brot")
    gone = Segment(text, (  # the link and its italic run: paired, nested, over no words
        Tag(4, 8, dog.ref), Tag(at, at, link.ref, paired=True),
        Tag(at, at, italic.ref, link.ref, paired=True), Tag(brot, brot + 5, bread.ref),
        Tag(brot + 5, brot + 5, tab.ref, bread.ref)))
    gone.check()
    out = doc.write([gone if s is segment else s for s in doc.segments])
    paragraph = docx.Document(io.BytesIO(out)).paragraphs[1]
    [hyperlink] = paragraph._p.findall(qn("w:hyperlink"))
    assert hyperlink.get(qn("r:id")) == segment_link_id(make_docx()) and len(hyperlink) == 0
    assert paragraph.text == "Der Hund schläft. Meine Schwester kauft Brot\tauf dem Markt."


def segment_link_id(data: bytes) -> str:
    paragraph = docx.Document(io.BytesIO(data)).paragraphs[1]
    return paragraph._p.find(qn("w:hyperlink")).get(qn("r:id"))


FOOTNOTES = (
    b'<?xml version="1.0" encoding="UTF-8" standalone="yes"?>\n<w:footnotes xmlns:w="http://'
    b'schemas.openxmlformats.org/wordprocessingml/2006/main"><w:footnote w:type="separator" '
    b'w:id="-1"><w:p><w:r><w:separator/></w:r></w:p></w:footnote><w:footnote w:id="1"><w:p>'
    b'<w:r><w:footnoteRef/></w:r><w:r><w:t xml:space="preserve"> The club meets on </w:t></w:r>'
    b'<w:r><w:rPr><w:b/></w:rPr><w:t>Sundays</w:t></w:r><w:r><w:t>.</w:t></w:r></w:p>'
    b"</w:footnote></w:footnotes>")


def with_footnote(data: bytes) -> bytes:
    """The report with a footnote on its first paragraph: a footnotes part (which python-docx
    keeps as bytes), its content type, its relationship and the reference in the text."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {m: archive.read(m) for m in archive.namelist()}
    members["word/footnotes.xml"] = FOOTNOTES
    members["[Content_Types].xml"] = members["[Content_Types].xml"].replace(
        b"</Types>", b'<Override PartName="/word/footnotes.xml" ContentType="application/vnd.'
        b'openxmlformats-officedocument.wordprocessingml.footnotes+xml"/></Types>')
    members["word/_rels/document.xml.rels"] = members["word/_rels/document.xml.rels"].replace(
        b"</Relationships>", b'<Relationship Id="rIdFoot" Type="http://schemas.openxmlformats'
        b'.org/officeDocument/2006/relationships/footnotes" Target="footnotes.xml"/>'
        b"</Relationships>")
    members["word/document.xml"] = members["word/document.xml"].replace(
        b"<w:t>The garden report</w:t></w:r>", b"<w:t>The garden report</w:t></w:r><w:r>"
        b'<w:footnoteReference w:id="1"/></w:r>', 1)
    return zipped(members)


def test_footnotes_are_translated_and_their_marks_kept():
    data = with_footnote(make_docx())
    doc = word.read(data, Limits())
    assert doc.segments[-1].text == " The club meets on Sundays."
    assert [t.empty for t in doc.segments[0].tags] == [True]  # the footnote's mark
    out = doc.write([upper(s) for s in doc.segments])
    with zipfile.ZipFile(io.BytesIO(out)) as archive:
        notes, body = archive.read("word/footnotes.xml"), archive.read("word/document.xml")
    assert b"<w:t>SUNDAYS</w:t>" in notes and b"<w:b/>" in notes and b"<w:separator/>" in notes
    assert b'<w:footnoteReference w:id="1"/>' in body
    assert docx.Document(io.BytesIO(out)).paragraphs[0].text == "THE GARDEN REPORT"


def zipped(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)
    return out.getvalue()


def replaced(data: bytes, name: str, content: bytes) -> bytes:
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        members = {m: archive.read(m) for m in archive.namelist()}
    members[name] = content
    return zipped(members)


XXE = (b'<?xml version="1.0"?>\n<!DOCTYPE w:document [<!ENTITY xxe SYSTEM "file:///etc/passwd">]>'
       b'<w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main">'
       b"<w:body><w:p><w:r><w:t>&xxe;</w:t></w:r></w:p></w:body></w:document>")
LAUGHS = (b'<?xml version="1.0"?>\n<!DOCTYPE lolz [<!ENTITY lol "lol">'
          + b"".join(b'<!ENTITY lol%d "%s">' % (i, (b"&lol%d;" % (i - 1) if i > 1 else b"&lol;")
                                                 * 10) for i in range(1, 10))
          + b']><w:document xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/'
            b'main"><w:body><w:p><w:r><w:t>&lol9;</w:t></w:r></w:p></w:body></w:document>')


@pytest.mark.parametrize("xml", [XXE, LAUGHS], ids=["external entity", "billion laughs"])
def test_xml_with_a_dtd_is_refused(xml):
    data = replaced(make_docx(), "word/document.xml", xml)
    with pytest.raises(DataError, match="word/document.xml declares a DTD"):
        word.read(data, Limits())


def test_python_docx_parser_never_reads_an_external_entity(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET")
    from docx.oxml.parser import parse_xml
    xml = XXE.replace(b"file:///etc/passwd", secret.as_uri().encode())
    assert "TOP SECRET" not in "".join(parse_xml(xml).itertext())


def test_a_truncated_or_foreign_file_is_refused_in_one_line():
    data = make_docx()
    for bad in (data[:len(data) // 2], b"\x89PNG\r\n\x1a\n" + bytes(range(256)) * 4,
                b"The dog sleeps in the garden.\n"):
        with pytest.raises(DataError, match="truncated or not a DOCX"):
            word.read(bad, Limits())
    with pytest.raises(DataError, match="not a DOCX: a zip without word/document.xml"):
        word.read(zipped({"mimetype": b"application/epub+zip"}), Limits())


def test_a_macro_file_or_broken_xml_is_refused_in_one_line():
    data = make_docx()
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        types = archive.read("[Content_Types].xml")
    docm = replaced(data, "[Content_Types].xml", types.replace(
        b"document.main+xml", b"document.macroEnabled.main+xml"))
    with pytest.raises(DataError, match=r"not a Word document python-docx opens \(its main "):
        word.read(docm, Limits())
    broken = replaced(data, "word/document.xml", b"<w:document><w:body>")
    with pytest.raises(DataError, match=r"^DOCX XML does not parse: .*line 1, column \d+$"):
        word.read(broken, Limits())


def test_a_zip_bomb_is_refused_before_python_docx_reads_it():
    bomb = replaced(make_docx(), "word/media/zeros.bin", bytes(4_000_000))
    assert len(bomb) < 100_000
    with pytest.raises(DataError, match="over the limit of 1000000 .a zip bomb"):
        word.read(bomb, Limits(max_unpacked_bytes=1_000_000))


def test_a_member_that_lies_about_its_size_is_refused():
    bomb = replaced(make_docx(), "word/media/zeros.bin", bytes(4_000_000))
    with zipfile.ZipFile(io.BytesIO(bomb)) as archive:
        info = archive.getinfo("word/media/zeros.bin")
    # the central directory's and the local header's uncompressed size say 1000 bytes
    lying = bytearray(bomb)
    real = (4_000_000).to_bytes(4, "little")
    for match in [m.start() for m in re.finditer(re.escape(real), bytes(lying))]:
        lying[match:match + 4] = (1000).to_bytes(4, "little")
    assert info.file_size == 4_000_000
    with pytest.raises(DataError, match="zeros.bin"):
        word.read(bytes(lying), Limits(max_unpacked_bytes=1_000_000))


def test_a_member_claiming_an_impossible_ratio_or_too_many_files_are_refused(monkeypatch):
    bomb = replaced(make_docx(), "word/media/zeros.bin", bytes(4_000_000))
    size = (4_000_000).to_bytes(4, "little")
    lying = bomb.replace(size, (40_000_000).to_bytes(4, "little"))  # 10,000 times its bytes
    with pytest.raises(DataError, match="zeros.bin claims a 40000000-byte content"):
        word.read(lying, Limits())
    monkeypatch.setattr(word, "MAX_MEMBERS", 20)  # a Word file holds tens; a bomb, millions
    many = zipped({f"word/media/{i}.png": b"" for i in range(21)})
    with pytest.raises(DataError, match="holds 21 files, over the limit of 20"):
        word.read(many, Limits())


NAMESPACE = 'xmlns:w="http://schemas.openxmlformats.org/wordprocessingml/2006/main"'


def nested(depth: int) -> bytes:
    """A paragraph whose words lie ``depth`` inline elements deep."""
    inner = ('<w:customXml w:element="x">' * depth + "<w:r><w:t>deep</w:t></w:r>"
             + "</w:customXml>" * depth)
    return (f'<?xml version="1.0"?><w:document {NAMESPACE}><w:body><w:p>{inner}</w:p>'
            "</w:body></w:document>").encode()


def test_inline_elements_nested_deep_are_kept_whole_or_refused():
    doc = word.read(replaced(make_docx(), "word/document.xml", nested(200)), Limits())
    assert "deep" not in [s.text for s in doc.segments]  # past 8 deep: kept as it is
    out = doc.write([upper(s) for s in doc.segments])
    with zipfile.ZipFile(io.BytesIO(out)) as archive:
        assert b"<w:t>deep</w:t>" in archive.read("word/document.xml")
    assert word.read(replaced(make_docx(), "word/document.xml", nested(4)),
                     Limits()).segments[0].text == "deep"
    with pytest.raises(DataError, match="DOCX XML does not parse: Excessive depth"):
        word.read(replaced(make_docx(), "word/document.xml", nested(5000)), Limits())


def test_a_paragraph_of_thousands_of_formatting_changes_is_refused():
    runs = "".join(f"<w:r>{'<w:rPr><w:b/></w:rPr>' if i % 2 else ''}<w:t>w{i} </w:t></w:r>"
                   for i in range(2010))
    xml = (f'<?xml version="1.0"?><w:document {NAMESPACE}><w:body><w:p>{runs}</w:p>'
           "</w:body></w:document>").encode()
    with pytest.raises(DataError, match="DOCX paragraph 1 of /word/document.xml holds 1005 "
                                        "inline tags"):
        word.read(replaced(make_docx(), "word/document.xml", xml), Limits())


def test_limits_refuse_too_many_paragraphs_and_too_many_bytes():
    with pytest.raises(DataError, match="more than 5 paragraphs"):
        word.read(make_docx(), Limits(max_segments=5))
    with pytest.raises(DataError, match="over the limit of 1000"):
        word.read(make_docx(), Limits(max_bytes=1000))


# --- the page's preview of a Word file (tfm/documents/word_html.py) ---------------------------

def preview(data: bytes):
    import html5lib

    from tfm.documents.word_html import word_html

    return html5lib.parse(word_html(data, Limits()), namespaceHTMLElements=False)


def test_the_preview_shows_headings_runs_lists_breaks_and_tables_in_order():
    tree = preview(make_docx())
    body = tree.find("body")
    assert [child.tag for child in body] == ["h1", "p", "ul", "p", "table"]
    assert body.find("h1").text == "The garden report"
    assert [e.text for e in body.find("p").iter() if e.tag in ("b", "i")] == [
        "dog", "garden", "buys bread"]
    item = body.find("ul/li")
    assert item.find("u").text == "climbing" and item.find("br") is not None
    assert [["".join(td.itertext()) for td in tr.iter("td")] for tr in body.iter("tr")] == [
        ["Animal", "Place"], ["A dog", "the garden"], ["A cat", "the roof at night"]]


def test_the_preview_spans_columns_and_shows_a_table_inside_a_cell():
    document = docx.Document()
    table = document.add_table(rows=2, cols=2)
    table.cell(0, 0).merge(table.cell(0, 1)).text = "Wide"
    table.cell(1, 0).add_table(rows=1, cols=1).cell(0, 0).text = "Inner"
    out = io.BytesIO()
    document.save(out)
    tree = preview(out.getvalue())
    outer = tree.find(".//body/table")
    assert outer.find("tbody/tr/td").get("colspan") == "2"
    assert outer.find(".//td/table//td").findtext("p") == "Inner"


def test_the_preview_of_a_file_the_reader_refuses_is_refused_alike():
    bad = replaced(make_docx(), "word/document.xml",
                   b'<?xml version="1.0"?><!DOCTYPE x [<!ENTITY a "b">]><x/>')
    with pytest.raises(DataError, match="DTD"):
        preview(bad)
