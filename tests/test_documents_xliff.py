"""Specification of XLIFF files as documents (tfm/documents/xliff.py): each unit's source is a
segment with its inline codes as tags, and its target is filled with the same codes, marked
for review; the rest of the file is kept."""

from __future__ import annotations

import copy

import pytest
from lxml import etree

from tfm.documents import xliff
from tfm.documents.formats import Limits, format_for
from tfm.documents.segments import Segment
from tfm.errors import DataError

NS12 = "urn:oasis:names:tc:xliff:document:1.2"
NS20 = "urn:oasis:names:tc:xliff:document:2.0"
V12 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" target-language="de" datatype="html" original="page.html">
    <header><note>Exported by a CAT tool</note></header>
    <body>
      <group id="g1">
        <trans-unit id="1">
          <source>The <g id="1" ctype="bold">big <g id="2">brown</g></g> dog sleeps<x
            id="3"/> in the garden.</source>
        </trans-unit>
      </group>
      <trans-unit id="2" approved="no">
        <source>Press <bpt id="1">&lt;b&gt;</bpt>Save<ept id="1">&lt;/b&gt;</ept> now.</source>
        <target state="new" xml:lang="de">Alt</target>
        <note>Keep it short</note>
      </trans-unit>
      <trans-unit id="3" translate="no"><source>Acme Corp</source></trans-unit>
      <trans-unit id="4"><source><ph id="1">{0}</ph></source></trans-unit>
      <trans-unit id="5"><source>Call <mrk mtype="protected">Acme</mrk> today.</source></trans-unit>
      <trans-unit id="6" approved="yes"><source>Approved text</source>
        <target state="translated">Gepr&#252;fter Text</target></trans-unit>
      <trans-unit id="7"><source>Final text</source><target state="final">Endtext</target>
      </trans-unit>
    </body>
  </file>
</xliff>
"""
V20 = b"""<?xml version="1.0" encoding="UTF-8"?>
<xliff xmlns="urn:oasis:names:tc:xliff:document:2.0" version="2.0" srcLang="en" trgLang="de">
  <file id="f1">
    <unit id="u1">
      <originalData><data id="d1">&lt;br/&gt;</data></originalData>
      <segment id="s1">
        <source>Click <pc id="1">Save</pc> to keep<ph id="2" dataRef="d1"/> your work.</source>
      </segment>
      <ignorable><source> </source></ignorable>
      <segment id="s2" state="initial"><source>Second sentence.</source><target>Alt</target>
      </segment>
    </unit>
    <unit id="u2" translate="no"><segment><source>Product Name</source></segment></unit>
    <unit id="u3"><segment state="final"><source>Done</source><target>Fertig</target></segment>
    </unit>
  </file>
</xliff>
"""


def upper(segments: list[Segment]) -> list[Segment]:
    """A stand-in translator: every segment's words upper-cased, its tags where they were."""
    return [Segment(s.text.upper(), s.tags) for s in segments]


def root(data: bytes):
    return etree.fromstring(data, etree.XMLParser(resolve_entities=False, no_network=True))


def codes(element) -> list:
    """An element's inline codes: names and attributes in order, and the native code that
    the codes kept whole hold."""
    kept = ("x", "bx", "ex", "ph", "bpt", "ept", "it")
    return [(etree.QName(el).localname, dict(el.attrib),
             el.text if etree.QName(el).localname in kept else None)
            for el in element.iter() if el is not element]


def machine(target) -> bool:
    """Whether a target was written by the machine (marked as such; the others a person's)."""
    return (target.get("state-qualifier") == "mt-suggestion"
            or target.getparent().get("state") == "translated")


def words(element) -> str:
    """The words of a source or target, without what its kept codes hold (native code,
    protected text)."""
    kept = ("x", "bx", "ex", "ph", "bpt", "ept", "it")
    inside = [words(child) if etree.QName(child).localname not in kept
              and child.get("mtype") != "protected" else "" for child in element]
    return (element.text or "") + "".join(
        part + (child.tail or "") for part, child in zip(inside, element))


def without_targets(data: bytes) -> bytes:
    """The file with every target removed, states unset and indentation dropped, as
    canonical XML."""
    tree = copy.deepcopy(root(data))
    for target in list(tree.iter(f"{{{NS12}}}target", f"{{{NS20}}}target")):
        target.getparent().remove(target)
    for el in tree.iter():
        el.attrib.pop("state", None)
        if el.tail is not None and not el.tail.strip():
            el.tail = None
    return etree.tostring(tree, method="c14n")


def test_xliff_files_are_read_by_this_module():
    assert format_for(None, "xliff").module == "xliff"


def test_each_source_is_a_segment_with_its_inline_codes():
    doc = xliff.read(V12, Limits())
    texts = [s.text for s in doc.segments]
    assert texts == ["The big brown dog sleeps in the garden.", "Press Save now.",
                     "Call  today."]
    first = doc.segments[0]
    assert [(first.text[t.start:t.end], t.empty) for t in first.tags] == [
        ("big brown", False), ("brown", False), ("", True)]
    assert [t.empty for t in doc.segments[1].tags] == [True, True]  # native code kept whole


@pytest.mark.parametrize("data, namespace", [(V12, NS12), (V20, NS20)])
def test_targets_are_filled_with_the_sources_codes(data, namespace):
    doc = xliff.read(data, Limits())
    out = doc.write(upper(doc.segments))
    translated = root(out)
    units = 0
    for target in filter(machine, translated.iter(f"{{{namespace}}}target")):
        source = target.getparent().find(f"{{{namespace}}}source")
        assert codes(target) == codes(source)
        assert words(target) == words(source).upper()
        units += 1
    assert units == len(doc.segments)
    assert without_targets(out) == without_targets(data)  # nothing else changed


def test_xliff_1_2_targets_are_marked_machine_translated_for_review():
    doc = xliff.read(V12, Limits())
    translated = root(doc.write(upper(doc.segments)))
    targets = {t.getparent().get("id"): t for t in translated.iter(f"{{{NS12}}}target")}
    # not translate="no", not the placeholder alone, not an approved or final translation
    assert [t.text for i, t in sorted(targets.items()) if i in ("6", "7")] == ["Geprüfter Text",
                                                                         "Endtext"]
    targets = {i: t for i, t in targets.items() if i not in ("6", "7")}
    assert sorted(targets) == ["1", "2", "5"]
    for target in targets.values():
        assert target.get("state") == "needs-review-translation"
        assert target.get("state-qualifier") == "mt-suggestion"
    assert targets["2"].get("{http://www.w3.org/XML/1998/namespace}lang") == "de"  # kept
    assert "".join(targets["2"].itertext()) == "PRESS <b>SAVE</b> NOW."
    assert etree.QName(targets["1"].getprevious()).localname == "source"  # made after it
    assert etree.QName(targets["2"].getnext()).localname == "note"  # replaced where it was
    assert translated.find(f".//{{{NS12}}}file").get("target-language") == "de"


def test_xliff_2_segments_are_marked_translated():
    doc = xliff.read(V20, Limits())
    out = doc.write(upper(doc.segments))
    segments = list(root(out).iter(f"{{{NS20}}}segment"))
    assert [s.get("state") for s in segments] == ["translated", "translated", None, "final"]
    assert b"<target>Fertig</target>" in out
    assert b'CLICK <pc id="1">SAVE</pc> TO KEEP<ph id="2" dataRef="d1"/> YOUR WORK.' in out
    assert b"<target>SECOND SENTENCE.</target>" in out
    assert b"Product Name</source></segment>" in out


def test_an_untranslated_write_copies_each_source_into_its_target():
    doc = xliff.read(V20, Limits())
    out = root(doc.write(doc.segments))
    for target in filter(machine, out.iter(f"{{{NS20}}}target")):
        source = target.getparent().find(f"{{{NS20}}}source")
        assert etree.tostring(target, with_tail=False).replace(b"target", b"source") == (
            etree.tostring(source, with_tail=False))


@pytest.mark.parametrize("data, problem", [
    (b"<html><body>not xliff</body></html>", "not XLIFF: its root element is <html>"),
    (b'<xliff version="3.0"><file/></xliff>', "names no XLIFF version"),
    (b'<xliff version="1.2">\n<file>\n<body></file>', "line 3, column"),
    (b'<!DOCTYPE x [<!ENTITY s SYSTEM "file:///etc/passwd">]><xliff version="1.2"><file>'
     b"<body><trans-unit id='1'><source>See &s;</source></trans-unit></body></file></xliff>",
     None),
])
def test_bad_and_hostile_files(data, problem):
    if problem is None:  # an external entity stays a reference: nothing is read
        doc = xliff.read(data, Limits())
        out = doc.write(upper(doc.segments))
        assert b"<target" in out and b"root:" not in out and b"SEE &s;" in out
        return
    with pytest.raises(DataError, match=problem):
        xliff.read(data, Limits())


def test_the_segment_limit_holds():
    units = b"".join(b"<trans-unit id='%d'><source>Text %d</source></trans-unit>" % (i, i)
                     for i in range(5))
    data = b'<xliff version="1.2"><file><body>' + units + b"</body></file></xliff>"
    assert len(xliff.read(data, Limits()).segments) == 5
    with pytest.raises(DataError, match="more than the limit of 4"):
        xliff.read(data, Limits(max_segments=4))
