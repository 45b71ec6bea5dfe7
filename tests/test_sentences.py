"""Specifications of the sentence splitter every translation goes through (tfm/data/sentences.py):
sentencex's boundaries, the layout between sentences kept byte for byte, a line break always
ending a sentence, and the language's own rules where it has them."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tfm.data.sentences import Passage, segmenter_language, split_sentences


def test_a_text_is_cut_into_sentences_and_its_layout_kept():
    text = "Hello world. How are you?  Fine!\n\n  Mr. Smith met J. Doe.\r\nA dog runs . A cat .\n"
    passage = split_sentences(text)
    assert passage.sentences == ["Hello world.", "How are you?", "Fine!",
                                 "Mr. Smith met J. Doe.", "A dog runs .", "A cat ."]
    assert passage.join([f"<{i}>" for i in range(6)]) == \
        "<0> <1>  <2>\n\n  <3>\r\n<4> <5>\n"


@pytest.mark.parametrize("text, sentences", [
    ("", []), ("\n \n", []), ("no end", ["no end"]),
    ("e.g. this. And 3.5 that.", ["e.g. this.", "And 3.5 that."]),
    ('He said "Stop." Then left.', ['He said "Stop."', "Then left."]),
    ("The U.S.A. is big. Yes.", ["The U.S.A. is big.", "Yes."]),
    ("你好。我很好！", ["你好。", "我很好！"]),
    ("a line\nwithout a stop", ["a line", "without a stop"]),  # a line break always ends one
])
def test_sentence_boundaries(text: str, sentences: list[str]):
    assert split_sentences(text).sentences == sentences


def test_the_lost_sentence_of_a_line_is_found():
    line = "The dog sleeps in the garden. My sister buys bread at the market."
    assert split_sentences(line).sentences == ["The dog sleeps in the garden.",
                                               "My sister buys bread at the market."]


def test_a_language_s_own_abbreviations_do_not_end_a_sentence():
    text = "Er kam am 3. Mai nach Hause. Dann schlief er."
    assert split_sentences(text, "de").sentences == ["Er kam am 3. Mai nach Hause.",
                                                     "Dann schlief er."]
    assert len(split_sentences(text, "en").sentences) > 2  # English's rules cut at "3."


@pytest.mark.parametrize("given_as, code", [
    ("de", "de"), (">>de<<", "de"), ("deu_Latn", "deu"), ("pt-BR", "pt"), (None, "en"),
    ("", "en")])
def test_a_language_is_named_to_the_segmenter_by_its_code(given_as, code):
    assert segmenter_language(given_as) == code


def test_where_each_sentence_starts_in_the_text():
    text = "  One. Two!\n\nThree"
    passage = split_sentences(text)
    assert [text[s:s + len(t)] for s, t in zip(passage.starts(), passage.sentences)] == \
        passage.sentences


def test_a_whole_text_is_one_sentence():
    passage = Passage.whole("One. Two.")
    assert passage.sentences == ["One. Two."] and passage.join(["Eins."]) == "Eins."


@given(st.text(alphabet=st.sampled_from(list("ab .!?\n\r\t…。\"'")), max_size=40),
       st.sampled_from([None, "de", "ja", "xx"]))
def test_splitting_then_joining_the_sentences_gives_back_the_text(text: str, language):
    passage = split_sentences(text, language)
    assert passage.join(passage.sentences) == text
    assert all(s and s == s.strip() for s in passage.sentences)
    assert not any("\n" in s or "\r" in s for s in passage.sentences)


# --- lines translated sentence by sentence (tfm/decoding/passages.py) ------------------------

def test_a_line_s_target_language_tag_goes_to_each_of_its_sentences():
    from tfm.decoding.passages import cut

    (passage,) = cut(["  >>de<< One dog. Two cats."], split=True)
    assert passage.sentences == [">>de<< One dog.", ">>de<< Two cats."]
    assert passage.join(["Ein Hund.", "Zwei Katzen."]) == "  Ein Hund. Zwei Katzen."


def test_lines_are_rejoined_from_their_sentences_translations():
    from tfm.decoding.passages import cut, passage_record, rejoined, sentences
    from tfm.decoding.translator import Translation

    passages = cut(["One. Two.", "", "  Three."], split=True)
    found = sentences(passages)
    assert found == ["One.", "Two.", "Three."]
    results = [Translation(s, [(s.upper(), -1.0)], target_tokens=2) for s in found]
    lines = rejoined(passages, results)
    assert [line.text for line, _ in lines] == ["ONE. TWO.", "", "  THREE."]
    first, parts = lines[0]
    assert first.hypotheses[0][1] == -2.0 and first.target_tokens == 4
    record = passage_record(first, parts)
    assert [s["source"] for s in record["sentences"]] == ["One.", "Two."]
    one = passage_record(*lines[2])
    assert one["source"] == "Three." and one["translation"] == "  THREE."
    assert [p.sentences for p in cut(["One. Two."], split=False)] == [["One. Two."]]
