"""Specification of Markdown files as documents (tfm/documents/markdown.py): paragraphs,
headings, list items, quotes and table cells are segments with their emphasis, links and
images as tags; code, HTML blocks, URLs and front matter come back byte for byte, and so does
every byte of a segment that comes back unchanged."""

from __future__ import annotations

import time

import pytest
from markdown_it import MarkdownIt

from tfm.documents import markdown
from tfm.documents.formats import Limits
from tfm.documents.segments import Segment, Tag
from tfm.errors import DataError

FRONT_MATTER = "---\ntitle: The garden tool\ntags: [water, weather]\nlayout: page\n---\n"
FENCE = "   ```sh\n   pip install garden-tool  # the *only* step\n   ```\n"
INDENTED = "    indented code block with **stars**\n"
HTML_BLOCK = "<div align=\"center\">An HTML block</div>\n"
REFERENCE = "[ref]: https://example.com/ref \"Ref title\"\n"
README = (FRONT_MATTER + """
# Garden *tool* #

A small tool that **waters
the plants** and [reads the weather](https://ex.com/w?x=1&y=2 "Weather") for you.""" + "  " + """
It runs on `python3` and needs &copy; nothing else \\* at all.

> **Note:** the tool is _experimental_.
> Use it with care.

1. Install it:

""" + FENCE + """
2. Run it with ![the logo](img/logo.png) in view.
   See <https://example.com> and <b>this</b>, or the [reference][ref].

- [ ] water the ~~roses~~ lilies
- Nested:
  - inner *item* here

| Option | Meaning |
|--------|---------|
| `--dry` | Shows __what__ would happen |
| 42 | A number |

""" + INDENTED + "\n" + HTML_BLOCK + """
[![build status](https://ci.example.com/badge.svg)](https://ci.example.com)

Setext heading
==============

""" + REFERENCE)


def upper(segments: list[Segment]) -> list[Segment]:
    """A stand-in translator: every segment's words upper-cased, its tags where they were."""
    return [Segment(s.text.upper(), s.tags) for s in segments]


def shape(data: bytes) -> list:
    """The token structure CommonMark reads, without the words: block and inline tokens with
    their markup, attributes (URLs) and verbatim content (code, HTML)."""
    md = MarkdownIt("commonmark").enable(["table", "strikethrough"])
    verbatim = {"code_inline", "code_block", "fence", "html_block", "html_inline"}

    def one(token) -> tuple:
        attrs = {k: v for k, v in token.attrs.items() if k != "alt"}
        children = [one(c) for c in token.children or [] if c.type not in ("text", "softbreak")]
        content = token.content if token.type in verbatim else None
        return token.type, token.tag, token.markup, token.info, attrs, content, children

    return [one(t) for t in md.parse(data.decode())]


@pytest.fixture
def doc():
    return markdown.read(README.encode(), Limits())


def test_blocks_are_segments_of_their_inline_words(doc):
    texts = [s.text for s in doc.segments]
    assert texts[:2] == ["The garden tool", "Garden tool"]  # the front matter's title first
    assert "Note: the tool is experimental. Use it with care." in texts
    assert "Setext heading" in texts and "Shows what would happen" in texts
    assert "build status" in texts  # an image's alt text, inside a link
    assert "A number" in texts and "42" not in texts  # nothing to translate in a number
    paragraph = texts[2]
    assert paragraph.startswith("A small tool that waters the plants and reads the weather")
    assert "©" in paragraph and "* at all" in paragraph  # entities and escapes decoded
    assert "for you. It runs on  and needs" in paragraph  # a hard break parts two words
    for segment in doc.segments:
        segment.check()


def test_what_is_not_words_never_reaches_the_model(doc):
    words = " ".join(s.text for s in doc.segments)
    for hidden in ("title:", "weather]", "layout", "page", "pip install", "python3",
                   "example.com", "img/logo.png", "indented code", "An HTML block", "<b>",
                   "--dry", "Ref title", "[ ]"):
        assert hidden not in words


def test_links_images_and_emphasis_are_tags_over_their_words(doc):
    paragraph = doc.segments[2]
    covered = [paragraph.text[t.start:t.end] for t in paragraph.tags if not t.empty]
    assert covered == ["waters the plants", "reads the weather"]
    item = next(s for s in doc.segments if s.text.startswith("Run it with"))
    assert [item.text[t.start:t.end] for t in item.tags if not t.empty] == [
        "the logo", "reference"]
    assert sum(t.empty for t in item.tags) == 3  # the autolink and the two inline HTML tags


def test_a_round_trip_gives_the_same_bytes(doc):
    assert doc.write(doc.segments) == README.encode()


def test_a_translation_changes_only_the_words(doc):
    out = doc.write(upper(doc.segments))
    assert shape(out) == shape(README.encode())
    text = out.decode()
    for kept in (FENCE, INDENTED, HTML_BLOCK, REFERENCE):
        assert kept in text
    assert text.startswith(FRONT_MATTER.replace("The garden tool", "THE GARDEN TOOL"))
    assert "# GARDEN *TOOL* #\n" in text
    assert ("A SMALL TOOL THAT **WATERS THE PLANTS** AND [READS THE WEATHER]"
            "(https://ex.com/w?x=1&y=2 \"Weather\") FOR YOU.  \nIT RUNS ON `python3`") in text
    assert "| `--dry` | SHOWS __WHAT__ WOULD HAPPEN |" in text
    assert "[![BUILD STATUS](https://ci.example.com/badge.svg)](https://ci.example.com)" in text
    assert "- [ ] WATER THE ~~ROSES~~ LILIES" in text
    assert "OR THE [REFERENCE][ref]." in text
    assert "> **NOTE:** THE TOOL IS _EXPERIMENTAL_. USE IT WITH CARE.\n" in text


def test_translated_words_that_look_like_markup_are_escaped():
    doc = markdown.read(b"- An *item* here\n\nA plain line.\n", Limits())
    emphasis = doc.segments[0].tags[0].ref
    odd = [Segment("# not * a [heading] snake_case _x_", (Tag(2, 5, emphasis),)),
           Segment("1. <b> & &amp;")]
    out = doc.write(odd)
    assert out == (b"- \\# *not* \\* a \\[heading\\] snake_case \\_x\\_\n\n"
                   b"1\\. \\<b\\> & \\&amp;\n")
    tokens = MarkdownIt("commonmark").parse(out.decode())
    assert [t.type for t in tokens].count("heading_open") == 0
    assert tokens[-2].children[0].content == "1. <b> & &amp;"


def test_a_line_start_that_starts_nothing_is_not_escaped():
    doc = markdown.read(b"A line.\n\nAnother line.\n\nA third.\n", Limits())
    out = doc.write([Segment("...und so weiter"), Segment("5-mal gelesen"),
                     Segment("2) zwei")])
    assert out == b"...und so weiter\n\n5-mal gelesen\n\n2\\) zwei\n"


def test_whitespace_moves_outside_emphasis_so_it_stays_emphasis():
    doc = markdown.read(b"Some **bold** words\n", Limits())
    (segment,) = doc.segments
    moved = Segment("Some bold words", (Tag(4, 10, segment.tags[0].ref),))  # over " bold "
    assert doc.write([moved]) == b"Some **bold** words\n"


def test_windows_line_ends_and_a_byte_order_mark_are_kept():
    data = "\ufeff# Title\r\n\r\nOne line\r\nand another\r\n".encode()
    doc = markdown.read(data, Limits())
    assert doc.write(doc.segments) == data
    translated = "\ufeff# TITLE\r\n\r\nONE LINE AND ANOTHER\r\n".encode()
    assert doc.write(upper(doc.segments)) == translated


@pytest.mark.parametrize("data, problem", [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "binary"),
    (b"caf\xe9 au lait", "not UTF-8 text \\(byte 3\\)"),
])
def test_files_that_are_not_markdown_are_refused_in_one_line(data, problem):
    with pytest.raises(DataError, match=problem):
        markdown.read(data, Limits())


def test_hostile_files_are_bounded():
    with pytest.raises(DataError, match="over the limit"):
        markdown.read(b"word " * 100, Limits(max_bytes=100))
    with pytest.raises(DataError, match="more than the limit of 2"):
        markdown.read(b"one\n\ntwo\n\nthree\n", Limits(max_segments=2))
    start = time.perf_counter()
    with pytest.raises(DataError, match="line 1 has 3000 inline tags in one paragraph"):
        markdown.read(b"[a](b) " * 3000, Limits())
    deep = markdown.read(b">" * 5000 + b" deep " + b"[" * 3000 + b"x", Limits())
    deep.write(upper(deep.segments))
    assert time.perf_counter() - start < 5


def test_front_matter_titles_and_descriptions_are_translated_in_their_quotes():
    data = ("---\ntitle: Garden tool\ndescription: 'It''s small'\nsummary: \"Quoted: yes\"\n"
            "tags: [title, words]\nauthor: Ann Smith\nlist: |\n  block text\n---\nBody.\n")
    doc = markdown.read(data.encode(), Limits())
    assert [s.text for s in doc.segments] == ["Garden tool", "It's small", "Quoted: yes", "Body."]
    translated = ["Gartenwerkzeug: neu #1", "Es ist 'klein'", 'Zitiert: "ja"', "Text."]
    out = doc.write([Segment(text) for text in translated]).decode()
    assert out == ("---\ntitle: \"Gartenwerkzeug: neu #1\"\ndescription: 'Es ist ''klein'''\n"
                   "summary: \"Zitiert: \\\"ja\\\"\"\ntags: [title, words]\nauthor: Ann Smith\n"
                   "list: |\n  block text\n---\nText.\n")


def test_underscore_emphasis_moved_inside_a_word_is_written_with_stars():
    doc = markdown.read(b"Some _light_ and __strong__ words.\n", Limits())
    light, strong = (tag.ref for tag in doc.segments[0].tags)
    out = doc.write([Segment("Einige leichtere und starke Worte.",
                             (Tag(7, 13, light), Tag(20, 26, strong)))])
    assert out == b"Einige *leicht*ere und **stark**e Worte.\n"
    tokens = MarkdownIt("commonmark").parse(out.decode())[1].children
    assert [t.type for t in tokens if t.type.endswith("_open")] == ["em_open", "strong_open"]


def test_a_table_cell_with_an_escaped_pipe_is_translated_in_place():
    data = b"| x \\| y | x | y |\n|---|---|---|\n| `a\\|b` or *c \\| d* | plain | z |\n"
    doc = markdown.read(data, Limits())
    assert [s.text for s in doc.segments] == ["x | y", "x", "y", " or c | d", "plain", "z"]
    assert doc.write(doc.segments) == data
    assert doc.write(upper(doc.segments)) == (
        b"| X \\| Y | X | Y |\n|---|---|---|\n| `a\\|b` OR *C \\| D* | PLAIN | Z |\n")
