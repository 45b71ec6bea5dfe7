"""Specification of gettext catalogues (tfm/documents/gettext.py): each untranslated msgid fills
its msgstr (plural forms as the catalogue's Plural-Forms asks), marked fuzzy for review;
placeholders and markup never reach the model and come back exactly; contexts, flags,
comments, obsolete entries, translated entries and the header are kept."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

polib = pytest.importorskip("polib")

from tfm.documents import gettext  # noqa: E402
from tfm.documents.formats import Limits, format_for  # noqa: E402
from tfm.documents.segments import Segment  # noqa: E402
from tfm.errors import DataError  # noqa: E402

CZECH = "nplurals=3; plural=(n==1) ? 0 : (n>=2 && n<=4) ? 1 : 2;"
PLACEHOLDERS = re.compile(r"%\(\w+\)[sd]|%\d\$s|%[-0-9.]*[sdf]|%%|\{\w*\}|</?[a-z][^<>]*>")


def catalogue(plural_forms: str = CZECH, entries: int = 40) -> bytes:
    """A Czech catalogue as an application's would be: plain strings, printf and brace
    placeholders, markup, contexts, plurals, comments, references, a fuzzy entry with its
    previous msgid, strings already translated, obsolete entries."""
    po = polib.POFile()
    po.metadata = {"Project-Id-Version": "app 1.0", "Language": "cs", "MIME-Version": "1.0",
                   "Content-Type": "text/plain; charset=UTF-8",
                   "Content-Transfer-Encoding": "8bit", "Plural-Forms": plural_forms}
    po.header = "Czech translation of the app.\nCopyright (C) 2026 the app's authors."
    for i in range(entries):
        kind = i % 8
        entry = polib.POEntry(msgid=f"The dog sleeps in garden number {i}.",
                              occurrences=[(f"app/views/page{i}.py", str(10 + i))])
        if kind == 1:
            entry.msgid, entry.flags = f"Deleted %(count)d files from %s ({i}).", [
                "python-format"]
            entry.comment = "Shown after the bin is emptied"
        elif kind == 2:
            entry.msgid, entry.msgctxt = "Open", f"menu {i}"
        elif kind == 3:
            entry.msgid, entry.msgid_plural, entry.flags = (
                f"%d file was copied to folder {i}.", f"%d files were copied to folder {i}.",
                ["c-format"])
            entry.msgstr_plural = {0: "", 1: "", 2: ""}
        elif kind == 4:
            entry.msgid = f'Read the <a href="https://example.org/{i}">manual</a> first.'
        elif kind == 5:
            entry.msgid, entry.flags = f"Hello {{name}}, you have {i} new messages.", [
                "python-brace-format"]
        elif kind == 6:
            entry.msgid, entry.msgstr = f"Save {i}", f"Uložit {i}"  # already translated
            entry.tcomment = "Checked by Jana"
        elif kind == 7:
            entry.msgid, entry.flags = f"\nA long text {i} that starts a paragraph.\n", ["fuzzy"]
            entry.previous_msgid = f"A long text {i}."
        po.append(entry)
    po.append(polib.POEntry(msgid="Old string", msgstr="Starý řetězec", obsolete=True))
    po.append(polib.POEntry(msgid="Removed", obsolete=True))
    return po.__unicode__().encode("utf-8")


def upper(segment: Segment) -> Segment:
    return Segment(segment.text.upper(), segment.tags)


def upper_outside_placeholders(text: str) -> str:
    """What an upper-cased msgid reads: the words upper-cased, placeholders and markup not."""
    pieces = PLACEHOLDERS.split(text)
    kept = PLACEHOLDERS.findall(text)
    return "".join(p.upper() + (kept[i] if i < len(kept) else "") for i, p in enumerate(pieces))


def parsed(data: bytes):
    return polib.pofile(data.decode("utf-8"))


def test_every_untranslated_msgid_is_a_segment_and_nothing_else_is():
    doc = format_for(Path("cs.po")).read(catalogue())
    texts = [s.text for s in doc.segments]
    assert len(texts) == 40 - 5 + 5  # 5 translated entries left; 5 plurals give two each
    assert not any("Uložit" in t or "Save" in t or "Old string" in t or "Removed" in t
                   for t in texts)
    for segment in doc.segments:
        segment.check()
        assert not PLACEHOLDERS.search(segment.text), segment.text


def test_placeholders_are_empty_tags_and_markup_a_span_over_its_words():
    doc = gettext.read(catalogue(entries=8), Limits())
    by_text = {s.text: s for s in doc.segments}
    deleted = by_text["Deleted files from (1)."]  # a placeholder takes a space along
    assert [doc.markup[t.ref] for t in deleted.tags] == ["%(count)d ", "%s "]
    assert all(t.empty for t in deleted.tags)
    assert [doc.markup[t.ref] for t in by_text["Hello, you have 5 new messages."].tags] == [
        " {name}"]  # before punctuation: the space before it
    assert not any("  " in s.text for s in doc.segments)
    link = by_text["Read the manual first."]
    [span] = link.tags
    assert link.text[span.start:span.end] == "manual"
    assert doc.markup[span.ref] == ('<a href="https://example.org/4">', "</a>")
    assert "A long text 7 that starts a paragraph." in by_text  # its "\n"s kept aside


def test_a_placeholder_lands_beside_a_moved_word_with_its_space():
    doc = gettext.read(b'#, python-format\nmsgid "Deleted %(count)d files."\nmsgstr ""\n',
                       Limits())
    [segment] = doc.segments
    [tag] = segment.tags
    moved = Segment("Dateien gelöscht.", (type(tag)(0, 0, tag.ref),))  # before "Dateien"
    assert parsed(doc.write([moved]))[0].msgstr == "%(count)d Dateien gelöscht."


def test_writing_the_sources_back_fills_msgstrs_and_keeps_everything_else():
    data = catalogue()
    doc = gettext.read(data, Limits())
    before, after = parsed(data), parsed(doc.write(doc.segments))
    assert after.metadata == before.metadata and after.header == before.header
    assert len(after) == len(before)
    assert len(after.obsolete_entries()) == 2
    for a, b in zip(before, after):
        kept = ("msgid", "msgid_plural", "msgctxt", "comment", "tcomment", "occurrences",
                "obsolete", "previous_msgid")
        assert [getattr(b, k) for k in kept] == [getattr(a, k) for k in kept]
        if a.obsolete or a.translated():
            assert (b.msgstr, b.msgstr_plural, b.flags) == (a.msgstr, a.msgstr_plural, a.flags)
        elif a.msgid_plural:
            assert b.msgstr_plural == {0: a.msgid, 1: a.msgid_plural, 2: a.msgid_plural}
            assert b.flags == ["fuzzy", *a.flags]
        else:
            assert b.msgstr == a.msgid and "fuzzy" in b.flags
            assert [f for f in b.flags if f != "fuzzy"] == [f for f in a.flags if f != "fuzzy"]


def test_a_catalogue_with_nothing_to_fill_comes_back_byte_for_byte():
    data = catalogue()
    done = parsed(data)
    for entry in done:
        entry.msgstr = entry.msgstr or ("x" if not entry.msgid_plural else "")
        if entry.msgid_plural:
            entry.msgstr_plural = {0: "x", 1: "y", 2: "z"}
    data = done.__unicode__().encode()
    doc = gettext.read(data, Limits())
    assert doc.segments == [] and doc.write([]) == data


def test_upper_casing_changes_only_words_never_placeholders_or_markup():
    data = catalogue()
    doc = gettext.read(data, Limits())
    before, after = parsed(data), parsed(doc.write([upper(s) for s in doc.segments]))
    for a, b in zip(before, after):
        if a.obsolete or a.translated():
            continue
        if a.msgid_plural:
            assert b.msgstr_plural[0] == upper_outside_placeholders(a.msgid)
            assert b.msgstr_plural[2] == upper_outside_placeholders(a.msgid_plural)
        else:
            assert b.msgstr == upper_outside_placeholders(a.msgid)
            assert b.msgstr.startswith("\n") == a.msgid.startswith("\n")


@pytest.mark.skipif(shutil.which("msgfmt") is None, reason="gettext's msgfmt not installed")
def test_msgfmt_checks_the_filled_catalogue(tmp_path):
    doc = gettext.read(catalogue(), Limits(), fuzzy=False)
    path = tmp_path / "cs.po"
    path.write_bytes(doc.write([upper(s) for s in doc.segments]))
    result = subprocess.run(["msgfmt", "-c", "--statistics", "-o", str(tmp_path / "cs.mo"),
                             str(path)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "40 translated messages" in result.stderr


@pytest.mark.parametrize("forms, filled", [("nplurals=1; plural=0;", {0: "P"}),
                                           ("", {0: "S", 1: "P"})])
def test_plural_forms_follow_the_catalogues_header(forms, filled):
    head = f'msgid ""\nmsgstr ""\n"Plural-Forms: {forms}\\n"\n\n' if forms else ""
    data = (head + 'msgid "%d file"\nmsgid_plural "%d files"\nmsgstr[0] ""\n').encode()
    doc = gettext.read(data, Limits())
    out = doc.write([Segment("P" if s.text == "files" else "S", ()) for s in doc.segments])
    assert parsed(out)[0].msgstr_plural == filled


def test_options_leave_filled_entries_unmarked_and_redo_translated_ones():
    data = catalogue(entries=8)
    doc = gettext.read(data, Limits(), fuzzy=False, retranslate=True)
    assert "Save 6" in [s.text for s in doc.segments]
    after = parsed(doc.write([upper(s) for s in doc.segments]))
    assert next(e for e in after if e.msgid == "Save 6").msgstr == "SAVE 6"
    assert not any("fuzzy" in e.flags for e in after)  # the one fuzzy before is filled


def test_a_catalogue_naming_a_file_never_reads_it(tmp_path):
    secret = tmp_path / "secret.po"
    secret.write_bytes(b'msgid "the secret"\nmsgstr ""\n')
    try:
        doc = gettext.read(str(secret).encode(), Limits())
    except DataError:
        return
    assert not any("secret" in s.text for s in doc.segments)


@pytest.mark.parametrize("data, message", [
    (b'msgid "a"\nmsgstr "b"\nmsgid\n', "PO catalogue line 3: syntax error"),
    (b"\xde\x12\x04\x95\x00\x00\x00\x00", "a compiled .mo catalogue"),
    (b"PK\x03\x04\x14\x00\x00\x00\x08\x00", "binary data"),
    (b'msgid ""\nmsgstr "Content-Type: text/plain; charset=UTF-8\\n"\n\nmsgid "caf\xe9"\n'
     b'msgstr ""\n', "PO catalogue line 4 is not in its charset utf-8"),
])
def test_what_is_not_a_catalogue_is_refused_in_one_line(data, message):
    with pytest.raises(DataError, match=re.escape(message)) as error:
        gettext.read(data, Limits())
    assert "\n" not in str(error.value)


def test_limits_refuse_a_catalogue_too_big_before_polib_reads_it():
    with pytest.raises(DataError, match="41 entries, over the limit of 10"):
        gettext.read(catalogue(), Limits(max_segments=10))
    with pytest.raises(DataError, match="over the limit of 100"):
        gettext.read(catalogue(), Limits(max_bytes=100))
