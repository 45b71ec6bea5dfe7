"""Specification of HTML pages as documents (tfm/documents/html.py): each block's words are a
segment with its inline tags, everything else (scripts, styles, code, URLs, comments,
attributes other than alt/title/placeholder/aria-label) comes back as it was."""

from __future__ import annotations

import time
from pathlib import Path

import html5lib
import pytest
from lxml import etree

from tfm.documents import html
from tfm.documents.formats import Limits, format_for
from tfm.documents.segments import Segment, Tag
from tfm.errors import DataError

PAGE = """<!DOCTYPE html>
<!-- page header -->
<html lang="en">
<head>
  <meta charset="utf-8">
  <title>Gardens &amp; parks</title>
  <style>p { color: red } /* the rules */</style>
</head>
<body>
  <h1>Welcome to <em>our</em> garden</h1>
  <p class="intro">The <b>big <i>brown</i></b> dog &eacute;coute the birds<br>in the
     <a href="park.html?a=1&amp;b=2" title="Open the park page">old garden</a>.
     Type <code>ls -l</code> to list it. <!-- an editor's note --></p>
  <script>if (a < b) { document.write("<p>not a paragraph</p>"); }</script>
  <p translate="no">Keep this paragraph</p>
  <p>Ask <span class="notranslate">Acme Corp</span> about the flowers.</p>
  <img src="cat.png" alt="A sleeping cat">
  <input type="text" placeholder="Your name" name="who">
  <table>
    <tr><th>Animal</th><th>Colour</th></tr>
    <tr><td>The <strong>red</strong> fox</td><td>orange &lt;ish&gt;</td></tr>
  </table>
  <ul><li>First item<ul><li>Nested item</li></ul></li></ul>
  <pre>  keep   this   text </pre>
</body>
</html>
"""


def parse(data: bytes):
    return html5lib.parse(data, treebuilder="lxml", namespaceHTMLElements=False)


def shape(tree) -> list:
    """The element tree without its text: names and attributes, in order (the structure a
    translation must keep)."""
    return [(el.tag if isinstance(el.tag, str) else "#comment",
             dict(el.attrib) if isinstance(el.tag, str) else el.text)
            for el in tree.getroot().iter()]


def untranslated(tree) -> list:
    """Text that must come out byte for byte: scripts, styles, pre, code, translate=no."""
    keep = "//script|//style|//pre|//code|//*[@translate='no']|//*[@class='notranslate']"
    return [etree.tostring(el, method="html", with_tail=False) for el in tree.xpath(keep)]


def upper(segments: list[Segment]) -> list[Segment]:
    """A stand-in translator: every segment's words upper-cased, its tags where they were."""
    return [Segment(s.text.upper(), s.tags) for s in segments]


@pytest.fixture
def doc():
    return html.read(PAGE.encode(), Limits())


def test_html_is_the_format_of_html_files():
    assert format_for(Path("page.htm")).read is not None
    assert format_for(Path("page.htm")).name == format_for(Path("index.html")).name == "html"


def test_each_block_is_a_segment_of_its_inline_words(doc):
    texts = [s.text for s in doc.segments]
    assert texts[:2] == ["Gardens & parks", "Welcome to our garden"]
    intro = doc.segments[2]
    # entities decoded, line breaks inside a paragraph as a space, <br> and code empty tags;
    # the words a <br> parts are two words, not "birdsin"
    assert intro.text.startswith("The big brown dog écoute the birds in the old garden.")
    bold, italic = intro.tags[0], intro.tags[1]
    assert intro.text[bold.start:bold.end] == "big brown"
    assert intro.text[italic.start:italic.end] == "brown"
    link = next(t for t in intro.tags if intro.text[t.start:t.end] == "old garden")
    assert not link.empty
    assert sum(t.empty for t in intro.tags) == 3  # <br>, <code>, the comment
    assert "ls -l" not in intro.text and "editor" not in intro.text
    assert "The red fox" in texts and "orange <ish>" in texts
    assert "First item" in texts and "Nested item" in texts
    for segment in doc.segments:
        segment.check()


def test_untranslated_content_and_attributes_never_reach_the_model(doc):
    words = " ".join(s.text for s in doc.segments)
    for hidden in ("not a paragraph", "color", "Keep this", "Acme", "keep   this", "ls -l",
                   "park.html", "cat.png", "intro", "who"):
        assert hidden not in words
    for attribute in ("Open the park page", "A sleeping cat", "Your name"):
        assert Segment(attribute) in doc.segments


def test_a_round_trip_keeps_the_element_tree_and_the_text(doc):
    out = doc.write(doc.segments)
    assert shape(parse(out)) == shape(parse(PAGE.encode()))
    assert etree.tostring(parse(out), method="html") == etree.tostring(
        parse(PAGE.encode()), method="html")
    assert out.startswith(b"<!DOCTYPE html>\n<!-- page header -->\n<html")  # as written


def test_a_translation_changes_only_the_translated_words(doc):
    out = doc.write(upper(doc.segments))
    source, translated = parse(PAGE.encode()), parse(out)
    assert [t for t, _ in shape(translated)] == [t for t, _ in shape(source)]
    assert untranslated(translated) == untranslated(source)
    assert b"<title>GARDENS &amp; PARKS</title>" in out
    assert b'<b>BIG <i>BROWN</i></b> DOG \xc3\x89COUTE THE BIRDS<br> IN THE' in out
    assert b'<a href="park.html?a=1&amp;b=2" title="OPEN THE PARK PAGE">OLD GARDEN</a>' in out
    assert b"TYPE <code>ls -l</code> TO LIST IT." in out
    assert b'alt="A SLEEPING CAT"' in out and b'placeholder="YOUR NAME"' in out
    assert b"ORANGE &lt;ISH&gt;" in out
    assert b"<!-- an editor's note -->" in out and b"<!-- page header -->" in out
    assert b'ASK <span class="notranslate">Acme Corp</span> ABOUT' in out


def test_write_can_be_called_again_with_other_translations(doc):
    assert doc.write(upper(doc.segments)) == doc.write(upper(doc.segments))
    assert b"Welcome to" in doc.write(doc.segments)


def test_broken_html_is_repaired_as_a_browser_does_never_refused():
    data = b"<p>unclosed <b>bold <i>both</b> after</i> <p>second <table><td>a cell"
    doc = html.read(data, Limits())
    assert [s.text for s in doc.segments] == ["unclosed bold both after", "second", "a cell"]
    out = doc.write(upper(doc.segments))
    assert shape(parse(out)) == shape(parse(data))
    assert b"<html" not in out  # a fragment stays a fragment


def test_a_fragment_is_written_back_as_a_fragment_in_its_order():
    data = b"<style>b{}</style>Hello <b>world</b><p>Second part</p> tail words"
    doc = html.read(data, Limits())
    assert doc.write(upper(doc.segments)) == (
        b"<style>b{}</style>HELLO <b>WORLD</b><p>SECOND PART</p> TAIL WORDS")


def test_the_source_encoding_is_kept():
    data = ('<html><head><meta charset="iso-8859-1"></head><body><p>Caf\xe9 cr\xe8me</p>'
            '</body></html>').encode("latin-1")
    doc = html.read(data, Limits())
    assert doc.segments == [Segment("Café crème")]
    assert "CAFÉ CRÈME".encode("latin-1") in doc.write(upper(doc.segments))


def test_html_nested_thousands_deep_is_refused_in_one_line_and_quickly():
    start = time.perf_counter()
    with pytest.raises(DataError, match="nested more than 512 elements deep"):
        html.read(b"<div>" * 20_000 + b"deep", Limits())
    assert time.perf_counter() - start < 5


def test_a_tag_with_thousands_of_attributes_is_refused_quickly():
    # html5lib compares each attribute's name with all before it: 20,000 would take minutes
    start = time.perf_counter()
    many = b" ".join(b"a%d=1" % i for i in range(20_000))
    with pytest.raises(DataError, match="a tag with more than 256 attributes"):
        html.read(b"<p " + many + b">words</p>", Limits())
    assert time.perf_counter() - start < 2
    few = b" ".join(b"a%d=1" % i for i in range(200))
    assert html.read(b"<p " + few + b">some words</p>", Limits()).segments == [
        Segment("some words")]


def test_limits_on_size_and_segments_and_binary_files_are_refused():
    with pytest.raises(DataError, match="over the limit"):
        html.read(b"<p>x</p>" * 100, Limits(max_bytes=50))
    with pytest.raises(DataError, match="more than the limit of 3"):
        html.read(b"<p>one</p><p>two</p><p>three</p><p>four</p>", Limits(max_segments=3))
    with pytest.raises(DataError, match="binary"):
        html.read(b"PK\x03\x04\x00\x00\x08\x00", Limits())


def test_a_span_left_without_words_is_written_empty_and_unknown_tags_are_refused():
    doc = html.read(b"<p>The <b>big</b> dog</p>", Limits())
    (segment,) = doc.segments
    bold = segment.tags[0]
    assert doc.write([Segment("Der Hund", (Tag(4, 4, bold.ref),))]) == b"<p>Der <b></b>Hund</p>"
    with pytest.raises(ValueError, match="not the source segment's"):
        doc.write([Segment("Der Hund", (Tag(0, 3, bold.ref + 10),))])


@pytest.mark.parametrize("page, shown", [
    (b"<p>Hello <b> <i> </i></b> world</p>", b"<p>HELLO <b><i></i></b>WORLD</p>"),
    (b"<p>Hello<b> <i> </i></b> world</p>", b"<p>HELLO<b> <i></i></b>WORLD</p>"),
])
def test_nested_elements_over_whitespace_squeezed_away_stay_nested(page, shown):
    doc = html.read(page, Limits())
    (segment,) = doc.segments
    segment.check()
    assert segment.text == "Hello world"
    assert doc.write([Segment(segment.text.upper(), segment.tags)]) == shown


XHTML = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE html>
<html xmlns="http://www.w3.org/1999/xhtml" xmlns:epub="http://www.idpf.org/2007/ops">
<head><title>Chapter one</title></head>
<body><p>The <b>dog</b> sleeps.<br/>It <code>snores</code> loudly.</p>
<img src="dog.png" alt="A dog"/></body>
</html>
"""


def test_well_formed_xhtml_stays_xml():
    doc = html.read(XHTML, Limits())
    assert [s.text for s in doc.segments] == [
        "Chapter one", "The dog sleeps. It  loudly.", "A dog"]
    assert doc.write(doc.segments) == XHTML
    out = doc.write(upper(doc.segments))
    root = etree.fromstring(out)  # XML: <br/> and <img/> closed, namespaces kept
    assert root.nsmap[None] == "http://www.w3.org/1999/xhtml"
    assert b"<p>THE <b>DOG</b> SLEEPS.<br/> IT <code>snores</code> LOUDLY.</p>" in out
    assert b'alt="A DOG"/>' in out


def test_xhtml_that_is_not_well_formed_is_read_as_browsers_read_it():
    data = XHTML.replace(b"<br/>", b"<br>")
    doc = html.read(data, Limits())
    assert "The dog sleeps. It  loudly." in [s.text for s in doc.segments]
    assert b"<br>" in doc.write(upper(doc.segments))


def test_names_with_a_colon_come_back_as_written():
    data = (b'<html xml:lang="en" xmlns:og="http://ogp.me/ns#"><body>'
            b'<p xml:lang="en">Hello <o:p></o:p>world U0003A</p></body></html>')
    doc = html.read(data, Limits())
    assert doc.write(upper(doc.segments)) == (
        b'<html xml:lang="en" xmlns:og="http://ogp.me/ns#"><head></head><body>'
        b'<p xml:lang="en">HELLO <o:p></o:p>WORLD U0003A</p></body></html>')


def test_inline_svg_and_mathml_come_back_as_html_writes_them():
    data = (b'<p>A <svg viewBox="0 0 2 2" xmlns:xlink="http://www.w3.org/1999/xlink">'
            b'<use xlink:href="#dot"></use><text>never translated</text></svg> and '
            b"<math><mi>x</mi></math> here</p>")
    doc = html.read(data, Limits())
    assert [s.text for s in doc.segments] == ["A  and  here"]
    assert doc.write(upper(doc.segments)) == data.replace(b"> and <", b"> AND <").replace(
        b"> here", b"> HERE")


def test_a_page_without_a_declared_encoding_that_reads_as_utf8_is_written_in_utf8():
    # html5lib's fallback for an undeclared encoding is windows-1252: a German translation of
    # an ASCII page would come out in it, mojibake on a UTF-8 terminal.
    doc = html.read(b"<p>The dog sleeps.</p>\n", Limits())
    out = doc.write([Segment("Der Hund schl\u00e4ft.", s.tags) for s in doc.segments])
    assert out.decode("utf-8") == "<p>Der Hund schl\u00e4ft.</p>\n"
    # A declared encoding is kept, and bytes that are not UTF-8 still read as browsers do.
    latin = "<meta charset=\"iso-8859-1\"><p>Gr\u00fc\u00dfe</p>".encode("latin-1")
    doc = html.read(latin, Limits())
    assert "\u00e4".encode("latin-1") in doc.write(
        [Segment("Gr\u00e4ser", s.tags) for s in doc.segments])
    assert html.read("<p>Gr\u00fc\u00dfe</p>".encode("latin-1"), Limits()).segments[0].text == \
        "Gr\u00fc\u00dfe"
