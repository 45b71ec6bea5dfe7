"""Specification of a translated document's language: a format that names its language (HTML's
``lang``, XLIFF's target language, PO's ``Language:``, DOCX's properties and proofing language,
an XML root's ``xml:lang``) names the target language when the caller knows it, and leaves the
file's own when it does not; the translation pipeline passes the request's or the model's."""

from __future__ import annotations

import io
import sys
from pathlib import Path

import pytest

from tfm.config import SearchOptions
from tfm.documents import formats
from tfm.documents.formats import Limits, language_tag
from tfm.documents.segments import Segment
from tfm.documents.translate import translate_document

sys.path.insert(0, str(Path(__file__).parent))
from test_documents_translate import UpperTranslator  # noqa: E402


def upper(doc) -> list[Segment]:
    return [Segment(s.text.upper(), s.tags) for s in doc.segments]


def read(name: str, data: bytes):
    return next(f for f in formats.FORMATS if f.name == name).read(data, Limits())


PAGE = b'<!DOCTYPE html>\n<html lang="en"><head><title>Dogs</title></head>' \
       b'<body><p lang="en">The <b>dog</b> sleeps.</p></body></html>'


def test_language_tags_are_bcp_47_whatever_tfm_s_spelling():
    assert [language_tag(c) for c in ["de", ">>de<<", "__de__", "pt_BR", "deu_Latn", None]] \
        == ["de", "de", "de", "pt-BR", "deu-Latn", None]


def test_an_html_page_names_the_target_language_on_html_only():
    doc = read("html", PAGE)
    out = doc.write(upper(doc), language="de")
    assert b'<html lang="de">' in out and b'<p lang="en">THE <b>DOG</b> SLEEPS.</p>' in out
    assert b'<html lang="en">' in doc.write(upper(doc))  # not told: as it was
    fragment = read("html", b"<p>The dog.</p>")
    assert fragment.write(upper(fragment), language="de") == b"<p>THE DOG.</p>"


def test_an_xhtml_page_names_it_in_lang_and_xml_lang():
    data = (b'<?xml version="1.0" encoding="utf-8"?>\n<html xmlns="http://www.w3.org/1999/xhtml"'
            b' xml:lang="en" lang="en"><head><title>Dogs</title></head><body><p>The dog.</p>'
            b'</body></html>')
    doc = read("html", data)
    out = doc.write(upper(doc), language="de")
    assert b'xml:lang="de"' in out and b'lang="de"' in out and b'"en"' not in out


XLIFF_1 = b'''<?xml version="1.0" encoding="UTF-8"?>
<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2">
  <file source-language="en" datatype="plaintext" original="a.txt"><body>
    <trans-unit id="1"><source>The dog sleeps.</source></trans-unit>
  </body></file>
</xliff>
'''
XLIFF_2 = b'''<?xml version="1.0" encoding="UTF-8"?>
<xliff version="2.0" xmlns="urn:oasis:names:tc:xliff:document:2.0" srcLang="en" trgLang="fr">
  <file id="f1"><unit id="1"><segment><source>The dog sleeps.</source></segment></unit></file>
</xliff>
'''


def test_xliff_files_name_their_target_language():
    from lxml import etree

    one = read("xliff", XLIFF_1)
    file = etree.fromstring(one.write(upper(one), language="de")).find(
        "{urn:oasis:names:tc:xliff:document:1.2}file")
    assert file.get("target-language") == "de" and file.get("source-language") == "en"
    two = read("xliff", XLIFF_2)
    root = etree.fromstring(two.write(upper(two), language="de"))
    assert (root.get("srcLang"), root.get("trgLang")) == ("en", "de")
    assert etree.fromstring(two.write(upper(two))).get("trgLang") == "fr"


def test_a_catalogue_names_its_language_as_a_locale():
    polib = pytest.importorskip("polib")
    data = (b'msgid ""\nmsgstr ""\n"Content-Type: text/plain; charset=UTF-8\\n"\n'
            b'"Language: \\n"\n\nmsgid "The dog sleeps."\nmsgstr ""\n')
    doc = read("po", data)
    catalogue = polib.pofile(doc.write(upper(doc), language="pt-BR").decode())
    assert catalogue.metadata["Language"] == "pt_BR"
    assert catalogue.find("The dog sleeps.").msgstr == "THE DOG SLEEPS."


def test_a_dita_topic_names_it_in_its_root_s_xml_lang():
    data = (b'<?xml version="1.0"?>\n<topic id="t" xml:lang="en-US"><title>Dogs</title>'
            b'<body><p>The dog sleeps.</p></body></topic>')
    doc = read("xml", data)
    assert b'xml:lang="de"' in doc.write(upper(doc), language="de")
    plain = read("xml", b"<doc><p>The dog sleeps.</p></doc>")
    assert b"lang" not in plain.write(upper(plain), language="de")


def test_a_word_file_names_it_in_its_properties_and_proofing_language():
    docx = pytest.importorskip("docx")
    from docx.oxml.ns import qn

    source = docx.Document()
    run = source.add_paragraph().add_run("The dog sleeps.")
    lang = run._r.get_or_add_rPr().makeelement(qn("w:lang"), {qn("w:val"): "en-US"})
    run._r.get_or_add_rPr().append(lang)
    source.core_properties.language = "en-US"
    out = io.BytesIO()
    source.save(out)
    doc = read("docx", out.getvalue())
    written = docx.Document(io.BytesIO(doc.write(upper(doc), language="de")))
    assert written.core_properties.language == "de"
    (paragraph,) = [p for p in written.paragraphs if p.text]
    assert paragraph.text == "THE DOG SLEEPS."
    assert {e.get(qn("w:val")) for e in paragraph._p.iter(qn("w:lang"))} == {"de"}


def test_translation_names_the_request_s_target_else_the_model_s():
    class Info:
        tgt_lang, directions = "de", []

    translator = UpperTranslator()
    translator.info = Info()  # type: ignore[attr-defined]
    assert b'<html lang="de">' in translate_document(read("html", PAGE), translator,
                                                     SearchOptions())
    assert b'<html lang="en">' in translate_document(read("html", PAGE), UpperTranslator(),
                                                     SearchOptions())  # none known: kept
