"""Greedy and beam search over the model's key/value cache.

Search knows the model only through ``encode``, ``start_decoding`` and ``decode_step`` (and,
for the fixed-shape search of CUDA graphs, their in-place variants). Both searches are
batched: sentences that are finished leave the batch (their rows are pruned from the cache),
so a long sentence does not keep short ones computing.

The rules of a step are written once, as tensor functions that this module's searches and
the fixed-shape search (tfm.decoding.graphs) all call: ``STEP_RULES`` on each step's
log-probabilities, ``top_candidates`` for a beam's choice, rules.score / length_factor and
rules.sentence_done for finishing and stopping.

Both take per-sentence constraints (tfm.decoding.constraints): a forced prefix (greedy and
beam), and phrases the translation must contain (beam search only), searched by dynamic beam
allocation (Post & Vilar, 2018; vectorised over the beam as in Hu et al., 2019). Without
constraints, the search is exactly the unconstrained one: the constrained work is done only
for the sentences that have constraints, beside it.

Each sentence's decoder starts from forced tokens (``start``: ``<s>`` alone unless the caller
gives more, e.g. ``<s>`` and a target-language token): they are fed to the decoder before the
search's first step, never scored and never part of the output. (A constraint's prefix, by
contrast, is output the user asked for: forced, scored and written out.)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor

from tfm.config import SearchOptions
from tfm.decoding.constraints import Automaton, State, TargetConstraints
from tfm.decoding.rules import (
    NEVER_EMITTED,
    Hypothesis,
    counted,
    hypotheses_needed,
    length_limit,
    rank,
    score,
    sentence_done,
    worst_needed,
)
from tfm.model import Transformer
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID

NEG_INF = float("-inf")


def search(model: Transformer, src: Tensor, options: SearchOptions,
           constraints: Sequence[TargetConstraints | None] | None = None,
           start: Tensor | None = None) -> list[list[Hypothesis]]:
    """For each source row of ``src`` (token ids ending with EOS, padded), its
    ``options.n_best`` hypotheses, best first: greedy search at beam 1, else beam search.
    ``constraints``: one per sentence, or None (tfm.decoding.constraints). ``start``: (B, P)
    each sentence's forced decoder tokens (``decoder_start``; None: ``<s>`` alone)."""
    if options.beam == 1:
        return greedy_search(model, src, options, constraints, start)
    return beam_search(model, src, options, constraints, start)


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


def max_lengths(src: Tensor, pad_id: int, a: float, b: int, limit: int) -> Tensor:
    """(B,) most output tokens (EOS included) per sentence: rules.length_limit of each row."""
    lengths = (src != pad_id).sum(dim=1).tolist()
    return torch.tensor([length_limit(n, a, b, limit) for n in lengths], dtype=torch.long,
                        device=src.device)


def _limits(model: Transformer, src: Tensor, o: SearchOptions, forced: int = 1) -> Tensor:
    """rules.length_limit of each sentence within the positions the decoder has left after
    ``forced`` start tokens (the first of which takes the position ``<s>`` always took)."""
    return max_lengths(src, PAD_ID, o.max_len_a, o.max_len_b, output_positions(model, forced))


def output_positions(model: Transformer, forced: int) -> int:
    """The most output tokens (EOS included) the decoder has positions for after ``forced``
    start tokens."""
    return model.config.max_positions - (forced - 1)


@dataclass(frozen=True)
class Step:
    """What the rules of one step see: the output ``position`` being chosen (a number, or a (1,)
    tensor that stays on the device: tfm.decoding.graphs), ``min_len``, and each row's length
    limit ``max_len`` (B,)."""

    position: int | Tensor
    min_len: int
    max_len: Tensor

    @property
    def last(self) -> Tensor:
        """(B,) rows at their last allowed position."""
        return self.max_len == self.position + 1


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


# The rules every search applies to every step's log-probabilities, in this order: each a
# function (logp (B, V), Step) -> logp that reads nothing back to the host, so that the
# fixed-shape search of CUDA graphs runs them too. A new rule is added here, once. (A
# sentence's own constraints, its prefix and phrases, are applied after these by the
# step-by-step search alone: tfm.decoding.graphs does not take constrained batches.)
STEP_RULES = (never_emitted, no_eos_before_min_len, eos_at_the_limit)


def step_log_probs(logits: Tensor, step: int | Tensor, min_len: int, max_len: Tensor
                   ) -> Tensor:
    """Log-probabilities (B, V) for output position ``step`` under ``STEP_RULES``."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    rule_step = Step(step, min_len, max_len)
    for rule in STEP_RULES:
        logp = rule(logp, rule_step)
    return logp


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, options: SearchOptions,
                  constraints: Sequence[TargetConstraints | None] | None = None,
                  start: Tensor | None = None) -> list[list[Hypothesis]]:
    """The most probable next token at every step; one hypothesis per sentence. Of
    ``constraints`` (one per sentence, or None), greedy search takes only prefixes.
    ``start``: as for ``search``."""
    if constraints is not None and any(c is not None and c.phrases for c in constraints):
        raise ValueError("constraint phrases need beam search (beam 2 or more)")
    need_attention = options.attention
    prefix = _prefix_table(constraints, src.device)
    b = src.size(0)
    start = decoder_start(start, b, src.device)
    max_len = _limits(model, src, options, start.size(1))
    memory, memory_mask = model.encode(src)
    tokens, state = prime(model, model.start_decoding(memory, memory_mask), start)
    alive = torch.arange(b, device=src.device)  # original row of each row still decoding
    outputs: list[list[int]] = [[] for _ in range(b)]
    attention: list[list[list[float]]] = [[] for _ in range(b)]
    log_probs = [0.0] * b
    step = 0
    while alive.numel():
        logits, state, weights = model.decode_step(tokens, state, need_attention)
        logp = step_log_probs(logits, step, options.min_len, max_len[alive])
        if prefix is not None and step < prefix.size(1):
            _force(logp, prefix[alive, step])
        best_logp, tokens = logp.max(dim=-1)
        done = (tokens == EOS_ID).tolist()
        rows = weights.mean(dim=1).tolist() if need_attention else None  # (n, S)
        for row, (orig, token, lp) in enumerate(zip(alive.tolist(), tokens.tolist(),
                                                    best_logp.tolist())):
            log_probs[orig] += lp
            if not done[row]:
                outputs[orig].append(token)
                if rows is not None:
                    attention[orig].append(rows[row])
        step += 1
        if any(done):
            keep = torch.tensor([i for i, d in enumerate(done) if not d], dtype=torch.long,
                                device=src.device)
            alive, tokens = alive[keep], tokens[keep]
            state = state.index_select(keep)
    forced = start.size(1)
    return [[Hypothesis(out, score(lp, counted(len(out), forced), 1.0), lp,
                        attn if need_attention else None)]
            for out, lp, attn in zip(outputs, log_probs, attention)]


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, options: SearchOptions,
                constraints: Sequence[TargetConstraints | None] | None = None,
                start: Tensor | None = None) -> list[list[Hypothesis]]:
    """Beam search; for each sentence the ``n_best`` finished hypotheses, best first.

    Scores are rules.score: log P / length ** length_penalty, the length counting EOS (and a
    forced language token: rules.counted). A sentence is finished by rules.sentence_done: at
    its length limit; with ``stop_early``, when it has ``n_best`` finished hypotheses and no
    live beam would beat the worst of those if it ended now (with one best asked for, as soon
    as its best hypothesis has ended, as OpenNMT-py and CTranslate2 do); without it, once it
    has ``beam`` finished hypotheses, as fairseq does and transformers' ``generate`` with
    ``early_stopping=True``: more steps, the same best hypothesis when there is no length
    normalisation, and with it sometimes a longer, better one.

    ``constraints``: one per sentence (or None). A prefix is forced token by token. A sentence
    with phrases keeps its beam by dynamic beam allocation (``_Banks``); its hypotheses may
    end only once they contain every phrase, except at the length limit, where those that
    could not are kept as well, ranked below those that did and flagged (constraints_met).

    ``start``: as for ``search``.

    Each step is five named steps of ``_BeamSearch``: expand (each beam's candidates),
    allocate (the new beams and the hypotheses that end), finish (keep those), stop (which
    sentences are done) and prune (those leave the batch).
    """
    return _BeamSearch(model, src, options, constraints, start).run()


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
    """The beam-search step's choice from ``candidates`` (n, k, V), each beam's score plus each
    next token's log P; used by every beam search (this module's and tfm.decoding.graphs').
    Reads nothing back to the host."""
    n, k, vocab = candidates.shape
    # 2k candidates always leave at least k that do not end the sentence.
    scores, index = candidates.view(n, k * vocab).topk(2 * k, dim=-1)  # (n, 2k)
    beam, token = index // vocab, index % vocab
    is_eos = (token == EOS_ID) & torch.isfinite(scores)
    cont_scores, order = scores.masked_fill(is_eos, NEG_INF).topk(k, dim=-1)
    return Top(scores, index, beam, token, is_eos, cont_scores, beam.gather(1, order),
               token.gather(1, order))


@dataclass
class _Choice:
    """One step's outcome for the n live sentences: the k new beams of each, and the
    hypotheses that end."""

    scores: Tensor  # (n, k) summed log P of each new beam
    beam: Tensor  # (n, k) the beam (0..k-1) it continues
    token: Tensor  # (n, k) the token it adds
    endings: list[tuple[int, int, float, list[bool] | None]]  # (row, beam, log P, phrases met)


class _BeamSearch:
    """The state of one beam search: the live sentences' beams (k decoder rows per sentence),
    their histories and the finished hypotheses of every sentence."""

    def __init__(self, model: Transformer, src: Tensor, options: SearchOptions,
                 constraints: Sequence[TargetConstraints | None] | None,
                 start: Tensor | None = None) -> None:
        self.model, self.o = model, options
        self.k = k = options.beam
        # Finished hypotheses a sentence needs before it may stop.
        self.needed = hypotheses_needed(k, options.n_best, options.stop_early)
        device = self.device = src.device
        b = src.size(0)
        start = decoder_start(start, b, device)
        self.forced = start.size(1)
        self.max_len = _limits(model, src, options, self.forced)
        self.prefix = _prefix_table(constraints, device)
        self.banks = _Banks(constraints, k) if constraints is not None and any(
            c is not None and c.phrases for c in constraints) else None
        memory, memory_mask = model.encode(src)
        # k decoder rows per sentence (its beams), sharing the sentence's cross-attention keys
        # and values: reordering beams never copies them, pruning a sentence drops them.
        self.tokens, self.state = prime(model, model.start_decoding(memory, memory_mask, group=k),
                                        start.repeat_interleave(k, dim=0))
        self.alive = torch.arange(b, device=device)  # original sentence of each live sentence
        self.alive_list = self.alive.tolist()
        self.scores = torch.full((b, k), NEG_INF, device=device)  # summed log P of each beam
        self.scores[:, 0] = 0.0  # all beams start identical: expand only the first at step 0
        self.history = torch.full((b * k, 0), PAD_ID, dtype=torch.long, device=device)
        self.attn_history = torch.zeros(b * k, 0, src.size(1), device=device)  # if asked
        self.finished: list[list[Hypothesis]] = [[] for _ in range(b)]
        self.step = 0

    def run(self) -> list[list[Hypothesis]]:
        while self.alive.numel():
            logits, self.state, weights = self.model.decode_step(self.tokens, self.state,
                                                                 self.o.attention)
            choice = self.allocate(self.expand(logits))
            self.finish(choice.endings)
            self.prune(choice, self.stop(choice), weights)
        return [hyps[: self.o.n_best] for hyps in self.finished]

    def expand(self, logits: Tensor) -> Tensor:
        """(n, k, V) every candidate's summed log P: each beam's score plus each next token's
        log P, under the rules (never-emitted tokens, length limits, prefixes, phrases)."""
        n, k, step = self.alive.numel(), self.k, self.step
        max_len = self.max_len[self.alive].repeat_interleave(k)
        logp = step_log_probs(logits, step, self.o.min_len, max_len)  # (n*k, V)
        if self.prefix is not None and step < self.prefix.size(1):
            _force(logp, self.prefix[self.alive, step].repeat_interleave(k))
        if self.banks is not None:  # unmet constraints: no EOS before the limit
            self.banks.forbid_eos(logp, max_len != step + 1)
        return self.scores.view(n, k, 1) + logp.view(n, k, -1)

    def allocate(self, candidates: Tensor) -> _Choice:
        """The new beams: each sentence's k best candidates that do not end in EOS; those of
        its k best that do end in EOS are finished hypotheses. Sentences with phrases choose
        by their banks instead (``_Banks.select``)."""
        k = self.k
        top = top_candidates(candidates)
        choice = _Choice(top.cont_scores, top.cont_beam, top.cont_token, [])
        is_eos = top.is_eos
        if self.banks is not None:
            choice, is_eos = self.banks.select(candidates, top.scores, top.index, choice, is_eos)
        eos_rows, eos_cols = is_eos[:, :k].nonzero(as_tuple=True)
        if eos_rows.numel():
            beams, ends = top.beam.cpu(), top.scores.cpu()
            choice.endings[:0] = [(row, int(beams[row, col]), float(ends[row, col]), None)
                                  for row, col in zip(eos_rows.tolist(), eos_cols.tolist())]
        return choice

    def finish(self, endings: list[tuple[int, int, float, list[bool] | None]]) -> None:
        """Each ending beam becomes a finished hypothesis of its sentence, which keeps its k
        best (rules.rank), best first."""
        if not endings:
            return
        history = self.history.cpu()
        attention = self.attn_history.cpu() if self.o.attention else None
        for row, beam, log_prob, met in endings:
            hyps = self.finished[self.alive_list[row]]
            beam_row = row * self.k + beam
            out = history[beam_row].tolist()
            attn = attention[beam_row].tolist() if attention is not None else None
            hyps.append(Hypothesis(out, score(log_prob, counted(len(out), self.forced),
                                              self.o.length_penalty), log_prob, attn, met))
            hyps.sort(key=rank, reverse=True)
            del hyps[self.k:]

    def stop(self, choice: _Choice) -> list[int]:
        """The live rows that go on (rules.sentence_done decides)."""
        if self.banks is None:
            best = choice.scores[:, 0]
        else:
            # Only beams that have met their phrases could end now. Counting the others too
            # would keep most sentences decoding to their length limit: the beams that have
            # not spent probability on a phrase yet are the most probable ones.
            best = self.banks.could_end(choice.scores).max(dim=1).values
        best_live = score(best, counted(self.step + 1, self.forced),
                          self.o.length_penalty).tolist()
        at_limit = (self.max_len[self.alive] == self.step + 1).tolist()
        return [row for row in range(len(at_limit))
                if not sentence_done(worst_needed(self.finished[self.alive_list[row]],
                                                  self.needed), best_live[row], at_limit[row],
                                     self.o.stop_early)]

    def prune(self, choice: _Choice, keep_rows: list[int], weights: Tensor | None) -> None:
        """Sentences that are done leave the batch; the others' beams become ``choice``'s
        (histories, cache and scores reordered in one index each)."""
        k = self.k
        keep = torch.arange(self.alive.numel(), device=self.device)
        if len(keep_rows) < self.alive.numel():
            keep = torch.tensor(keep_rows, dtype=torch.long, device=self.device)
            self.alive = self.alive[keep]
            choice.scores, choice.beam = choice.scores[keep], choice.beam[keep]
            choice.token = choice.token[keep]
            self.alive_list = [self.alive_list[r] for r in keep_rows]
            if self.banks is not None:
                self.banks.keep(keep_rows)
        source_rows = (keep[:, None] * k + choice.beam).view(-1)
        self.history = torch.cat([self.history.index_select(0, source_rows),
                                  choice.token.view(-1, 1)], 1)
        if self.o.attention:  # the attention that produced each beam's new token
            step_attn = weights.mean(dim=1).index_select(0, source_rows)  # (n*k, S)
            self.attn_history = torch.cat([self.attn_history.index_select(0, source_rows),
                                           step_attn[:, None, :]], 1)
        self.tokens = choice.token.view(-1)
        self.scores = choice.scores
        self.state = self.state.index_select(source_rows)
        self.step += 1


def _prefix_table(constraints: Sequence[TargetConstraints | None] | None, device: torch.device
                  ) -> Tensor | None:
    """(B, P) the forced prefix of each sentence, -1 past its end; None when none has one."""
    prefixes = [c.prefix if c is not None else [] for c in constraints or ()]
    longest = max(map(len, prefixes), default=0)
    if not longest:
        return None
    table = torch.full((len(prefixes), longest), -1, dtype=torch.long)
    for row, tokens in enumerate(prefixes):
        table[row, : len(tokens)] = torch.tensor(tokens, dtype=torch.long)
    return table.to(device)


def _force(logp: Tensor, forced: Tensor) -> None:
    """Rows whose ``forced`` token is not -1 may produce only that token, at its own
    log-probability (a forced prefix is scored as the model scores it)."""
    rows = (forced >= 0).nonzero(as_tuple=True)[0]
    if rows.numel():
        tokens = forced[rows]
        kept = logp[rows, tokens]
        logp[rows] = NEG_INF
        logp[rows, tokens] = kept


@dataclass
class _Candidate:
    bank: int
    score: float
    beam: int
    token: int
    state: State


class _Banks:
    """Dynamic beam allocation (Post & Vilar, 2018) for the sentences that have constraint
    phrases; the others keep the unconstrained search's choice.

    Each step, a sentence's candidates are the k x V best of the unconstrained search (its 2k
    best), each live beam's best token, and each beam's tokens that advance it into a phrase
    not met yet. A candidate's bank is the number of constraint tokens it has met. Candidates
    are ranked by bank, best score first within a bank, then dealt out round-robin from the
    top bank down (Hu et al.'s stripes): the first goes to the best of the top bank, the next
    to the best of the bank below, and so on, so that every bank keeps a share of the beam
    and hypotheses that have met more constraints are never crowded out by more probable ones
    that have met fewer. As in the unconstrained search, EOS candidates among the first k
    finish, and the first k others are the new beams."""

    def __init__(self, constraints: Sequence[TargetConstraints | None], k: int) -> None:
        self.k = k
        # Per live sentence: its automaton (None: no phrases) and its beams' states.
        self.automata: list[Automaton | None] = [
            c.automaton if c is not None and c.phrases else None for c in constraints]
        self.states: list[list[State] | None] = [
            [a.start] * k if a is not None else None for a in self.automata]

    def keep(self, rows: list[int]) -> None:
        self.automata = [self.automata[r] for r in rows]
        self.states = [self.states[r] for r in rows]

    def forbid_eos(self, logp: Tensor, before_limit: Tensor) -> None:
        """No EOS for beams that have not met all their phrases, except at the limit."""
        k = self.k
        rows = [r * k + b for r, (a, states) in enumerate(zip(self.automata, self.states))
                if a is not None for b, state in enumerate(states) if not a.all_met(state)]
        if rows:
            index = torch.tensor(rows, dtype=torch.long, device=logp.device)
            index = index[before_limit[index]]
            logp[index, EOS_ID] = NEG_INF

    def select(self, candidates: Tensor, top_scores: Tensor, top_index: Tensor,
               choice: _Choice, is_eos: Tensor) -> tuple[_Choice, Tensor]:
        """``choice`` with the new beams of the sentences with phrases replaced by the
        allocation's and the hypotheses they finish among its endings, and ``is_eos``
        (n, 2k) cleared for those sentences (their endings are the allocation's).
        ``candidates`` (n, k, V): each beam's score plus each token's log P."""
        rows = [r for r, a in enumerate(self.automata) if a is not None]
        if not rows:
            return choice, is_eos
        k = self.k
        device = candidates.device
        index = torch.tensor(rows, dtype=torch.long, device=device)
        pools = self._pools(rows, index, candidates, top_scores, top_index)
        ends: list[tuple[int, int, float, list[bool] | None]] = []
        scores_out, beams_out, tokens_out = [], [], []
        for i, r in enumerate(rows):
            automaton, states = self.automata[r], self.states[r]
            ranked = []
            for (b, t), value in pools[i].items():
                state = states[b] if t == EOS_ID else automaton.advance(states[b], t)
                ranked.append(_Candidate(automaton.bank(state), value, b, t, state))
            ranked = _stripes(ranked)
            for c in ranked[:k]:
                if c.token == EOS_ID:
                    ends.append((r, c.beam, c.score, automaton.met(c.state)))
            beams = [c for c in ranked if c.token != EOS_ID][:k]
            beams += [_Candidate(0, NEG_INF, 0, PAD_ID, states[0])] * (k - len(beams))
            scores_out.append([c.score for c in beams])
            beams_out.append([c.beam for c in beams])
            tokens_out.append([c.token for c in beams])
            self.states[r] = [c.state for c in beams]
        chosen = _Choice(choice.scores.clone(), choice.beam.clone(), choice.token.clone(), ends)
        chosen.scores[index] = torch.tensor(scores_out, dtype=chosen.scores.dtype, device=device)
        chosen.beam[index] = torch.tensor(beams_out, dtype=chosen.beam.dtype, device=device)
        chosen.token[index] = torch.tensor(tokens_out, dtype=chosen.token.dtype, device=device)
        is_eos = is_eos.clone()
        is_eos[index] = False
        return chosen, is_eos

    def _pools(self, rows: list[int], index: Tensor, candidates: Tensor, top_scores: Tensor,
               top_index: Tensor) -> list[dict[tuple[int, int], float]]:
        """For each sentence ``rows`` (with phrases; ``index`` the same as a tensor), its
        candidates as {(beam, token): score}: its 2k best overall, each live beam's best
        token, and each beam's tokens that advance it into a phrase not met yet."""
        k, vocab = self.k, candidates.size(-1)
        best_score, best_token = (x.index_select(0, index).tolist()
                                  for x in candidates.max(dim=-1))  # (R, k)
        extra_row, extra_beam, extra_token = [], [], []
        for i, r in enumerate(rows):
            automaton, states = self.automata[r], self.states[r]
            for b in range(k):
                if best_score[i][b] != NEG_INF:  # a live beam
                    tokens = automaton.next_tokens(states[b])
                    extra_row += [i] * len(tokens)
                    extra_beam += [b] * len(tokens)
                    extra_token += tokens
        extra = (candidates[[rows[i] for i in extra_row], extra_beam, extra_token].tolist()
                 if extra_row else [])
        top_s = top_scores.index_select(0, index).tolist()
        top_i = top_index.index_select(0, index).tolist()

        pools: list[dict[tuple[int, int], float]] = [{} for _ in rows]
        for i in range(len(rows)):
            pool = pools[i]
            for value, flat in zip(top_s[i], top_i[i]):
                if value != NEG_INF:
                    pool[(flat // vocab, flat % vocab)] = value
            for b in range(k):
                if best_score[i][b] != NEG_INF:
                    pool[(b, best_token[i][b])] = best_score[i][b]
        for i, b, t, value in zip(extra_row, extra_beam, extra_token, extra):
            if value != NEG_INF:
                pools[i][(b, t)] = value
        return pools

    def could_end(self, cont_scores: Tensor) -> Tensor:
        """``cont_scores`` (n, k) of the new beams, -inf for those of the sentences with
        phrases that have not met them all (they may not end now)."""
        rows = [r for r, a in enumerate(self.automata) if a is not None]
        if not rows:
            return cont_scores
        blocked = [[not self.automata[r].all_met(state) for state in self.states[r]]
                   for r in rows]
        index = torch.tensor(rows, dtype=torch.long, device=cont_scores.device)
        mask = torch.zeros_like(cont_scores, dtype=torch.bool)
        mask[index] = torch.tensor(blocked, dtype=torch.bool, device=cont_scores.device)
        return cont_scores.masked_fill(mask, NEG_INF)


def _stripes(candidates: list[_Candidate]) -> list[_Candidate]:
    """Candidates dealt round-robin across banks, top bank first, best first within each."""
    candidates.sort(key=lambda c: (-c.bank, -c.score, c.beam, c.token))
    rank_in_bank = []
    bank, rank = None, 0
    for c in candidates:
        rank = rank + 1 if c.bank == bank else 0
        bank = c.bank
        rank_in_bank.append(rank)
    order = sorted(range(len(candidates)), key=lambda i: (rank_in_bank[i], -candidates[i].bank))
    return [candidates[i] for i in order]
