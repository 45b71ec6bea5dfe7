"""Specification of the segment every document format reads into and writes back from
(tfm/documents/segments.py): inline tags held apart from the text and walked back in order."""

from __future__ import annotations

import pytest

from tfm.documents.formats import format_for
from tfm.documents.segments import Segment, Tag, holders
from tfm.errors import UsageError


def markup(segment: Segment) -> str:
    """The segment written with <N>, </N> and <N/> for its tags."""
    out = []
    for kind, piece in segment.pieces():
        if kind == "text":
            out.append(piece)
        else:
            out.append({"open": "<{}>", "close": "</{}>", "empty": "<{}/>"}[kind]
                       .format(piece.ref))
    return "".join(out)


def test_pieces_give_back_nested_tags_in_document_order():
    # "The <1><2/>dog</1><3/> sleeps in the <4><5>garden</5><6/></4>."
    segment = Segment("The dog sleeps in the garden.", (
        Tag(4, 7, 1), Tag(4, 4, 2, parent=1), Tag(7, 7, 3), Tag(22, 28, 4), Tag(22, 28, 5),
        Tag(28, 28, 6, parent=4)))
    segment.check()
    assert markup(segment) == "The <1><2/>dog</1><3/> sleeps in the <4><5>garden</5><6/></4>."


def test_an_empty_tag_inside_a_span_goes_inside_it():
    segment = Segment("one two three", (Tag(0, 13, 1), Tag(4, 4, 2), Tag(3, 7, 3)))
    assert markup(segment) == "<1>one<3> <2/>two</3> three</1>"


def test_a_paired_tag_of_no_width_is_a_span_holding_what_names_it_as_parent():
    # "The <1><2><3/></2></1><4></4>dog.": bold over italic over a break, then a sibling span,
    # all on one offset; a span of no width is paired, unlike an empty element
    segment = Segment("The dog.", (Tag(4, 4, 1, paired=True), Tag(4, 4, 2, 1, paired=True),
                                   Tag(4, 4, 3, parent=2), Tag(4, 4, 4, paired=True)))
    segment.check()
    assert markup(segment) == "The <1><2><3/></2></1><4></4>dog."
    assert [tag.empty for tag in segment.tags] == [False, False, True, False]


def test_holders_name_the_span_each_tag_is_written_inside():
    segment = Segment("The dog.", (Tag(0, 8, 1), Tag(4, 4, 2, 1, paired=True),
                                   Tag(4, 4, 3, parent=2), Tag(4, 7, 4), Tag(8, 8, 5)))
    assert holders(segment) == {1: None, 2: 1, 3: 2, 4: 1, 5: None}


def test_text_without_tags_is_one_piece():
    assert list(Segment("plain").pieces()) == [("text", "plain")]


@pytest.mark.parametrize("tags, problem", [
    ((Tag(0, 5, 1), Tag(3, 8, 2)), "overlap"),
    ((Tag(0, 50, 1),), "outside"),
    ((Tag(0, 2, 1), Tag(4, 6, 1)), "share a ref"),
    ((Tag(0, 2, 1), Tag(4, 4, 2, parent=1)), "does not hold"),
    ((Tag(4, 4, 1), Tag(4, 4, 2, parent=1)), "does not hold"),  # an empty element holds none
    ((Tag(4, 4, 1, 2, paired=True), Tag(4, 4, 2, 1, paired=True)), "inside itself"),
])
def test_check_refuses_tags_that_cannot_be_written(tags, problem):
    with pytest.raises(ValueError, match=problem):
        Segment("some words", tags).check()


def test_the_format_comes_from_the_option_or_the_extension(tmp_path):
    assert format_for(tmp_path / "page.HTML").name == "html"
    assert format_for(tmp_path / "notes.txt", "markdown").name == "markdown"
    with pytest.raises(UsageError, match=r"\.exe is not a document format.*html.*docx"):
        format_for(tmp_path / "setup.exe")
    with pytest.raises(UsageError, match="--format 'pdf'"):
        format_for(None, "pdf")
