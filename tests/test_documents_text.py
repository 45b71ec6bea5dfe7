"""Specifications of plain text as a document (tfm/documents/text.py): a segment a line, every
other byte kept, and a file that is not UTF-8 text refused in one line."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfm.documents.formats import Limits, format_for
from tfm.documents.segments import Segment
from tfm.documents.text import read
from tfm.errors import DataError


def test_each_line_s_words_are_a_segment_and_the_layout_is_kept():
    data = "\ufeff  Title\r\n\r\n\tOne. Two.  \n   \nlast".encode()
    document = read(data, Limits())
    assert [s.text for s in document.segments] == ["Title", "One. Two.", "last"]
    assert document.write(document.segments) == data
    upper = [Segment(s.text.upper()) for s in document.segments]
    assert document.write(upper) == "\ufeff  TITLE\r\n\r\n\tONE. TWO.  \n   \nLAST".encode()


@given(st.text(alphabet=st.sampled_from(list("ab .\n\r\t\u2028\ufeffé")), max_size=40))
def test_reading_then_writing_gives_back_the_file(text: str):
    data = text.encode()
    document = read(data, Limits())
    assert document.write(document.segments) == data
    assert all(s.text == s.text.strip() and s.text for s in document.segments)


def test_a_txt_file_is_a_text_document():
    from pathlib import Path

    assert format_for(Path("notes.TXT")).name == "text"


@pytest.mark.parametrize("data, said", [
    (b"\x89PNG\r\n\x1a\n\x00\x00", "NUL byte at byte 8"),
    ("Stra\u00dfe".encode("latin-1"), "not UTF-8 text (byte 4 is 0xdf)"),
    ("a".encode("utf-16"), "UTF-16 text"),
])
def test_a_file_that_is_not_utf8_text_is_refused_in_one_line(data: bytes, said: str):
    with pytest.raises(DataError, match=said.replace("(", r"\(").replace(")", r"\)")) as e:
        read(data, Limits())
    assert "\n" not in str(e.value)


def test_a_file_over_the_limits_is_refused():
    with pytest.raises(DataError, match="more than the 10 a document"):
        read(b"x" * 11, Limits(max_bytes=10))
    with pytest.raises(DataError, match="more than 2 lines"):
        read(b"a\nb\nc\n", Limits(max_segments=2))
    assert len(read(b"a\n\n\nb\n", Limits(max_segments=2)).segments) == 2
