"""bench/documents_battery.py's checks, checked: a translation that keeps every format's
structure and untranslatable parts passes them (the upper-casing stand-in of
test_documents_translate.py, through the library), and one that breaks a structure, changes
what must be kept or does not parse fails them. bench/ is not a package: the script is loaded
from its file."""

from __future__ import annotations

import importlib.util
import io
import sys
import time
from pathlib import Path

import pytest

from tfm.config import SearchOptions
from tfm.documents.formats import format_for
from tfm.documents.translate import translate_document

pytest.importorskip("docx")
pytest.importorskip("srt")
pytest.importorskip("webvtt")
pytest.importorskip("polib")
pytest.importorskip("markdown_it")

sys.path.insert(0, str(Path(__file__).parent))
from test_documents_translate import UpperTranslator  # noqa: E402

BATTERY = Path(__file__).resolve().parent.parent / "bench" / "documents_battery.py"


def load():
    spec = importlib.util.spec_from_file_location("documents_battery", BATTERY)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


battery = load()


def upper(source: Path, output: Path) -> float:
    start = time.perf_counter()
    doc = format_for(source).read(source.read_bytes())
    output.write_bytes(translate_document(doc, UpperTranslator(), SearchOptions()))
    return time.perf_counter() - start


def test_a_translation_that_keeps_everything_passes_every_format_s_checks(tmp_path):
    rows, problems = battery.run(tmp_path, upper, cues=12)
    assert problems == []
    assert {r.fmt for r in rows} == {"html", "markdown", "srt", "vtt", "po", "xliff", "xml",
                                     "docx"}
    for row in rows:
        assert row.segments > 0 and row.structure[0] == row.structure[1] > 0
        assert row.kept[0] == row.kept[1] > 0, row.fmt
    assert "| srt | 1 | 12 | 100.0 | 100.0 |" in battery.table(rows)


def failed(fmt: str, source: bytes, output: bytes) -> battery.Checked:
    checked = battery.check(fmt, source, output)
    assert not checked.ok and checked.problems
    return checked


def test_a_cue_whose_timing_moved_fails_structure_and_kept():
    source = battery.subrip(5)
    line = source.decode().splitlines()[1]
    moved = source.replace(line.encode(), line.replace("00:00:0", "00:00:1", 1).encode())
    checked = failed("srt", source, moved)
    assert checked.structure == (4, 5) and checked.kept == (4, 5)


def test_a_vtt_without_its_note_fails():
    source = battery.webvtt(4)
    failed("vtt", source, source.replace(b"NOTE made", b"NOTE changed"))


def test_a_changed_script_or_url_or_a_lost_element_fails_html():
    page = battery.web_page()
    failed("html", page, page.replace(b"track(", b"TRACK("))
    failed("html", page, page.replace(b"/img/beach.jpg", b"/img/BEACH.jpg"))
    assert failed("html", page, page.replace(b"<em>park</em>", b"park")).structure[0] < \
        len(battery.html_structure(page))


def test_changed_code_or_markup_fails_markdown():
    readme = battery.readme()
    failed("markdown", readme, readme.replace(b"pip install", b"PIP INSTALL"))
    failed("markdown", readme, readme.replace(b"`park --help`", b"park --help"))
    failed("markdown", readme, readme.replace(b"**", b""))


def test_a_lost_placeholder_or_entry_fails_the_catalogue():
    source = battery.catalogue()
    filled = source.replace(b'msgid "%(count)d photos of the beach"\nmsgstr ""',
                            b'msgid "%(count)d photos of the beach"\nmsgstr "Fotos vom Strand"')
    failed("po", source, filled)
    failed("po", source, source.replace(b'msgctxt "button"\n', b""))


def test_a_target_without_its_codes_or_a_changed_note_fails_xliff():
    source = battery.xliff_1()
    filled = source.replace(b'to keep the photo.</source></trans-unit>',
                            b'to keep the photo.</source><target>Speichern</target></trans-unit>')
    failed("xliff", source, filled)
    failed("xliff", source, source.replace(b"Exported for", b"EXPORTED FOR"))


def test_changed_code_fails_dita():
    topic = battery.dita_topic()
    failed("xml", topic, topic.replace(b"park add --all", b"PARK ADD --ALL"))


def test_a_lost_table_row_or_link_fails_the_word_file():
    import docx

    source = battery.word_file()
    document = docx.Document(io.BytesIO(source))
    table = document.tables[0]
    table._tbl.remove(table.rows[-1]._tr)
    out = io.BytesIO()
    document.save(out)
    failed("docx", source, out.getvalue())


def test_an_output_that_does_not_parse_fails():
    source = battery.word_file()
    checked = failed("docx", source, source[:len(source) // 2])
    assert not checked.parsed and checked.structure[0] == 0
    assert not battery.check("xml", battery.dita_topic(), b"<task><title>").parsed


def test_inline_elements_that_follow_their_words_keep_the_structure_but_not_across_parents():
    page = b"<p>A <b>red</b> car and <code>x = 1</code> in the <i>park</i>.</p><p>Two.</p>"
    swapped = b"<p>Im <i>Park</i> <code>x = 1</code> ein <b>rotes</b> Auto.</p><p>Zwei.</p>"
    assert battery.check("html", page, swapped).ok
    moved = b"<p>Im <i>Park</i> <code>x = 1</code> ein rotes Auto.</p><p><b>Zwei</b>.</p>"
    assert failed("html", page, moved).structure[0] < len(battery.html_structure(page))
    failed("html", page, swapped.replace(b"x = 1", b"x = 2"))
    failed("html", page, b"<p>Zwei.</p>" + swapped.split(b"</p>")[0] + b"</p>")  # blocks


def test_markdown_emphasis_and_code_that_follow_their_words_keep_the_structure():
    readme = b"A **red** car and `x = 1` in the *park*.\n\nTwo.\n"
    assert battery.check("markdown", readme,
                         b"Im *Park* `x = 1` ein **rotes** Auto.\n\nZwei.\n").ok
    failed("markdown", readme, b"Im *Park* `x = 2` ein **rotes** Auto.\n\nZwei.\n")
    failed("markdown", readme, b"Im *Park* `x = 1` ein rotes Auto.\n\n**Zwei**.\n")
