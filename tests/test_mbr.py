"""Minimum Bayes risk selection: the beam hypothesis the others agree with most."""

from __future__ import annotations

from pathlib import Path

import pytest
import sacrebleu
from conftest import random_model_dir, tfm
from tokenizers import Tokenizer

from tfm.config import SearchOptions
from tfm.decoding.engines import load_translator
from tfm.decoding.mbr import _sentence_bleu, mbr_order
from tfm.errors import UsageError

LINES = ["Ein Mann fährt Fahrrad.", "Ein Mann fährt auf einem Fahrrad.",
         "Zwei Hunde spielen im Schnee.", "Ein Mann, der Fahrrad fährt.", "", "Fahrrad"]


def test_the_bleu_utility_is_sacrebleus_sentence_bleu() -> None:
    bleu = _sentence_bleu(LINES)
    for i, hyp in enumerate(LINES):
        for j, ref in enumerate(LINES):
            assert bleu(i, j) == pytest.approx(sacrebleu.sentence_bleu(hyp, [ref]).score,
                                               abs=1e-9), (hyp, ref)


@pytest.mark.parametrize("utility", ["bleu", "chrf"])
def test_the_consensus_wins_over_a_slightly_better_scored_outlier(utility: str) -> None:
    texts = ["Zwei Hunde spielen im Schnee.",  # the beam's best, unlike all the others
             "Ein Mann fährt ein rotes Fahrrad.",
             "Ein Mann fährt ein Fahrrad.",
             "Ein Mann fährt auf einem roten Fahrrad."]
    order = mbr_order(texts, scores=[-0.50, -0.52, -0.53, -0.55], lengths=[8, 8, 8, 8],
                      utility=utility)
    assert sorted(order) == [0, 1, 2, 3]
    assert order[0] in (1, 2, 3)  # one of the three that agree with each other


def test_a_hypothesis_far_likelier_than_the_others_stays_first() -> None:
    texts = ["Zwei Hunde spielen im Schnee.", "Ein Mann fährt ein rotes Fahrrad.",
             "Ein Mann fährt ein Fahrrad."]
    # Per token 0.5 nats better over 8 tokens: e^4, about 55 times as probable as each other.
    assert mbr_order(texts, [-0.5, -1.0, -1.0], [8, 8, 8])[0] == 0


def test_weights_follow_the_length_normalised_score_not_the_raw_probability() -> None:
    # A short hypothesis has the higher total log-probability (-2.0 against -3.0) but the lower
    # per-token score; the longer ones agree with each other and are chosen.
    texts = ["Ein Mann.", "Ein Mann fährt ein rotes Fahrrad.",
             "Ein Mann fährt ein rotes Fahrrad am See."]
    scores = [-2.0 / 3, -3.0 / 8, -3.3 / 10]
    assert mbr_order(texts, scores, [3, 8, 10])[0] in (1, 2)


def test_one_hypothesis_or_none() -> None:
    assert mbr_order(["a"], [-1.0], [2]) == [0]
    assert mbr_order([], [], []) == []
    with pytest.raises(ValueError):
        mbr_order(["a", "b"], [-1.0], [2, 2])
    with pytest.raises(ValueError, match="unknown MBR utility"):
        mbr_order(["a", "b"], [-1.0, -1.0], [2, 2], utility="ter")


def test_search_options_refuse_mbr_without_a_beam_or_with_an_unknown_metric() -> None:
    with pytest.raises(UsageError, match="--beam 2"):
        SearchOptions(beam=1, mbr="bleu")
    with pytest.raises(UsageError, match="bleu or chrf"):
        SearchOptions(beam=4, mbr="ter")
    assert SearchOptions(beam=4, mbr="chrf").mbr == "chrf"


@pytest.fixture
def model_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    return random_model_dir(tmp_path / "model", tokenizer, seed=3)


SENTENCES = ["The dog sleeps in the garden.", "A man rides a bike.", "Two women walk."]


def test_the_translator_ranks_all_the_beams_hypotheses_and_keeps_n_best(
        model_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    translator = load_translator(model_dir, "cpu")
    beam = SearchOptions(beam=4, n_best=4, max_len_a=0.0, max_len_b=10)
    plain = translator.translate(SENTENCES, beam)
    seen = []

    def reversed_order(texts, scores, lengths, utility):  # stands in for the real ranking
        seen.append((list(texts), list(scores), list(lengths), utility))
        return list(range(len(texts)))[::-1]

    monkeypatch.setattr("tfm.decoding.translator.mbr_order", reversed_order)
    mbr = SearchOptions(beam=4, n_best=2, max_len_a=0.0, max_len_b=10, mbr="chrf")
    for sentence, p in zip(SENTENCES, plain):
        seen.clear()
        [c] = translator.translate([sentence], mbr)
        [(texts, scores, lengths, utility)] = seen
        # All 4 of the beam's hypotheses were ranked, with their scores and lengths ...
        assert texts == [t for t, _ in p.hypotheses]
        assert scores == pytest.approx([s for _, s in p.hypotheses])
        assert len(lengths) == 4 and all(n >= 1 for n in lengths) and utility == "chrf"
        # ... and the translation keeps the first 2 of that ranking, with the model's scores
        # (approximately: here the sentence is decoded alone, there in a batch, and fp32
        # products can round differently with the number of rows, as on AVX2-only CPUs).
        kept = [p.hypotheses[3], p.hypotheses[2]]
        assert [t for t, _ in c.hypotheses] == [t for t, _ in kept]
        assert [s for _, s in c.hypotheses] == pytest.approx([s for _, s in kept])
        assert c.text == p.hypotheses[3][0]


def test_the_command_line_takes_mbr_in_translate_and_eval(tmp_path: Path, model_dir: Path
                                                         ) -> None:
    translated = tfm("translate", "-m", str(model_dir), "--beam", "4", "--mbr", "bleu", "--device",
                     "cpu", *SENTENCES)
    assert translated.returncode == 0, translated.stderr
    assert len(translated.stdout.splitlines()) == len(SENTENCES)
    src = tmp_path / "src.en"
    src.write_text("\n".join(SENTENCES) + "\n")
    evaluated = tfm("eval", "-m", str(model_dir), "--src", str(src), "--ref", str(src), "--beam",
                    "4", "--mbr", "chrf", "--device", "cpu")
    assert evaluated.returncode == 0, evaluated.stderr
    assert "BLEU" in evaluated.stdout
    refused = tfm("translate", "-m", str(model_dir), "--beam", "1", "--mbr", "bleu", "Hello.")
    assert refused.returncode == 2
    lines = [line for line in refused.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "--mbr" in lines[0]
