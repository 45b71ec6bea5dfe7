"""The search's step vocabulary as tensor functions, written once for tfm's two searches: the
step-by-step search (tfm.decoding.search) and the fixed-shape search of CUDA graphs
(tfm.decoding.graphs) both import it, and neither imports the other.

- the decoder's forced start: ``decoder_start`` (``<s>`` unless the caller gives more), fed
  before the first step by ``prime`` (or ``prime_in_place``), never scored nor output;
- the length limits: ``output_positions`` and ``limits`` (rules.length_limit per sentence);
- a step's rules: ``step_log_probs`` applies rules.STEP_RULES, each mapped here to a function
  ``(logp, Step) -> logp`` that reads nothing back (``TENSOR_RULES``);
- the choice: ``greedy_choice`` (greedy), ``sampled_choice`` with ``sentence_generators``
  (sampling: each sentence's own seeded generator), ``expand`` and ``top_candidates`` (beam);
- the ranking of finished hypotheses: ``best_first``, rules.rank as a tensor sort.

The numbers behind them (the limit, "at the limit", the score, greedy's length penalty 1, when
a sentence is done) are tfm.decoding.rules', which the CTranslate2 engine reads too.
"""

from __future__ import annotations

import hashlib
import struct
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tfm.config import SearchOptions
from tfm.decoding import rules
from tfm.decoding.rules import NEVER_EMITTED, StepRule, at_limit, length_limit
from tfm.model import Transformer
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


# --- the forced start -------------------------------------------------------------------------

def decoder_start(start: Tensor | None, sentences: int, device: torch.device) -> Tensor:
    """(B, P) the tokens each sentence's decoder is fed before the search chooses any: ``start``
    as given, or ``<s>`` alone. All rows of a batch have the same number P >= 1."""
    if start is None:
        return torch.full((sentences, 1), BOS_ID, dtype=torch.long, device=device)
    if start.dim() != 2 or start.size(0) != sentences or start.size(1) < 1:
        raise ValueError(f"start: ({sentences}, P >= 1) forced decoder tokens, not "
                         f"{tuple(start.shape)}")
    return start.to(device)


def prime(model: Transformer, state: Any, start: Tensor) -> tuple[Tensor, Any]:
    """The decoder fed every forced token of ``start`` (rows, P) but the last, which is the
    search's first input: (rows,) those tokens and the state after the others. Nothing fed
    here is scored or becomes output."""
    for position in range(start.size(1) - 1):
        _, state, _ = model.decode_step(start[:, position], state)
    return start[:, -1].contiguous(), state


def prime_in_place(model: Transformer, state: Any, start: Tensor) -> Tensor:
    """``prime`` for a fixed decoder state (model.fixed_decoder_state), fed in place."""
    for position in range(start.size(1) - 1):
        model.decode_step_in_place(start[:, position], state)
        state.position += 1
    return start[:, -1]


# --- the length limits ------------------------------------------------------------------------

def output_positions(model: Transformer, forced: int) -> int:
    """The most output tokens (EOS included) the decoder has positions for after ``forced``
    start tokens (the first of which takes the position ``<s>`` always took)."""
    return model.config.max_positions - (forced - 1)


def max_lengths(src: Tensor, pad_id: int, a: float, b: int, limit: int) -> Tensor:
    """(B,) most output tokens (EOS included) per sentence: rules.length_limit of each row."""
    lengths = (src != pad_id).sum(dim=1).tolist()
    return torch.tensor([length_limit(n, a, b, limit) for n in lengths], dtype=torch.long,
                        device=src.device)


def limits(model: Transformer, src: Tensor, o: SearchOptions, forced: int = 1) -> Tensor:
    """(B,) rules.length_limit of each sentence of ``src`` within the positions the decoder has
    left after ``forced`` start tokens."""
    return max_lengths(src, PAD_ID, o.max_len_a, o.max_len_b, output_positions(model, forced))


# --- a step's rules ---------------------------------------------------------------------------

@dataclass(frozen=True)
class Step:
    """What the rules of one step see: the output ``position`` being chosen (a number, or a (1,)
    tensor that stays on the device: tfm.decoding.graphs), ``min_len``, and each row's length
    limit ``max_len`` (B,)."""

    position: int | Tensor
    min_len: int
    max_len: Tensor
    sampling_topk: int = 1  # SearchOptions.sampling_topk: 1 (no sampling) or 0 leave all

    @property
    def last(self) -> Tensor:
        """(B,) rows at their last allowed position (rules.at_limit)."""
        return at_limit(self.max_len, self.position)


def never_emitted(logp: Tensor, step: Step) -> Tensor:
    """rules.NEVER_EMITTED get no probability."""
    for token in NEVER_EMITTED:  # (an index tensor would be a copy from the host)
        logp[:, token] = NEG_INF
    return logp


def no_eos_before_min_len(logp: Tensor, step: Step) -> Tensor:
    """EOS is forbidden before ``min_len``, except at a row's last position (the length limit
    wins over ``min_len``)."""
    if step.min_len:
        early = (step.position < step.min_len) & ~step.last
        logp[:, EOS_ID] = logp[:, EOS_ID].masked_fill(early, NEG_INF)
    return logp


def eos_at_the_limit(logp: Tensor, step: Step) -> Tensor:
    """At a row's last allowed position only EOS may come."""
    not_eos = torch.arange(logp.size(-1), device=logp.device) != EOS_ID  # (V,)
    return logp.masked_fill_(step.last[:, None] & not_eos, NEG_INF)


def sampling_top_k(logp: Tensor, step: Step) -> Tensor:
    """When sampling from the k most probable tokens, the others get no probability (the
    kept ones keep their log P: the hypothesis is scored by the model, not renormalised)."""
    k = step.sampling_topk
    if k > 1 and k < logp.size(-1):
        kth = logp.topk(k, dim=-1).values[:, -1:]  # (B, 1)
        logp = logp.masked_fill_(logp < kth, NEG_INF)
    return logp


# Each declared rule (rules.STEP_RULES) as a function (logp (B, V), Step) -> logp that reads
# nothing back to the host, so that the fixed-shape search of CUDA graphs runs it too. (A
# sentence's own constraints, its prefix and phrases, are applied after these by the
# step-by-step search alone: tfm.decoding.graphs does not take constrained batches.)
TENSOR_RULES = {
    StepRule.NEVER_EMITTED: never_emitted,
    StepRule.MIN_LENGTH: no_eos_before_min_len,
    StepRule.LENGTH_LIMIT: eos_at_the_limit,
    StepRule.SAMPLING_TOP_K: sampling_top_k,
}
rules.mapped("tfm's search", TENSOR_RULES)  # a declared rule not mapped: stop at import


def step_log_probs(logits: Tensor, step: int | Tensor, min_len: int, max_len: Tensor,
                   sampling_topk: int = 1) -> Tensor:
    """Log-probabilities (B, V) for output position ``step`` under rules.STEP_RULES, in their
    declared order."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    rule_step = Step(step, min_len, max_len, sampling_topk)
    for rule in rules.mapped("tfm's search", TENSOR_RULES):
        logp = rule(logp, rule_step)
    return logp


# --- the choice -------------------------------------------------------------------------------

def greedy_choice(logp: Tensor) -> tuple[Tensor, Tensor, Tensor]:
    """Greedy search's step: (B,) each row's most probable token's log P, the token, and
    whether it ends the sentence (EOS)."""
    best, token = logp.max(dim=-1)
    return best, token, token == EOS_ID


def sentence_generators(src: Tensor, pad_id: int, seed: int) -> list[torch.Generator]:
    """One random generator per source row of ``src`` (B, S), seeded by ``seed`` and the
    row's token ids alone: a sentence draws the same tokens in any batch, any order, any
    worker, shard or resumed run (and two equal sentences draw alike)."""
    generators = []
    for row in src.tolist():
        ids = [t for t in row if t != pad_id]
        digest = hashlib.blake2b(struct.pack(f"<q{len(ids)}q", seed, *ids), digest_size=8)
        generator = torch.Generator(device=src.device)
        generator.manual_seed(int.from_bytes(digest.digest(), "little") & (2**63 - 1))
        generators.append(generator)
    return generators


def sampled_choice(logp: Tensor, generators: list[torch.Generator], temperature: float
                   ) -> tuple[Tensor, Tensor, Tensor]:
    """Sampling's step, as ``greedy_choice``: each row's token drawn from softmax(logp / T)
    over the tokens the rules left (by the Gumbel-max trick, each row with its own
    generator), its log P under the model, and whether it is EOS."""
    uniform = torch.stack([torch.rand(logp.size(-1), generator=g, device=logp.device)
                           for g in generators])  # (B, V)
    gumbel = -torch.log(-torch.log(uniform.clamp(1e-20, 1.0 - 1e-7)))
    token = (logp / temperature + gumbel).argmax(dim=-1)
    return logp.gather(-1, token[:, None])[:, 0], token, token == EOS_ID


def expand(scores: Tensor, logp: Tensor) -> Tensor:
    """(n, k, V) every beam search candidate's summed log P: each beam's ``scores`` (n, k)
    plus each next token's ``logp`` (n*k, V)."""
    n, k = scores.shape
    return scores.view(n, k, 1) + logp.view(n, k, -1)


@dataclass
class Top:
    """The 2k best candidates of each of n sentences (beam k), and the k best of them that do
    not end the sentence: the new beams (``top_candidates``)."""

    scores: Tensor  # (n, 2k) summed log P, best first
    index: Tensor  # (n, 2k) beam * V + token
    beam: Tensor  # (n, 2k) the beam each continues
    token: Tensor  # (n, 2k) the token each adds
    is_eos: Tensor  # (n, 2k) whether it ends its sentence (EOS, and a finite score)
    cont_scores: Tensor  # (n, k) the new beams' summed log P, best first
    cont_beam: Tensor  # (n, k)
    cont_token: Tensor  # (n, k)


def top_candidates(candidates: Tensor) -> Top:
    """The beam-search step's choice from ``candidates`` (n, k, V) (``expand``); used by every
    beam search (tfm.decoding.search's and tfm.decoding.graphs'). Reads nothing back."""
    n, k, vocab = candidates.shape
    # 2k candidates always leave at least k that do not end the sentence.
    scores, index = candidates.view(n, k * vocab).topk(2 * k, dim=-1)  # (n, 2k)
    beam, token = index // vocab, index % vocab
    is_eos = (token == EOS_ID) & torch.isfinite(scores)
    cont_scores, order = scores.masked_fill(is_eos, NEG_INF).topk(k, dim=-1)
    return Top(scores, index, beam, token, is_eos, cont_scores, beam.gather(1, order),
               token.gather(1, order))


@dataclass
class Choice:
    """One beam-search step's outcome for the n live sentences: the k new beams of each, and
    the hypotheses that end."""

    scores: Tensor  # (n, k) summed log P of each new beam
    beam: Tensor  # (n, k) the beam (0..k-1) it continues
    token: Tensor  # (n, k) the token it adds
    endings: list[tuple[int, int, float, list[bool] | None]]  # (row, beam, log P, phrases met)


# --- the ranking ------------------------------------------------------------------------------

def best_first(scores: Tensor, complete: Tensor | None = None) -> Tensor:
    """(n, m) for each row of hypotheses' ``scores`` (n, m), the order that ranks them best
    first by rules.rank: those ``complete`` (n, m; None: all) before the others, then by
    score, of equal ranks the earlier first (stable, as rules.keep's sort)."""
    order = scores.sort(dim=1, descending=True, stable=True).indices
    if complete is not None:
        met = complete.gather(1, order).to(torch.uint8)
        order = order.gather(1, met.sort(dim=1, descending=True, stable=True).indices)
    return order
