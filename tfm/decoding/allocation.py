"""Constraint phrases in a beam search: dynamic beam allocation (Post & Vilar, 2018; vectorised
over the beam as in Hu et al., 2019), for the sentences of a batch that have phrases
(tfm.decoding.constraints); the others keep the unconstrained search's choice.
tfm.decoding.search's beam search calls ``Banks`` at three of its named steps: ``expand`` (no
EOS before a hypothesis has met its phrases, ``forbid_eos``), ``allocate`` (``select``) and
``stop`` (``could_end``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tfm.decoding.constraints import Automaton, State, TargetConstraints
from tfm.decoding.steps import Choice
from tfm.special_tokens import EOS_ID, PAD_ID

NEG_INF = float("-inf")


@dataclass
class _Candidate:
    bank: int
    score: float
    beam: int
    token: int
    state: State


class Banks:
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
               choice: Choice, is_eos: Tensor) -> tuple[Choice, Tensor]:
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
        chosen = Choice(choice.scores.clone(), choice.beam.clone(), choice.token.clone(), ends)
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
