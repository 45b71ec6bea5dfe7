"""The rules every engine's search follows, stated once: which rules act on every step
(``StepRule``, declared here and mapped by each engine), what a hypothesis is, which tokens are
never emitted, how long an output may be and when it is at that limit, how a hypothesis is
scored (greedy search with length penalty 1) and ranked, and when a sentence's search is over.

tfm's searches (tfm.decoding.search step by step, tfm.decoding.graphs in fixed buffers, both
through the tensor forms of tfm.decoding.steps) and the CTranslate2 engine
(tfm.decoding.ctranslate2_engine) all read them from here. The module imports neither torch
nor CTranslate2: an engine that needs no torch loads without it. The functions take plain
numbers; ``score``, ``at_limit`` and ``sentence_done`` also take tensors, with the same
arithmetic.
"""

from __future__ import annotations

import math
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any, TypeVar

from tfm.special_tokens import BOS_ID, PAD_ID, UNK_ID

if TYPE_CHECKING:
    from tfm.config import SearchOptions

# Padding, the start token and UNK are never produced (byte-level BPE needs no unknown token).
NEVER_EMITTED = (PAD_ID, UNK_ID, BOS_ID)


class StepRule(Enum):
    """A rule that acts on every step of every engine's search, in ``STEP_RULES``' order."""

    NEVER_EMITTED = "the never-emitted tokens (NEVER_EMITTED) get no probability"
    MIN_LENGTH = "no EOS before min_len, except at the length limit"
    LENGTH_LIMIT = "at the length limit (at_limit) only EOS may come"
    SAMPLING_TOP_K = ("when sampling from the k most probable tokens (sampling_topk > 1), "
                      "the others get no probability")


# The declared step rules, in the order they apply. Each engine maps every one (``mapped``):
# tfm.decoding.steps to a tensor function, the CTranslate2 engine to translate_batch options.
# A rule added here and not mapped by an engine stops that engine with its name.
STEP_RULES: tuple[StepRule, ...] = tuple(StepRule)

Mapped = TypeVar("Mapped")


class UnmappedRule(NotImplementedError):
    """An engine has no mapping for a declared rule (a programming error, not a user's)."""


def mapped(engine: str, mapping: Mapping[StepRule, Mapped]) -> list[Mapped]:
    """``engine``'s ``mapping`` of each of ``STEP_RULES``, in their order; UnmappedRule naming
    the first rule it does not map."""
    for rule in STEP_RULES:
        if rule not in mapping:
            raise UnmappedRule(f"{engine} has no mapping for the search rule {rule.name} "
                               f"({rule.value})")
    return [mapping[rule] for rule in STEP_RULES]


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # see ``score``
    log_prob: float  # sum of log-probabilities, EOS included
    # With need_attention: for each output token, the last decoder layer's cross-attention
    # over the (padded) source positions, averaged over heads, at the step that produced it.
    attention: list[list[float]] | None = None
    # With constraint phrases: whether each is in ``tokens``. A hypothesis that misses one
    # ended at the length limit: it ranks below every hypothesis that meets them all.
    constraints_met: list[bool] | None = None

    @property
    def complete(self) -> bool:
        """Whether it meets all its constraints (True where there are none)."""
        return self.constraints_met is None or all(self.constraints_met)


def rank(h: Hypothesis) -> tuple[bool, float]:
    """How finished hypotheses are ordered, best first (with reverse=True): those that meet
    their constraints before those that do not, then by score; of equal ranks, the one found
    first (a stable sort). tfm.decoding.steps.best_first is its tensor form."""
    return (h.complete, h.score)


def keep(finished: list[Hypothesis], found: Hypothesis, most: int) -> None:
    """``found`` among a sentence's ``finished`` hypotheses, which are kept best first
    (``rank``), the ``most`` best of them."""
    finished.append(found)
    finished.sort(key=rank, reverse=True)
    del finished[most:]


def hypothesis(tokens: list[int], log_prob: float, forced: int, length_penalty: float,
               attention: list[list[float]] | None = None,
               constraints_met: list[bool] | None = None) -> Hypothesis:
    """The finished hypothesis of output ``tokens`` (without EOS) and their ``log_prob``
    (EOS included), scored by ``score`` after ``forced`` decoder start tokens."""
    return Hypothesis(tokens, score(log_prob, counted(len(tokens), forced), length_penalty),
                      log_prob, attention, constraints_met)


GREEDY_LENGTH_PENALTY = 1.0  # greedy search compares no hypotheses of different lengths


def length_penalty_of(options: SearchOptions) -> float:
    """The length penalty a search's scores use: the options' for beam search,
    GREEDY_LENGTH_PENALTY for greedy search (beam 1), whatever the options say."""
    return GREEDY_LENGTH_PENALTY if options.beam == 1 else options.length_penalty


Number = TypeVar("Number", float, Any)  # a float, or a tensor of them


def score(log_prob: Number, tokens: int, length_penalty: float) -> Number:
    """A hypothesis's score: its log-probability (EOS included) divided by its length, EOS
    counted, to the power ``length_penalty`` (1 for greedy search, which compares no
    hypotheses of different lengths). ``tokens``: ``counted(output tokens, forced)``."""
    return log_prob / length_factor(tokens, length_penalty)


def live_counted(position: int, forced: int) -> int:
    """``counted`` for a live beam at output ``position`` when a beam search asks whether to
    stop (``sentence_done``): scored as if it ended now, its EOS at the next position."""
    return counted(position + 1, forced)


def counted(output_tokens: int, forced: int) -> int:
    """The tokens a hypothesis's length counts before its EOS: its output tokens, and the
    decoder's forced start tokens after the first (a language code forced after ``</s>`` or
    ``<s>``), as fairseq and transformers count a forced language token: the same ranking
    as theirs for the models they trained (NLLB-200, M2M100)."""
    return output_tokens + forced - 1


def length_factor(tokens: int, length_penalty: float) -> float:
    """What ``score`` divides the log-probability of ``tokens`` output tokens (and EOS) by; a
    search that tabulates it by position (tfm.decoding.graphs) takes it from here."""
    return (tokens + 1) ** length_penalty


def length_limit(source_tokens: int, a: float, b: int, most: int) -> int:
    """Most output tokens (EOS included) for a source of ``source_tokens`` tokens (EOS
    included): floor(a * source_tokens + b), at least 1 and at most ``most`` (the model's
    positions). Computed in float32, as tfm's search always has: the same limit, to the last
    rounding, on every engine."""
    f32 = _float32
    return min(max(math.floor(f32(f32(f32(a) * source_tokens) + f32(b))), 1), most)


Flag = TypeVar("Flag", bool, Any)  # a bool, or a tensor of them


def at_limit(max_len: Number, position: Number) -> Flag:
    """Whether output ``position`` (0 the first) is the last a length limit of ``max_len``
    tokens (EOS included, ``length_limit``) allows: where only EOS may come, and where a
    sentence's beam search ends. Numbers or tensors."""
    return max_len == position + 1


def _float32(x: float) -> float:
    """``x`` rounded to the nearest float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


def hypotheses_needed(beam: int, n_best: int, stop_early: bool) -> int:
    """How many finished hypotheses a sentence's beam search must have before it may stop
    (``sentence_done``): the ``n_best`` asked for with ``stop_early`` (as OpenNMT-py and
    CTranslate2), else the whole beam (as fairseq, and transformers' ``early_stopping=True``)."""
    return min(n_best, beam) if stop_early else beam


def worst_needed(finished: list[Hypothesis], needed: int) -> float:
    """The score of the ``needed``-th of a sentence's finished hypotheses (kept best first),
    -inf while it has fewer: what ``sentence_done`` compares its best live beam with."""
    return finished[needed - 1].score if len(finished) >= needed else -math.inf


def sentence_done(worst_needed: Number, best_live: Number, at_limit: Flag,
                  bounded: bool = True) -> Flag:
    """Whether a sentence's beam search is over (numbers, or tensors of one per sentence): at
    its length limit (every live beam was just made to end), or once it has the needed
    finished hypotheses (``worst_needed`` is not -inf) and, ``bounded`` (``stop_early``), its
    best live beam, ended now, would score no better than the worst of them. (log P only falls
    as a hypothesis grows; with a length penalty this is the usual heuristic, as in OpenNMT-py's
    and CTranslate2's.) Not ``bounded``: as soon as it has them, as fairseq stops, and
    transformers with ``early_stopping=True``."""
    have = worst_needed > -math.inf
    return at_limit | ((have & (worst_needed >= best_live)) if bounded else have)
