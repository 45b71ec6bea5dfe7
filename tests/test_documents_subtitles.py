"""Specification of subtitles (tfm/documents/subtitles.py): a segment per cue, its lines wrapped
again after translation; numbers, timings, cue settings, identifiers, the WebVTT header and its
NOTE/STYLE/REGION blocks byte for byte; bad and hostile files refused in one line."""

from __future__ import annotations

import io
import re
from pathlib import Path

import pytest

srt = pytest.importorskip("srt")
webvtt = pytest.importorskip("webvtt")

from tfm.documents import subtitles  # noqa: E402
from tfm.documents.formats import Limits, format_for  # noqa: E402
from tfm.documents.segments import Segment  # noqa: E402
from tfm.errors import DataError  # noqa: E402

SENTENCES = [
    "The dog sleeps in the garden.", "My sister buys bread at the market.",
    "A man in a blue shirt is standing on a ladder cleaning windows.",
    "Two young children are playing in the sand near the water.", "Where are you going?",
    "I don't know.", "Come with me, we will find the way together before it gets dark.",
]


def _stamp(ms: int, sep: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    return f"{hours:02}:{minutes // 1:02}:{rest // 1000:02}{sep}{rest % 1000:03}"


def _lines(i: int) -> list[str]:
    """A cue's text as a subtitler writes it: one line, two lines, italics across a break,
    a coloured word, two speakers, a position code."""
    one, two = SENTENCES[i % len(SENTENCES)], SENTENCES[(i + 3) % len(SENTENCES)]
    kind = i % 6
    if kind == 0:
        return [one]
    if kind == 1:
        words = f"{one} {two}".split()
        return [" ".join(words[:len(words) // 2]), " ".join(words[len(words) // 2:])]
    if kind == 2:
        return [f"<i>{one}", f"{two}</i>"]
    if kind == 3:
        first, rest = one.split(" ", 1)
        return [f'<font color="#ffff00">{first}</font> {rest}']
    if kind == 4:
        return [f"- {one}", f"- {two}"]
    return [f"{{\\an8}}<b>{one}</b>"]


def make_srt(cues: int = 300, eol: str = "\n") -> bytes:
    blocks = []
    for i in range(cues):
        timing = f"{_stamp(i * 3000 + 500, ',')} --> {_stamp(i * 3000 + 2800, ',')}"
        if i % 50 == 7:
            timing += "  X1:100 X2:600 Y1:50 Y2:80"  # proprietary coordinates, kept
        blocks.append(eol.join([str(i + 1), timing, *_lines(i)]) + eol)
    return eol.join(blocks).encode()


def make_vtt(cues: int = 300) -> bytes:
    head = ("WEBVTT - a film\nKind: captions\nLanguage: en\n\n"
            "STYLE\n::cue(.loud) { color: yellow }\n\n"
            "REGION\nid:bottom\nwidth:40%\nlines:3\n\n"
            "NOTE This file was made for the test,\nover two lines.\n\n")
    blocks = []
    for i in range(cues):
        timing = f"{_stamp(i * 3000 + 500, '.')} --> {_stamp(i * 3000 + 2800, '.')}"
        if i % 4 == 1:
            timing += " align:start position:10% line:85%"
        lines = [line.replace("<font color=\"#ffff00\">", "<c.loud>").replace("</font>", "</c>")
                 .replace("{\\an8}", "") for line in _lines(i)]
        if i % 7 == 3:
            lines[0] = "<v Roger Bingham>" + lines[0] + "</v>"
        if i % 11 == 5:
            lines[-1] += " Tom &amp; Jerry&nbsp;too."
        ident = [f"cue-{i}"] if i % 3 == 0 else []
        blocks.append("\n".join([*ident, timing, *lines]) + "\n")
        if i % 100 == 50:
            blocks.append("NOTE a comment between cues\n")
    return (head + "\n".join(blocks)).encode()


def upper(segment: Segment) -> Segment:
    """The identity-like translator: each segment's words upper-cased, tags where they were."""
    return Segment(segment.text.upper(), segment.tags)


def upper_outside_markup(content: str) -> str:
    """What the upper-cased cue must read: its words upper-cased, markup and entities as
    they were, line breaks aside."""
    pieces = re.split(r"(<[^<>]*>|\{\\[^{}]*\}|&\w+;)", content.replace("\n", " "))
    return "".join(p if i % 2 else p.upper() for i, p in enumerate(pieces))


@pytest.mark.parametrize("eol", ["\n", "\r\n"])
def test_an_srt_file_round_trips_byte_for_byte(eol):
    data = make_srt(eol=eol)
    doc = subtitles.read_srt(data, Limits())
    assert len(doc.segments) == 300
    for segment in doc.segments:
        segment.check()
        assert "\n" not in segment.text and "<" not in segment.text
    assert doc.write(doc.segments) == data


def test_the_registry_reads_srt_and_vtt_each_with_its_reader():
    srt_doc = format_for(Path("film.srt")).read(make_srt(20))
    vtt_doc = format_for(Path("film.vtt")).read(make_vtt(20))
    assert not srt_doc.vtt and vtt_doc.vtt
    assert subtitles.read(make_vtt(20), Limits()).vtt  # told apart by its header too


def test_srt_markup_becomes_tags_over_the_words_it_covers():
    data = (b"1\n00:00:01,000 --> 00:00:03,000\n{\\an8}<i>The dog</i> sleeps in the\n"
            b'<font color="red">garden</font>.\n')
    doc = subtitles.read_srt(data, Limits())
    [segment] = doc.segments
    assert segment.text == "The dog sleeps in the garden."
    spans = {segment.text[t.start:t.end] for t in segment.tags if not t.empty}
    assert spans == {"The dog", "garden"}
    assert [t.start for t in segment.tags if t.empty] == [0]  # {\an8}, kept out of the text


def test_upper_casing_changes_only_the_cue_text_in_srt():
    data = make_srt(eol="\r\n")
    doc = subtitles.read_srt(data, Limits())
    out = doc.write([upper(s) for s in doc.segments])
    before, after = list(srt.parse(data.decode())), list(srt.parse(out.decode()))
    assert len(after) == len(before)
    for a, b in zip(before, after):
        assert (b.index, b.start, b.end, b.proprietary) == (a.index, a.start, a.end,
                                                            a.proprietary)
        assert b.content.count("\n") == a.content.count("\n")  # as many lines as before
        assert b.content.replace("\n", " ") == upper_outside_markup(a.content)
    # numbers and timing lines, byte for byte (with their CRLF)
    heads = re.findall(rb"\d+\r\n[^\r\n]*-->[^\r\n]*\r\n", data)
    assert re.findall(rb"\d+\r\n[^\r\n]*-->[^\r\n]*\r\n", out) == heads


def test_a_two_line_cue_is_wrapped_again_balanced():
    data = b"1\n00:00:01,000 --> 00:00:04,000\nA man in a blue shirt\nis standing on a ladder.\n"
    doc = subtitles.read_srt(data, Limits())
    text = "Ein Mann in einem blauen Hemd steht auf einer Leiter und putzt die Fenster."
    out = doc.write([Segment(text)]).decode()
    lines = out.split("\n")[2:-1]
    assert len(lines) == 2 and " ".join(lines) == text
    assert all(len(line) <= subtitles.LINE_WIDTH for line in lines)
    assert abs(len(lines[0]) - len(lines[1])) <= 12  # near the middle, not greedy


def test_wrap_points_balance_the_lines_and_keep_under_the_width():
    text = " ".join(["word"] * 20)  # 99 characters: three lines of 42 at most
    points = subtitles.wrap_points(text, 3)
    lines = [text[a:b].strip() for a, b in zip([0, *points], [*points, len(text)])]
    assert len(lines) == 3 and max(map(len, lines)) <= subtitles.LINE_WIDTH
    assert max(map(len, lines)) - min(map(len, lines)) <= 5
    assert subtitles.wrap_points("short", 2) == []  # one word cannot be broken


def test_a_two_speaker_cue_breaks_before_each_speakers_dash():
    data = b"1\n00:00:01,000 --> 00:00:04,000\n- Where are you going?\n- Home.\n"
    doc = subtitles.read_srt(data, Limits())
    out = doc.write([Segment("- Wohin gehst du denn heute Abend noch? - Nach Hause.")])
    assert out.decode().split("\n")[2:4] == ["- Wohin gehst du denn heute Abend noch?",
                                             "- Nach Hause."]


def test_a_vtt_file_round_trips_byte_for_byte_and_keeps_every_block():
    data = make_vtt()
    doc = subtitles.read_vtt(data, Limits())
    assert len(doc.segments) == 300
    for segment in doc.segments:
        segment.check()
    assert doc.write(doc.segments) == data
    assert not any("WEBVTT" in s.text or "NOTE" in s.text or "::cue" in s.text
                   for s in doc.segments)


def test_vtt_entities_are_text_and_vtt_markup_is_tags():
    data = (b"WEBVTT\n\n00:01.000 --> 00:03.000 align:start\n<v Roger>Tom &amp; <c.loud>Jerry"
            b"</c> <00:02.000>sleep.\n")
    doc = subtitles.read_vtt(data, Limits())
    [segment] = doc.segments
    assert segment.text == "Tom & Jerry sleep."
    assert [segment.text[t.start:t.end] for t in segment.tags if not t.empty] == ["Jerry"]
    out = doc.write([upper(segment)]).decode()
    assert out.endswith("<v Roger>TOM &amp; <c.loud>JERRY</c> <00:02.000>SLEEP.\n")


def test_upper_casing_changes_only_the_cue_text_in_vtt():
    data = make_vtt()
    doc = subtitles.read_vtt(data, Limits())
    out = doc.write([upper(s) for s in doc.segments])
    before = webvtt.from_buffer(io.StringIO(data.decode()))
    after = webvtt.from_buffer(io.StringIO(out.decode()))
    assert len(after.captions) == len(before.captions) == 300
    for a, b in zip(before.captions, after.captions):
        assert (b.identifier, b.start, b.end, b.settings) == (a.identifier, a.start, a.end,
                                                              a.settings)
        assert len(b.lines) == len(a.lines)
        assert " ".join(b.lines) == upper_outside_markup(" ".join(a.lines))
    # the header, STYLE, REGION and NOTE blocks and every timing line as they were
    kept = re.compile(rb"(?s)\A.*?(?=cue-0\n)|NOTE[^\n]*\n|[^\n]*-->[^\n]*\n")
    assert kept.findall(out) == kept.findall(data)


def test_a_missing_blank_line_between_cues_still_separates_them():
    data = (b"1\n00:00:01,000 --> 00:00:02,000\nHello there,\nmy friend.\n"
            b"2\n00:00:03,000 --> 00:00:04,000\nGoodbye.\n")
    doc = subtitles.read_srt(data, Limits())
    assert [s.text for s in doc.segments] == ["Hello there, my friend.", "Goodbye."]
    assert doc.write(doc.segments) == data
    out = doc.write([upper(s) for s in doc.segments])
    assert out == data.replace(b"Hello there,\nmy friend.", b"HELLO THERE,\nMY FRIEND."
                               ).replace(b"Goodbye.", b"GOODBYE.")


def test_a_file_without_a_final_line_break_keeps_none():
    data = b"1\n00:00:01,000 --> 00:00:02,000\nHello there."
    doc = subtitles.read_srt(data, Limits())
    assert doc.write(doc.segments) == data
    assert doc.write([Segment("HALLO.")]) == b"1\n00:00:01,000 --> 00:00:02,000\nHALLO."


@pytest.mark.parametrize("data, message", [
    (b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n2\n00:00:0x,000 --> 00:00:04,000\nYo.\n",
     "SRT cue 2 (line 6): broken timestamp '00:00:0x,000'"),
    (b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n7\n00:00:03,000 - 00:00:04,000\nYo.\n",
     "SRT cue 7 (line 6): expected a timing line"),
    (b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\nstray text\n", "SRT cue 2 (line 5)"),
])
def test_a_broken_srt_cue_is_refused_naming_it(data, message):
    with pytest.raises(DataError, match=re.escape(message)):
        subtitles.read_srt(data, Limits())


def test_a_broken_vtt_cue_is_refused_naming_it():
    data = b"WEBVTT\n\nintro\n00:01.000 --> 00:02.000\nHi.\n\nsecond\n00:61.000 --> 00:04.000\n"
    with pytest.raises(DataError, match=r"WebVTT cue second \(line 8\): broken timestamp"):
        subtitles.read_vtt(data, Limits())


@pytest.mark.parametrize("reader, data, message", [
    (subtitles.read_vtt, b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n", "first line must be"),
    (subtitles.read_srt, b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "binary data"),
    (subtitles.read_srt, "1\n00:00:01,000 --> 00:00:02,000\nd\xe9j\xe0\n".encode("latin-1"),
     "SRT line 3 is not UTF-8"),
])
def test_files_that_are_not_subtitles_are_refused_in_one_line(reader, data, message):
    with pytest.raises(DataError, match=message) as error:
        reader(data, Limits())
    assert "\n" not in str(error.value)


def test_a_million_cues_are_refused_before_any_is_built():
    data = b"1\n00:00:01,000 --> 00:00:02,000\nHi.\n\n" * 1_000_000
    with pytest.raises(DataError, match="1000000 timing lines, over the limit of 200000"):
        subtitles.read_srt(data, Limits())
    with pytest.raises(DataError, match="over the limit of 100"):
        subtitles.read_srt(make_srt(101), Limits(max_segments=100))


def test_a_cue_of_thousands_of_tags_is_refused_in_one_line():
    data = b"1\n00:00:01,000 --> 00:00:02,000\nHi " + b"<i>x</i>" * 1001 + b"\n"
    with pytest.raises(DataError, match=r"SRT cue 1 \(line 2\) holds 1001 inline tags, over "
                                        r"the limit of 1000"):
        subtitles.read_srt(data, Limits())


def test_a_file_over_the_byte_limit_is_refused():
    with pytest.raises(DataError, match="over the limit of 1000"):
        subtitles.read_srt(make_srt(100), Limits(max_bytes=1000))
