"""Minimum Bayes risk (MBR) selection among a sentence's beam hypotheses.

Beam search returns the hypothesis the model scores highest; MBR returns the one expected to be
closest to the truth, taking the beam's hypotheses as samples of what the truth may be (Kumar
and Byrne 2004; Eikema and Aziz 2020; Freitag et al. 2022): hypothesis h's expected utility is

    U(h) = sum_j p_j * utility(h, h_j)

over the n hypotheses h_j (h itself included, where the utility is its maximum, 100). The
weights p_j are the model's probabilities renormalised over the n-best list, length-normalised
as beam search ranks hypotheses: p_j is proportional to exp(s_j * L), s_j the beam score
(log-probability / length ** length_penalty) and L the mean length of the n hypotheses. Raw
sequence probabilities favour the shortest hypotheses (on Multi30k validation, MBR with them
wrote too few words and lost BLEU: docs/multi30k-log.md); scaled this way the weights are as
sharp as the model's probabilities for a sentence of that length, without that bias. With the
metric a system is scored with as the utility (sentence BLEU or chrF), MBR picks the consensus
translation: one the other likely translations agree with, rather than an outlier the model
happens to score a little higher.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from tfm.config import MBR_UTILITIES as UTILITIES


def mbr_order(texts: Sequence[str], scores: Sequence[float], lengths: Sequence[int],
              utility: str = "bleu") -> list[int]:
    """Indices of ``texts`` from the highest expected utility to the lowest (ties keep the
    beam's order). ``scores``: each hypothesis's beam score (length-normalised
    log-probability); ``lengths``: its length in tokens, EOS included."""
    if not len(texts) == len(scores) == len(lengths):
        raise ValueError(f"{len(texts)} texts, {len(scores)} scores, {len(lengths)} lengths")
    n = len(texts)
    if n <= 1:
        return list(range(n))
    mean_length = sum(lengths) / n
    weights = _softmax([s * mean_length for s in scores])
    similarity = _utility(utility, texts)
    expected = []
    for i in range(n):
        expected.append(sum(weights[j] * (100.0 if i == j else similarity(i, j))
                            for j in range(n)))
    return sorted(range(n), key=lambda i: (-expected[i], i))


def _softmax(logits: Sequence[float]) -> list[float]:
    top = max(logits)
    if top == -math.inf:  # every hypothesis impossible: weigh them alike
        return [1.0 / len(logits)] * len(logits)
    exps = [math.exp(x - top) for x in logits]
    total = sum(exps)
    return [e / total for e in exps]


def _utility(name: str, texts: Sequence[str]) -> Callable[[int, int], float]:
    """utility(i, j): how good text i is as a translation when text j is the reference."""
    if name == "bleu":
        return _sentence_bleu(texts)
    if name == "chrf":
        from sacrebleu.metrics import CHRF

        chrf = CHRF()
        return lambda i, j: chrf.sentence_score(texts[i], [texts[j]]).score
    raise ValueError(f"unknown MBR utility {name!r}: choose one of {', '.join(UTILITIES)}")


def _sentence_bleu(texts: Sequence[str]) -> Callable[[int, int], float]:
    """sacrebleu's sentence BLEU (13a tokenization, exponential smoothing, effective order:
    ``sacrebleu.sentence_bleu``), with each text tokenized and its n-grams counted once rather
    than once per pair."""
    from sacrebleu.metrics.bleu import BLEU
    from sacrebleu.metrics.helpers import extract_all_word_ngrams
    from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

    order = 4  # BLEU-4, as sacrebleu scores
    tokenize = Tokenizer13a()
    stats = [extract_all_word_ngrams(tokenize(t.rstrip()), 1, order) for t in texts]

    def bleu(i: int, j: int) -> float:
        hyp, hyp_len = stats[i]
        ref, ref_len = stats[j]
        correct = [0] * order
        total = [0] * order
        for ngram, count in hyp.items():
            n = len(ngram) - 1
            total[n] += count
            correct[n] += min(count, ref.get(ngram, 0))
        return BLEU.compute_bleu(correct, total, hyp_len, ref_len, smooth_method="exp",
                                 effective_order=True).score

    return bleu

