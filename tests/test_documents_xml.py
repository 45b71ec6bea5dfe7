"""Specification of XML files with inline elements as documents (tfm/documents/xml.py): a
DITA-like topic's blocks are segments with their phrase elements as tags; code, translate="no"
and what lies outside the words come back as they were; nothing outside the file is ever read
and no entity is expanded."""

from __future__ import annotations

import os
import threading
import time

import pytest
from lxml import etree

from tfm.documents import xml
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment
from tfm.errors import DataError

PROLOG = b"""<?xml version="1.0" encoding="UTF-8"?>
<!DOCTYPE task PUBLIC "-//OASIS//DTD DITA Task//EN" "task.dtd">
<!-- a help topic -->
"""
TOPIC = PROLOG + b"""<task id="save-file" xml:lang="en">
  <title>Saving a <term>file</term></title>
  <shortdesc>You can keep your work at any time.</shortdesc>
  <taskbody>
    <steps>
      <step><cmd>Click <uicontrol>File</uicontrol> &gt; <uicontrol>Save</uicontrol> to keep
        <ph>your work</ph>.</cmd>
        <info>The file goes to <filepath>~/Documents/work.txt</filepath> by default.</info>
      </step>
      <step><cmd>Type a name such as <userinput>report</userinput> and press
        <b>Enter</b>.</cmd></step>
    </steps>
    <codeblock>save --all  # keep
   everything</codeblock>
    <p translate="no">Product Name 3000</p>
    <p>Ask <ph translate="no">Acme</ph> about <xref href="help.dita" format="dita">the
      help pages</xref>.<draft-comment>Check this</draft-comment></p>
    <p xml:space="preserve">Two   spaces   kept</p>
    <p>An <![CDATA[<unparsed>]]> section, a <!-- note --> comment and &product; here.</p>
    <section><title>Notes</title>Plain text in a section <i>with</i> words.</section>
  </taskbody>
</task>
"""


def upper(segments: list[Segment]) -> list[Segment]:
    """A stand-in translator: every segment's words upper-cased, its tags where they were."""
    return [Segment(s.text.upper(), s.tags) for s in segments]


def tree(data: bytes):
    parser = etree.XMLParser(resolve_entities=False, load_dtd=False, no_network=True)
    return etree.fromstring(data, parser).getroottree()


def shape(data: bytes) -> list:
    """Elements, attributes and other nodes in document order, without their words."""
    return [(str(el.tag), dict(el.attrib) if isinstance(el.tag, str) else el.text)
            for el in tree(data).iter()]


def kept(data: bytes) -> list[bytes]:
    """What must come out byte for byte: code, translate="no", comments, entities."""
    root = tree(data)
    nodes = root.xpath("//codeblock|//filepath|//userinput|//*[@translate='no']"
                       "|//draft-comment|//comment()")
    nodes += list(root.iter(etree.Entity))
    return [etree.tostring(n, with_tail=False) for n in nodes]


@pytest.fixture
def doc():
    return xml.read(TOPIC, Limits())


def test_blocks_are_segments_and_phrases_are_tags(doc):
    texts = [s.text for s in doc.segments]
    assert texts[:3] == ["Saving a file", "You can keep your work at any time.",
                         "Click File > Save to keep your work."]
    cmd = doc.segments[2]
    assert [cmd.text[t.start:t.end] for t in cmd.tags] == ["File", "Save", "your work"]
    info = doc.segments[3]
    assert info.text == "The file goes to  by default." and [t.empty for t in info.tags] == [
        True]
    assert "Two   spaces   kept" in texts  # xml:space="preserve"
    assert "Notes" in texts and "Plain text in a section with words." in texts
    for segment in doc.segments:
        segment.check()


def test_code_and_untranslated_elements_never_reach_the_model(doc):
    words = " ".join(s.text for s in doc.segments)
    for hidden in ("Documents", "report", "save --all", "Product Name", "Acme",
                   "Check this", "help.dita", "note", "product", "save-file"):
        assert hidden not in words


def test_a_round_trip_keeps_the_bytes(doc):
    assert doc.write(doc.segments) == TOPIC


def test_a_translation_changes_only_the_words(doc):
    out = doc.write(upper(doc.segments))
    assert out.startswith(PROLOG)
    assert shape(out) == shape(TOPIC)
    assert kept(out) == kept(TOPIC)
    text = out.decode()
    assert ("<cmd>CLICK <uicontrol>FILE</uicontrol> &gt; <uicontrol>SAVE</uicontrol> TO KEEP "
            "<ph>YOUR WORK</ph>.</cmd>") in text
    assert '<xref href="help.dita" format="dita">THE HELP PAGES</xref>' in text
    assert "<p xml:space=\"preserve\">TWO   SPACES   KEPT</p>" in text
    assert "AN &lt;UNPARSED&gt; SECTION, A <!-- note --> COMMENT AND &product; HERE." in text


def test_mixed_content_makes_unknown_elements_inline():
    data = b"<doc><entry><label>Name</label><value>A <thing>red</thing> car</value></entry></doc>"
    doc = xml.read(data, Limits())
    assert [s.text for s in doc.segments] == ["Name", "A red car"]
    assert doc.write(upper(doc.segments)) == (
        b"<doc><entry><label>NAME</label><value>A <thing>RED</thing> CAR</value></entry></doc>")


def test_namespaces_and_the_encoding_are_kept():
    data = ('<?xml version="1.0" encoding="ISO-8859-1"?>\n<h:doc xmlns:h="urn:help">'
            '<h:p>Caf\xe9 <h:b>cr\xe8me</h:b></h:p></h:doc>\n').encode("latin-1")
    doc = xml.read(data, Limits())
    assert doc.segments[0].text == "Café crème"
    out = doc.write(upper(doc.segments))
    assert out == ('<?xml version="1.0" encoding="ISO-8859-1"?>\n<h:doc xmlns:h="urn:help">'
                   '<h:p>CAF\xc9 <h:b>CR\xc8ME</h:b></h:p></h:doc>\n').encode("latin-1")


def test_xml_that_does_not_parse_is_refused_naming_line_and_column():
    with pytest.raises(DataError, match=r"^the XML file does not parse: line 3, column \d+: "
                                        "Opening and ending tag mismatch"):
        xml.read(b"<topic>\n  <p>One\n  </topic>", Limits())
    with pytest.raises(DataError, match="line 1, column 1: Document is empty"):
        xml.read(b"", Limits())


def laughs(levels: int) -> bytes:
    """Entities each ten times the one before: ``&j;`` would be 10^9 "haha"s."""
    names = "abcdefghij"[:levels + 1]
    declared = "".join(f'<!ENTITY {name} "{f"&{previous};" * 10}">'
                       for previous, name in zip(names, names[1:]))
    return (f'<!DOCTYPE l [<!ENTITY a "haha">{declared}]>'
            f"<l><p>Say &{names[-1]}; now</p></l>").encode()


def test_billion_laughs_is_never_expanded():
    start = time.perf_counter()
    try:
        doc = xml.read(laughs(9), Limits())
    except DataError as error:  # libxml2 refuses it outright: fine too
        assert "amplification" in str(error)
    else:
        assert b"SAY &j; NOW" in doc.write(upper(doc.segments))
    doc = xml.read(laughs(3), Limits())
    assert doc.segments == [Segment("Say  now", doc.segments[0].tags)]
    out = doc.write(upper(doc.segments))
    assert out.endswith(b"]><l><p>SAY &d; NOW</p></l>")  # a reference, never expanded
    assert time.perf_counter() - start < 2


def test_an_external_entity_is_never_read(tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP SECRET CONTENT")
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe)  # opening it to read would block until a writer comes: we watch for it
    data = (f'<?xml version="1.0"?><!DOCTYPE d [<!ENTITY s SYSTEM "file://{secret}">'
            f'<!ENTITY f SYSTEM "{pipe}"><!ENTITY % p SYSTEM "file://{pipe}"> %p;]>'
            '<d><p>Read &s; and &f; here</p></d>').encode()
    opened, done = [], threading.Event()

    def watch() -> None:
        while not done.is_set():
            try:
                fd = os.open(pipe, os.O_WRONLY | os.O_NONBLOCK)  # fails while nobody reads
            except OSError:
                time.sleep(0.001)
                continue
            opened.append(True)
            os.close(fd)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    try:
        doc = xml.read(data, Limits())
        out = doc.write(upper(doc.segments))
    finally:
        done.set()
        watcher.join()
    assert not opened
    assert doc.segments[0].text == "Read  and  here"
    assert b"SECRET" not in out and b"READ &s; AND &f; HERE" in out


def test_hostile_and_bad_files_are_refused_in_one_line():
    with pytest.raises(DataError, match="Excessive depth"):
        xml.read(b"<a>" * 5000 + b"deep", Limits())
    with pytest.raises(DataError, match="nested more than 20 elements deep"):
        xml.read(b"<a>" * 30 + b"x" + b"</a>" * 30, Limits(max_depth=20))
    with pytest.raises(DataError, match="binary"):
        xml.read(b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", Limits())
    with pytest.raises(DataError, match="over the limit"):
        xml.read(b"<a>" + b"x" * 100 + b"</a>", Limits(max_bytes=64))
    with pytest.raises(DataError, match="more than the limit of 2"):
        xml.read(b"<a><p>one</p><p>two</p><p>three</p></a>", Limits(max_segments=2))


def test_android_strings_marked_untranslatable_are_kept():
    data = (b'<?xml version="1.0" encoding="utf-8"?>\n<resources>\n'
            b'    <string name="app_name" translatable="false">Garden Tool</string>\n'
            b'    <string name="greeting">Good morning</string>\n</resources>\n')
    doc = xml.read(data, Limits())
    assert [s.text for s in doc.segments] == ["Good morning"]
    assert doc.write(upper(doc.segments)) == data.replace(b"Good morning", b"GOOD MORNING")


def test_docbook_phrases_namespaces_and_what_follows_the_root_are_kept():
    data = (b'<article xmlns="http://docbook.org/ns/docbook"><para>Run <command>ls</command> '
            b'and <link xmlns:xlink="http://www.w3.org/1999/xlink" xlink:href="x">see '
            b"<guilabel>Files</guilabel></link>.</para></article>\n\n<!-- the end -->\n")
    doc = xml.read(data, Limits())
    assert doc.segments[0].text == "Run  and see Files."
    out = doc.write(upper(doc.segments))
    assert out == (b'<article xmlns="http://docbook.org/ns/docbook"><para>RUN <command>ls'
                   b'</command> AND <link xmlns:xlink="http://www.w3.org/1999/xlink" '
                   b'xlink:href="x">SEE <guilabel>FILES</guilabel></link>.</para></article>'
                   b"\n\n<!-- the end -->\n")
