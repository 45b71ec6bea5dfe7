"""The inline-tag scorer (bench/tags_score.py) and the tagged test set's pieces
(bench/tagged_testset.py), on hand-made lines: a hypothesis with the reference's tags in the
same structure scores 100%; a lost, a duplicated, a misnested tag fails the structure; a moved
span keeps the structure but fails the placement.

bench/ is not a package: its modules are loaded from their files.
"""

from __future__ import annotations

import random

import pytest
from test_bench_peers import load  # bench/NAME.py as a module (bench/ is not a package)

tags = load("tags_score")
testset = load("tagged_testset")

REF = ['Ein <b>Hund</b> schläft im <a href="g.html">Garten</a>.',
       "Zwei Männer <b>stehen <i>vor dem</i> Haus</b>.",
       "Eine Frau<x/> liest.",
       "Ein Kind spielt."]


def scores(hyps: list[str], refs: list[str] = REF) -> dict[str, float]:
    return tags.score(hyps, refs)


def test_the_reference_itself_scores_full_marks() -> None:
    got = scores(REF)
    assert got["structure"] == got["placement_exact"] == got["placement_f1"] == 100
    assert got["tagged_lines"] == 3 and got["tags"] == 5
    assert got["chrf"] == pytest.approx(100)


def test_the_same_structure_around_other_words_keeps_structure_but_not_placement() -> None:
    hyps = ['Ein Hund <b>schläft</b> im <a href="g.html">Garten</a>.', *REF[1:]]
    got = scores(hyps)
    assert got["structure"] == 100
    assert got["placement_exact"] == pytest.approx(100 * 4 / 5)
    assert got["placement_f1"] == pytest.approx(100 * 4 / 5)


def test_a_lost_tag_fails_the_structure_and_its_placement() -> None:
    hyps = ['Ein <b>Hund</b> schläft im Garten.', *REF[1:]]
    got = scores(hyps)
    assert got["structure"] == pytest.approx(100 * 2 / 3)
    assert got["placement_exact"] == pytest.approx(100 * 4 / 5)


def test_a_duplicated_tag_fails_the_structure() -> None:
    hyps = [REF[0], REF[1], "Eine Frau<x/> liest<x/>.", REF[3]]
    assert scores(hyps)["structure"] == pytest.approx(100 * 2 / 3)


def test_a_misnested_output_fails_the_structure_and_is_not_well_nested() -> None:
    hyps = [REF[0], "Zwei Männer <b>stehen <i>vor</b> dem</i> Haus.", *REF[2:]]
    got = scores(hyps)
    assert got["structure"] == pytest.approx(100 * 2 / 3)
    assert got["well_nested"] == pytest.approx(100 * 2 / 3)


def test_a_span_moved_to_other_words_fails_placement_exactly_and_partly_by_f1() -> None:
    hyps = [REF[0], "Zwei <b>Männer stehen <i>vor</i></b> dem Haus.", *REF[2:]]
    got = scores(hyps)
    assert got["structure"] == 100
    assert got["placement_exact"] == pytest.approx(100 * 3 / 5)  # <b> and <i> both moved
    assert 60 < got["placement_f1"] < 100  # each still shares words with its reference span


def test_an_empty_tag_is_placed_by_the_word_before_it() -> None:
    hyps = [*REF[:2], "Eine<x/> Frau liest.", REF[3]]
    got = scores(hyps)
    assert got["structure"] == 100
    assert got["placement_exact"] == pytest.approx(100 * 4 / 5)


def test_tags_on_an_untagged_line_are_counted_and_the_text_scored_without_tags() -> None:
    hyps = [*REF[:3], "Ein <b>Kind</b> spielt."]
    got = scores(hyps)
    assert got["untagged_kept_clean"] == 0
    assert got["chrf"] == pytest.approx(100)  # the tags are removed before chrF


def test_placement_counted_only_where_the_reference_words_were_translated() -> None:
    hyps = ['Ein <b>Köter</b> schläft im <a href="g.html">Garten</a>.', *REF[1:]]
    got = scores(hyps)
    assert got["placement_exact"] == pytest.approx(100 * 4 / 5)
    assert got["tags_translated"] == 4  # "Hund" is not in the hypothesis
    assert got["placement_exact_translated"] == 100


def test_chrf_difference_against_the_translation_without_tags() -> None:
    got = tags.score(REF, REF, plain_hyps=["Ein Hund.", *(tags.parse(r).text for r in REF[1:])])
    assert got["chrf_delta"] > 0


def test_drawn_tags_render_well_nested_on_word_boundaries_and_project_by_alignment() -> None:
    rng = random.Random(3)
    words = ["A", "dog", "sleeps", "in", "the", "garden", "."]
    for _ in range(50):
        drawn = testset.draw_tags(rng, len(words))
        line = testset.render(words, drawn)
        parsed = tags.parse(line)
        assert parsed.well_nested and parsed.text == " ".join(words)
    ref = ["Ein", "Hund", "schläft", "im", "Garten."]
    links = {(0, 0), (1, 1), (2, 2), (3, 3), (4, 3), (5, 4)}
    placed = testset.project([("<b>", "</b>", 4, 6), ("<x/>", "", 1, 1)], links)
    assert testset.render(ref, placed) == "Ein Hund<x/> schläft <b>im Garten</b>."
    assert testset.project([("<b>", "</b>", 0, 1)], {(1, 1)}) is None


def test_tfm_projection_onto_the_reference_by_its_alignment_gives_the_reference() -> None:
    run = load("tags_run")
    tagged = ['A <b>dog</b> sleeps in the <a href="g.html">garden</a>.']
    plain = ["Ein Hund schläft im Garten."]
    placed = run.oracle(tagged, plain, ["0-0 1-1 2-2 3-3 4-3 5-4"])
    assert placed == ['Ein <b>Hund</b> schläft im <a href="g.html">Garten</a>.']
    by_position = run.oracle(tagged, plain, None)
    assert tags.structure(tags.parse(by_position[0])) == tags.structure(tags.parse(tagged[0]))
