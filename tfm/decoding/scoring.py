"""Corpus scores through sacrebleu, reported with their signatures.

Besides sacrebleu's own (cased, detokenised) scores, :func:`bleu_lc_tok` computes the BLEU that the
Multi30k papers report: both sides lowercased, punctuation-normalised and tokenized exactly as the
official ``*.lc.norm.tok`` files were made with the Moses scripts, then BLEU on those tokens.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from importlib.metadata import version

from sacrebleu.metrics import BLEU, CHRF, TER

from tfm.errors import DataError
from tfm.extras import require

METRICS = {"bleu": BLEU, "chrf": CHRF, "ter": TER}
LC_TOK_METRIC = "bleu_lc_tok"


@dataclass
class Score:
    metric: str
    score: float
    text: str  # sacrebleu's own line, e.g. "BLEU = 35.21 66.1/42.0/28.7/19.4 (BP = ...)"
    signature: str


def _check_aligned(hypotheses: list[str], references: list[str]) -> None:
    if len(hypotheses) != len(references):
        raise DataError(f"{len(hypotheses)} hypotheses but {len(references)} references: "
                        "they must be aligned line by line")


def score(metric: str, hypotheses: list[str], references: list[str]) -> Score:
    """One corpus-level score of detokenised hypotheses against one set of references."""
    _check_aligned(hypotheses, references)
    scorer = METRICS[metric]()
    result = scorer.corpus_score(hypotheses, [references])
    return Score(metric, float(result.score), str(result), str(scorer.get_signature()))


def bleu(hypotheses: list[str], references: list[str]) -> Score:
    return score("bleu", hypotheses, references)


# --- Multi30k-style lowercased, Moses-tokenized BLEU ----------------------------------------------

def _sacremoses():
    """The sacremoses module, or a one-line error naming the extra that installs it."""
    return require("sacremoses", "moses")


def require_moses() -> None:
    """Fail early (before translating anything) when the lc-tok score cannot be computed."""
    _sacremoses()


class MosesLcTokenizer:
    """Text as the Multi30k ``*.lc.norm.tok.<lang>`` files have it: the pipeline of
    ``scripts/task1-tokenize.sh`` in github.com/multi30k/dataset, i.e. the Moses scripts (snapshot
    3a0631a, December 2017) ``lowercase.perl | normalize-punctuation.perl -l L |
    tokenizer.perl -l L``.

    sacremoses is the maintained Python port of those scripts; its punctuation normaliser follows
    a later Moses, so the rules are rebuilt here from its tables as the snapshot has them:
    ‘ ‚ ’ become ``"`` (later Moses: ``'``), the German-style "quotation", comma rule applies to
    every language but en/cs, and the rules see the line with its newline, as Perl does (which
    moves a final ``."`` to ``".``). The tokenizer escapes ``& | < > ' " [ ]`` as the official
    files do (``&amp; &#124; &lt; &gt; &apos; &quot; &#91; &#93;``).
    """

    def __init__(self, lang: str) -> None:
        sacremoses = _sacremoses()
        self.lang = lang
        norm = sacremoses.MosesPunctNormalizer
        unicode_rules = [(pattern, '"' if pattern in ("‘", "‚", "’") else repl)
                         for pattern, repl in norm.NORMALIZE_UNICODE]
        french_quotes = list(norm.FRENCH_QUOTES)  # the snapshot keeps a space outside « »
        french_quotes[0] = ("\u00a0«\u00a0", ' "')
        french_quotes[3] = ("\u00a0»\u00a0", '" ')
        if lang == "en":
            quote_rules = norm.EN_QUOTATION_FOLLOWED_BY_COMMA
        elif lang in ("cs", "cz"):
            quote_rules = []
        else:
            quote_rules = norm.DE_ES_FR_QUOTATION_FOLLOWED_BY_COMMA
        number_rules = (norm.DE_ES_CZ_CS_FR if lang in ("de", "es", "cz", "cs", "fr")
                        else norm.OTHER)
        rules = [*norm.EXTRA_WHITESPACE, *norm.NORMALIZE_UNICODE_IF_NOT_PENN, *unicode_rules,
                 *french_quotes, *norm.HANDLE_PSEUDO_SPACES, *quote_rules, *number_rules]
        # The snapshot's normaliser reads bytes: \d and \s are ASCII there.
        self._rules = [(re.compile(pattern, re.ASCII), repl) for pattern, repl in rules]
        self._tokenizer = sacremoses.MosesTokenizer(lang)

    def normalize(self, line: str) -> str:
        """normalize-punctuation.perl -l L on one (already lowercased) line."""
        text = line + "\n"
        for pattern, repl in self._rules:
            text = pattern.sub(repl, text)
        return text.rstrip("\n")

    def __call__(self, line: str) -> str:
        """One line, lowercased, normalised and tokenized: tokens joined by single spaces."""
        # lowercase.perl is Perl's lc() character by character (no final-sigma rule).
        lowered = "".join(c.lower() for c in line)
        return self._tokenizer.tokenize(self.normalize(lowered), escape=True,
                                        aggressive_dash_splits=False, return_str=True)


def bleu_lc_tok(hypotheses: list[str], references: list[str], lang: str) -> Score:
    """BLEU as the Multi30k papers report it: both sides through :class:`MosesLcTokenizer` for
    the target language ``lang``, then corpus BLEU on the tokens with no smoothing (what
    multi-bleu.perl computes on the official tokenized files).

    The signature is sacrebleu's with the scheme named: ``case:lc``, ``tok:moses-norm-<lang>``
    and the sacremoses version beside sacrebleu's."""
    _check_aligned(hypotheses, references)
    tokenize = MosesLcTokenizer(lang)
    # force: the input is tokenized on purpose (sacrebleu would warn about it otherwise).
    scorer = BLEU(tokenize="none", lowercase=False, smooth_method="none", force=True)
    result = scorer.corpus_score([tokenize(h) for h in hypotheses],
                                 [[tokenize(r) for r in references]])
    result.name = "BLEU-lc-tok"
    signature = scorer.get_signature()
    signature.update("case", "lc")
    signature.update("tok", f"moses-norm-{lang}")
    signature.update("version", f"{version('sacrebleu')}+sacremoses-{version('sacremoses')}")
    return Score(LC_TOK_METRIC, float(result.score), str(result), str(signature))
