"""Corpus scores through sacrebleu, reported with their signatures."""

from __future__ import annotations

from dataclasses import dataclass

from sacrebleu.metrics import BLEU, CHRF, TER

from tfm.errors import DataError

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}


@dataclass
class Score:
    metric: str
    score: float
    text: str  # sacrebleu's own line, e.g. "BLEU = 35.21 66.1/42.0/28.7/19.4 (BP = ...)"
    signature: str


def score(metric: str, hypotheses: list[str], references: list[str]) -> Score:
    """One corpus-level score of detokenised hypotheses against one set of references."""
    if len(hypotheses) != len(references):
        raise DataError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                        "they must be aligned line by line")
    scorer = METRICS[metric]()
    result = scorer.corpus_score(hypotheses, [references])
    return Score(metric, float(result.score), str(result), str(scorer.get_signature()))


def bleu(hypotheses: list[str], references: list[str]) -> Score:
    return score("bleu", hypotheses, references)
