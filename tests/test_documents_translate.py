"""Specifications of a document's translation (tfm/documents/translate.py): segments cut into
sentences and put back with their whitespace, and inline tags carried from the source to the
translation by word alignment, valid whatever the alignment says. Alignments here are written by
hand (no model), as an aligner or the model's attention would give them."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_document_segments import markup as shown  # <1>...</1> for a span, <3/> empty
from test_lexical_alignment import counted  # a lexicon of a small hand-aligned corpus

from tfm.config import SearchOptions
from tfm.data.language_marks import LanguageMarking, ModelLanguages
from tfm.data.lexical_alignment import Lexicon
from tfm.data.sentences import split_sentences
from tfm.decoding.translator import Source, Translation
from tfm.documents.formats import Limits, format_for
from tfm.documents.segments import Segment, Tag, holders
from tfm.documents.text import read
from tfm.documents.translate import project, text_alignment, translate_document


def translated(segment: Segment, translations: list[str], alignments) -> Segment:
    result = project(segment, split_sentences(segment.text), translations, alignments)
    result.check()
    return result


SOURCE = Segment("The dog sleeps in the garden. My sister buys bread.",
                 (Tag(4, 7, 1), Tag(22, 28, 2), Tag(30, 51, 3), Tag(33, 33, 4)))
GERMAN = ["Der Hund schläft im Garten.", "Meine Schwester kauft Brot."]
MONOTONE = [[(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4)], [(0, 0), (1, 1), (2, 2), (3, 3)]]


def test_a_tag_covers_the_words_aligned_to_its_words():
    assert shown(translated(SOURCE, GERMAN, MONOTONE)) == (
        "Der <1>Hund</1> schläft im <2>Garten</2>. <3>Meine <4/>Schwester kauft Brot.</3>")


def test_a_tag_follows_its_words_where_the_translation_moves_them():
    source = Segment("I have seen the dog.", (Tag(7, 11, 1),))
    result = translated(source, ["Ich habe den Hund gesehen."],
                        [[(0, 0), (1, 1), (3, 2), (4, 3), (2, 4)]])
    assert shown(result) == "Ich habe den Hund <1>gesehen</1>."


def test_a_tag_over_several_sentences_covers_their_whole_translations():
    source = Segment("One dog. Two cats. Three birds.", (Tag(0, 18, 1),))
    result = translated(source, ["Ein Hund.", "Zwei Katzen.", "Drei Vögel."], [None] * 3)
    assert shown(result) == "<1>Ein Hund. Zwei Katzen.</1> Drei Vögel."


def test_whitespace_between_sentences_is_kept_and_a_tag_edge_there_maps_exactly():
    source = Segment("One dog.  \n  Two cats.", (Tag(8, 10, 1),))  # a tag over whitespace
    result = translated(source, ["Ein Hund.", "Zwei Katzen."], [None, None])
    assert result.text == "Ein Hund.  \n  Zwei Katzen."
    assert result.text[result.tags[0].start:result.tags[0].end] == "  "


def test_an_unaligned_word_s_tag_is_placed_by_its_nearest_aligned_neighbour():
    source = Segment("The very big dog sleeps.", (Tag(9, 12, 1),))
    result = translated(source, ["Der Hund schläft."], [[(0, 0), (3, 1), (4, 2)]])
    assert shown(result) == "Der <1>Hund</1> schläft."


def test_crossing_alignments_still_give_nested_tags_in_source_order():
    source = Segment("A red dog and a blue cat.", (Tag(0, 9, 1), Tag(2, 5, 2), Tag(14, 24, 3)))
    # The alignment crosses the two halves' words (the siblings' target spans overlap) and
    # puts the inner tag's word outside its parent's.
    result = translated(source, ["Eine blaue Katze und ein roter Hund."],
                        [[(0, 4), (1, 1), (2, 6), (3, 3), (4, 0), (5, 5), (6, 2)]])
    assert [t.ref for t in result.tags] == [1, 2, 3]
    one, two, three = result.tags
    assert one.start <= two.start < two.end <= one.end <= three.start < three.end


def test_sibling_tags_follow_their_words_where_the_translation_reorders_them():
    # "<1>Yesterday</1> I saw <2>the <3>red</3> car</2>." -> the object first in German
    source = Segment("Yesterday I saw the red car.",
                     (Tag(0, 9, 1), Tag(16, 27, 2), Tag(20, 23, 3)))
    result = translated(source, ["Das rote Auto sah ich gestern."],
                        [[(0, 5), (1, 4), (2, 3), (3, 0), (4, 1), (5, 2)]])
    assert shown(result) == "<2>Das <3>rote</3> Auto</2> sah ich <1>gestern</1>."
    assert [t.ref for t in result.tags] == [2, 3, 1]


def test_a_tag_ending_a_sentence_covers_its_words_wherever_they_went():
    source = Segment("He left yesterday.", (Tag(8, 18, 1),))  # "He left <1>yesterday.</1>"
    result = translated(source, ["Gestern ging er."], [[(0, 2), (1, 1), (2, 0)]])
    assert shown(result) == "<1>Gestern</1> ging er."


def test_an_empty_translation_keeps_every_tag():
    result = translated(SOURCE, ["", ""], [[], []])
    assert sorted(t.ref for t in result.tags) == [1, 2, 3, 4]


def test_nested_tags_over_an_empty_translation_stay_nested_spans():
    # "<1><2>The <3/>dog</2> sleeps.</1>": no words left to cover, the nesting is still there
    source = Segment("The dog sleeps.", (Tag(0, 15, 1), Tag(0, 7, 2), Tag(4, 4, 3)))
    result = translated(source, [""], [[]])
    assert shown(result) == "<1><2><3/></2></1>"
    assert not any(tag.empty for tag in result.tags[:2])


def test_a_span_squeezed_to_no_width_by_a_short_translation_stays_a_span():
    # "<1>The</1> <2><3>dog</3></2>.": one letter cannot hold two spans; the first closes
    # where it opens, still written as a span, not as an empty element
    source = Segment("The dog.", (Tag(0, 3, 1), Tag(4, 7, 2), Tag(4, 7, 3)))
    result = translated(source, ["X"], [[(0, 0), (1, 0)]])
    assert shown(result) == "<1></1><2><3>X</3></2>"


def test_a_span_that_covered_no_text_in_the_source_is_not_widened():
    source = Segment("The dog sleeps.", (Tag(4, 4, 1, paired=True), Tag(4, 4, 2, parent=1)))
    result = translated(source, ["Der Hund schläft."], [[(0, 0), (1, 1), (2, 2)]])
    assert shown(result) == "Der <1><2/></1>Hund schläft."


# --- empty tags (inline code used as a word, a placeholder): at a word boundary, spaced as the
# source spaced them, never inside a word --------------------------------------------------------

def test_an_empty_tag_between_spaces_keeps_one_space_each_side():
    source = Segment("Type  to list the files.", (Tag(5, 5, 1),))  # Type <code/> to list...
    result = translated(source, ["Tippe zum Auflisten der Dateien."],
                        [[(0, 0), (1, 1), (2, 2), (3, 3), (4, 4)]])
    assert shown(result) == "Tippe <1/> zum Auflisten der Dateien."


def test_an_empty_tag_between_spaces_takes_one_of_two_copied_spaces_each_side():
    source = Segment("Type  to list.", (Tag(5, 5, 1),))
    result = translated(source, ["TYPE  TO LIST."], [[(0, 0), (1, 1), (2, 2)]])
    assert shown(result) == "TYPE <1/> TO LIST."


def test_an_empty_tag_follows_its_neighbour_word_where_the_translation_moves_it():
    source = Segment("Press  to save the file.", (Tag(6, 6, 1),))  # Press <kbd/> to save...
    result = translated(source, ["Um die Datei zu speichern, drücken Sie."],
                        [[(0, 5), (1, 3), (2, 4), (3, 1), (4, 2)]])
    assert shown(result) == "Um die Datei <1/> zu speichern, drücken Sie."


def test_an_empty_tag_glued_before_punctuation_stays_before_the_target_s_punctuation():
    # A catalogue's "Hello {name}, you": the placeholder took its space along, so the text is
    # "Hello, you" with the tag between the word and its comma.
    source = Segment("Hello, you have mail.", (Tag(5, 5, 1),))
    result = translated(source, ["Hallo, du hast Post."], [[(0, 0), (1, 1), (2, 2), (3, 3)]])
    assert shown(result) == "Hallo<1/>, du hast Post."


def test_an_empty_tag_with_a_space_before_and_punctuation_after_keeps_its_space():
    source = Segment("Then press .", (Tag(11, 11, 1),))  # Then press <kbd/>.
    result = translated(source, ["Dann drücken."], [[(0, 0), (1, 1)]])
    assert shown(result) == "Dann drücken <1/>."


def test_an_empty_tag_before_punctuation_takes_the_space_the_translation_left_there():
    # "in <span translate=no>New York</span>." reads "in ." to the model, which copies it
    source = Segment("They walk in .", (Tag(13, 13, 1),))
    result = translated(source, ["SIE GEHEN IN ."], [[(0, 0), (1, 1), (2, 2), (3, 3)]])
    assert shown(result) == "SIE GEHEN IN <1/>."


def test_an_empty_tag_never_splits_a_word():
    source = Segment("The filename is here.", (Tag(8, 8, 1),))  # The file<x/>name is here
    result = translated(source, ["Der Dateiname ist hier."], [[(0, 0), (1, 1), (2, 2), (3, 3)]])
    text, (tag,) = result.text, result.tags
    assert text == "Der Dateiname ist hier."
    assert tag.start in (4, 13)  # at an edge of the word aligned to the one it was inside


@st.composite
def tagged_segments(draw) -> tuple[Segment, list[str], list]:
    """A segment with random well-nested tags, random translations of its sentences and
    random (garbage) alignments."""
    words = draw(st.lists(st.sampled_from(["a", "bb", "c.", "D", "e!", "\n", "ff?"]),
                          min_size=1, max_size=12))
    text = " ".join(words)
    edges = sorted(draw(st.lists(st.integers(0, len(text)), max_size=8)))
    tags, ref, stack = [], 0, []
    for position in edges:  # open and close spans at the drawn edges, nested by a stack
        if stack and draw(st.booleans()):
            start, own = stack.pop()
            tags.append(Tag(start, position, own) if position > start else
                        Tag(position, position, own))
        elif draw(st.booleans()):
            stack.append((position, ref))
            ref += 1
        else:
            tags.append(Tag(position, position, ref))
            ref += 1
    tags += [Tag(start, len(text), own) if len(text) > start else Tag(start, start, own)
             for start, own in reversed(stack)]
    tags.sort(key=lambda t: (t.start, -t.end))
    segment = Segment(text, tuple(tags))
    sentences = split_sentences(text).sentences
    translations = [" ".join(draw(st.lists(st.sampled_from(["x", "yy", "z,"]), max_size=6)))
                    for _ in sentences]
    alignments = [draw(st.none() | st.lists(st.tuples(st.integers(-1, 8), st.integers(-1, 8)),
                                             max_size=10)) for _ in sentences]
    return segment, translations, alignments


@settings(max_examples=300, deadline=None)
@given(tagged_segments())
def test_whatever_the_alignment_every_tag_is_kept_once_and_the_segment_is_valid(case):
    segment, translations, alignments = case
    try:
        segment.check()
    except ValueError:  # the drawing made equal empty/span ambiguities: not a case
        return
    result = project(segment, split_sentences(segment.text), translations, alignments)
    result.check()
    assert sorted(t.ref for t in result.tags) == sorted(t.ref for t in segment.tags)
    wide = len(result.text) >= 2 * len(segment.tags)
    placed = {t.ref: t for t in result.tags}
    for before in segment.tags:
        after = placed[before.ref]
        assert before.empty == after.empty  # a span stays a span, even over no text
        if wide and all(translations) and not before.point:  # room for every span's text
            assert not after.point
    # each tag inside the same span as in the source (siblings may change places)
    assert holders(result) == holders(segment)
    opened = [t.ref for kind, t in result.pieces() if kind in ("open", "empty")]
    assert opened == [t.ref for t in result.tags]  # listed in the order they are written


def test_the_engine_s_alignment_is_read_as_words_of_the_text():
    result = Translation(">>de<< The dog.", [("Der Hund.", -1.0)],
                         source_symbols=[">>de<<", "ĠThe", "Ġdog", ".", "</s>"],
                         target_symbols=["Der", "ĠHund", "."], alignment=[(1, 0), (2, 1)])
    assert text_alignment(result, "The dog.") == [(0, 0), (1, 1)]


# --- the whole pipeline, with a stand-in translator -------------------------------------------

@dataclass
class WrittenDoc:
    """A document that keeps the segments it is written with."""

    segments: list[Segment]
    written: list[Segment] = field(default_factory=list)

    def write(self, translations):
        self.written = list(translations)
        return b"ok"

@dataclass
class Marking:
    where: str = "none"


@dataclass
class UpperTranslator:
    """Translates by upper-casing, with a monotone word alignment when asked for attention;
    records what it was given."""

    supports_attention: bool = True
    language_marking: Marking = field(default_factory=Marking)
    calls: list[tuple[list[str], bool]] = field(default_factory=list)

    @property
    def languages(self) -> ModelLanguages:  # a bilingual model's: nothing to mark
        return ModelLanguages(LanguageMarking("none"), (), lambda _: None, lambda _: None)

    def prepare(self, sentences, specs, options, language=None, first=0):
        return [Source(s, [1] * (len(s.split()) + 1)) for s in sentences]

    def translate_prepared(self, sources, options, progress=None):
        self.calls.append(([s.sentence for s in sources], options.attention))
        results = []
        for s in sources:
            words = s.sentence.split()
            result = Translation(s.sentence, [(s.sentence.upper(), -1.0)])
            if options.attention:
                result.source_symbols = ["Ġ" + w for w in words] + ["</s>"]
                result.target_symbols = ["Ġ" + w.upper() for w in words]
                result.alignment = [(i, i) for i in range(len(words))]
            results.append(result)
        if progress is not None:
            progress(len(sources))
        return results


def test_a_text_document_is_translated_sentence_by_sentence_with_its_layout_kept():
    data = b"  The dog sleeps. The cat eats.\r\n\n\tA bird.  \n"
    translator = UpperTranslator()
    done: list[int] = []
    out = translate_document(read(data, Limits()), translator, SearchOptions(),
                             progress=done.append)
    assert out == b"  THE DOG SLEEPS. THE CAT EATS.\r\n\n\tA BIRD.  \n"
    assert translator.calls == [(["The dog sleeps.", "The cat eats.", "A bird."], False)]
    assert sum(done) == 3


def test_a_sentence_without_a_letter_is_kept_as_it_is_and_never_sent():
    data = "The dog sleeps.\n42\n\u2014 3.50 \u20ac\nA bird.\n".encode()
    translator = UpperTranslator()
    done: list[int] = []
    out = translate_document(read(data, Limits()), translator, SearchOptions(),
                             progress=done.append)
    assert out == data.replace(b"The dog sleeps.", b"THE DOG SLEEPS.").replace(b"A bird",
                                                                               b"A BIRD")
    assert translator.calls == [(["The dog sleeps.", "A bird."], False)]
    assert sum(done) == 4  # the bar counts the kept ones too


def test_only_the_sentences_of_tagged_segments_are_translated_with_attention():
    doc = WrittenDoc([Segment("Plain text."), Segment("The dog sleeps.", (Tag(4, 7, 0),))])
    translator = UpperTranslator()
    assert translate_document(doc, translator, SearchOptions()) == b"ok"
    assert translator.calls == [(["Plain text."], False), (["The dog sleeps."], True)]
    assert shown(doc.written[1]) == "THE <0>DOG</0> SLEEPS."


@dataclass
class ReorderingTranslator(UpperTranslator):
    """Translates word by word into German and says the words in reversed order; its
    attention, when asked for, is monotone: wrong for every word but the middle one."""

    lexicon: Lexicon | None = None

    def translate_prepared(self, sources, options, progress=None):
        results = super().translate_prepared(sources, options, progress)
        for result in results:
            words = [WORD_BY_WORD[w] for w in result.source.split()]
            result.hypotheses = [(" ".join(reversed(words)), -1.0)]
        return results


WORD_BY_WORD = {"The": "Der", "dog": "Hund", "sleeps": "schläft", "man": "Mann"}


@pytest.mark.parametrize("lexicon", [False, True])
def test_a_model_s_lexicon_places_the_tags_instead_of_its_attention(lexicon):
    doc = WrittenDoc([Segment("The dog sleeps", (Tag(0, 3, 0), Tag(8, 14, 1)))])
    translator = ReorderingTranslator(lexicon=counted() if lexicon else None)
    translate_document(doc, translator, SearchOptions())
    if lexicon:  # the words counted together: no attention asked for
        assert shown(doc.written[0]) == "<1>schläft</1> Hund <0>Der</0>"
        assert translator.calls == [(["The dog sleeps"], False)]
    else:
        assert shown(doc.written[0]) == "<0>schläft</0> Hund <1>Der</1>"
        assert translator.calls == [(["The dog sleeps"], True)]


def test_a_real_model_s_alignment_places_every_tag(tmp_path, tokenizer):
    from conftest import random_model_dir

    from tfm.decoding.engines import load_translator

    translator = load_translator(random_model_dir(tmp_path / "m", tokenizer), "cpu")

    doc = WrittenDoc([SOURCE, Segment("A cat.", (Tag(2, 2, 0),))])
    translate_document(doc, translator, translator.default_options(beam=1))
    for before, after in zip(doc.segments, doc.written):
        after.check()
        assert [t.ref for t in after.tags] == [t.ref for t in before.tags]
    sentence = "The dog sleeps in the garden."
    (result,) = translator.translate([sentence], translator.default_options(beam=1,
                                                                              attention=True))
    pairs = text_alignment(result, sentence)
    assert pairs and all(0 <= i < 6 and 0 <= j < len(result.text.split()) for i, j in pairs)


@dataclass
class DroppingTranslator(UpperTranslator):
    """Upper-cases, except that it translates each sentence holding ``dropped`` to nothing
    (a model that lost its words), with an alignment of no links."""

    dropped: str = "dog"

    def translate_prepared(self, sources, options, progress=None):
        results = super().translate_prepared(sources, options, progress)
        for source, result in zip(sources, results):
            if self.dropped in source.sentence:
                result.hypotheses = [("", -1.0)]
                result.target_symbols, result.alignment = [], []
        return results


@pytest.mark.parametrize("name, data, written", [
    ("a.html", b"<p>Hello. <b><i>Good dog.</i></b></p>", b"<p>HELLO. <b><i></i></b></p>"),
    ("a.html", b"<p><b><i>Good</i> dog.</b></p>", b"<p><b><i></i></b></p>"),  # no text left
    ("a.xml", b"<topic><p>Hello. <b><i>Good dog.</i></b></p></topic>",
     b"<p>HELLO. <b><i/></b></p>"),
    ("a.srt", b"1\n00:00:01,000 --> 00:00:02,000\nHello. <b><i>Good dog.</i></b>\n",
     b"\nHELLO. <b><i></i></b>\n"),
    ("a.po", b'msgid "Hello. <b><i>Good dog.</i></b>"\nmsgstr ""\n',
     b'msgstr "HELLO. <b><i></i></b>"'),
    ("a.md", b"Hello. [**Good *dog.***](x.html)\n", b"HELLO. [](x.html)\n"),  # no `****`
    ("a.xlf", b'<xliff version="1.2" xmlns="urn:oasis:names:tc:xliff:document:1.2"><file '
     b'original="a" source-language="en" datatype="plaintext"><body><trans-unit id="1"><source>'
     b'<g id="1"><g id="2">Good</g> dog.</g></source></trans-unit></body></file></xliff>',
     b'<g id="1"><g id="2"/></g></target>'),
])
def test_nested_tags_whose_words_were_translated_away_are_written_nested(name, data, written):
    document = format_for(Path(name)).read(data)
    assert written in translate_document(document, DroppingTranslator(), SearchOptions())


def test_a_catalogue_s_nested_tags_over_no_text_are_read_nested():
    document = format_for(Path("a.po")).read(b'msgid "A <b><i></i></b>dog."\nmsgstr ""\n')
    assert shown(document.segments[0]) == "A <1><0></0></1>dog."
