"""Greedy and beam search over the model's key/value cache.

Search knows the model only through ``encode``, ``start_decoding`` and ``decode_step``. Both
searches are batched: sentences that are finished leave the batch (their rows are pruned from
the cache), so a long sentence does not keep short ones computing.

Both take per-sentence constraints (tfm.decoding.constraints): a forced prefix (greedy and
beam), and phrases the translation must contain (beam search only), searched by dynamic beam
allocation (Post & Vilar, 2018; vectorised over the beam as in Hu et al., 2019). Without
constraints, the search is exactly the unconstrained one: the constrained work is done only
for the sentences that have constraints, beside it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfm.decoding.constraints import Automaton, State, TargetConstraints
from tfm.model import Transformer

NEG_INF = float("-inf")


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # sum of log-probabilities (EOS included) / length ** length_penalty
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


def _rank(h: Hypothesis) -> tuple[bool, float]:
    """How finished hypotheses are ordered, best first (with reverse=True)."""
    return (h.complete, h.score)


def max_lengths(src: Tensor, pad_id: int, a: float, b: int, limit: int) -> Tensor:
    """(B,) most output tokens (EOS included) per sentence: a * source length + b, capped."""
    return length_limits((src != pad_id).sum(dim=1), a, b, limit)


def length_limits(src_lengths: Tensor, a: float, b: int, limit: int) -> Tensor:
    """(B,) most output tokens (EOS included) for source lengths (EOS included): the one
    length rule of every engine."""
    return (a * src_lengths.float() + b).floor().long().clamp(min=1, max=limit)


def _step_log_probs(logits: Tensor, step: int, min_len: int, max_len: Tensor) -> Tensor:
    """Log-probabilities for output position ``step``. Padding, BOS and UNK are never produced
    (byte-level BPE needs no unknown token); EOS is forbidden before ``min_len`` and forced at
    each row's last allowed position (the length limit wins over ``min_len``)."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, [PAD_ID, UNK_ID, BOS_ID]] = float("-inf")
    last = max_len == step + 1
    if step < min_len:
        logp[~last, EOS_ID] = float("-inf")
    if last.any():
        eos = logp[last, EOS_ID].clone()
        logp[last] = float("-inf")
        logp[last, EOS_ID] = eos
    return logp


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, max_len_a: float = 1.5, max_len_b: int = 10,
                  min_len: int = 0, need_attention: bool = False,
                  constraints: Sequence[TargetConstraints | None] | None = None,
                  ) -> list[list[Hypothesis]]:
    """The most probable next token at every step; one hypothesis per sentence. Of
    ``constraints`` (one per sentence, or None), greedy search takes only prefixes."""
    if constraints is not None and any(c is not None and c.phrases for c in constraints):
        raise ValueError("constraint phrases need beam search (beam 2 or more)")
    pad = PAD_ID
    prefix = _prefix_table(constraints, src.device)
    max_len = max_lengths(src, pad, max_len_a, max_len_b, model.config.max_positions)
    memory, memory_mask = model.encode(src)
    state = model.start_decoding(memory, memory_mask)
    b = src.size(0)
    alive = torch.arange(b, device=src.device)  # original row of each row still decoding
    tokens = torch.full((b,), BOS_ID, dtype=torch.long, device=src.device)
    outputs: list[list[int]] = [[] for _ in range(b)]
    attention: list[list[list[float]]] = [[] for _ in range(b)]
    log_probs = [0.0] * b
    step = 0
    while alive.numel():
        logits, state, weights = model.decode_step(tokens, state, need_attention)
        logp = _step_log_probs(logits, step, min_len, max_len[alive])
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
    return [[Hypothesis(out, lp / (len(out) + 1), lp, attn if need_attention else None)]
            for out, lp, attn in zip(outputs, log_probs, attention)]


@torch.inference_mode()
def beam_search(model: Transformer, src: Tensor, beam: int = 5, length_penalty: float = 1.0,
                max_len_a: float = 1.5, max_len_b: int = 10, min_len: int = 0,
                n_best: int = 1, need_attention: bool = False, stop_early: bool = True,
                constraints: Sequence[TargetConstraints | None] | None = None,
                ) -> list[list[Hypothesis]]:
    """Beam search; for each sentence the ``n_best`` finished hypotheses, best first.

    Scores are length-normalised: log P / length ** length_penalty, the length counting EOS.
    A sentence is finished at its length limit, or when it has ``n_best`` finished hypotheses
    (``beam`` of them without ``stop_early``) and no live beam would beat the worst of those
    if it ended now. With one best asked for, ``stop_early`` ends a sentence as soon as its
    best hypothesis has ended, as OpenNMT-py and CTranslate2 do; without it, the search waits
    for ``beam`` finished hypotheses, as fairseq does: more steps, the same best hypothesis
    when there is no length normalisation, and with it sometimes a longer, better one.

    ``constraints``: one per sentence (or None). A prefix is forced token by token. A sentence
    with phrases keeps its beam by dynamic beam allocation (``_Banks``); its hypotheses may
    end only once they contain every phrase, except at the length limit, where those that
    could not are kept as well, ranked below those that did and flagged (constraints_met).
    """
    pad = PAD_ID
    device = src.device
    b = src.size(0)
    k = beam
    need = min(n_best, k) if stop_early else k  # finished hypotheses needed before stopping
    max_len_all = max_lengths(src, pad, max_len_a, max_len_b, model.config.max_positions)
    prefix = _prefix_table(constraints, device)
    banks = _Banks(constraints, k) if constraints is not None and any(
        c is not None and c.phrases for c in constraints) else None
    memory, memory_mask = model.encode(src)
    # k decoder rows per sentence (its beams), sharing the sentence's cross-attention keys and
    # values: reordering beams never copies them, pruning a sentence drops them.
    state = model.start_decoding(memory, memory_mask, group=k)

    alive = torch.arange(b, device=device)  # original sentence of each live sentence
    scores = torch.full((b, k), float("-inf"), device=device)  # summed log P of each beam
    scores[:, 0] = 0.0  # all beams start identical: expand only the first at step 0
    history = torch.full((b * k, 0), BOS_ID, dtype=torch.long, device=device)  # (N*k, t)
    attn_history = torch.zeros(b * k, 0, src.size(1), device=device)  # (N*k, t, S), if asked
    tokens = torch.full((b * k,), BOS_ID, dtype=torch.long, device=device)
    alive_list = alive.tolist()
    finished: list[list[Hypothesis]] = [[] for _ in range(b)]
    step = 0
    while alive.numel():
        n = alive.numel()
        logits, state, weights = model.decode_step(tokens, state, need_attention)
        max_len = max_len_all[alive].repeat_interleave(k)
        logp = _step_log_probs(logits, step, min_len, max_len)  # (n*k, V)
        if prefix is not None and step < prefix.size(1):
            _force(logp, prefix[alive, step].repeat_interleave(k))
        if banks is not None:  # unmet constraints: no EOS before the limit
            banks.forbid_eos(logp, max_len != step + 1)
        vocab = logp.size(-1)
        candidates = (scores.view(n, k, 1) + logp.view(n, k, vocab)).view(n, k * vocab)
        # 2k candidates always leave at least k that do not end the sentence.
        top_scores, top_index = candidates.topk(2 * k, dim=-1)  # (n, 2k)
        top_beam = top_index // vocab
        top_token = top_index % vocab

        is_eos = (top_token == EOS_ID) & torch.isfinite(top_scores)
        # The k best candidates that do not end in EOS continue as the new beams.
        cont_scores, order = top_scores.masked_fill(is_eos, float("-inf")).topk(k, dim=-1)
        new_beam = top_beam.gather(1, order)  # (n, k)
        new_token = top_token.gather(1, order)
        ended: list[tuple[int, int, float, list[bool]]] = []
        if banks is not None:  # sentences with phrases choose their beams by their banks
            ended = banks.select(candidates.view(n, k, vocab), top_scores, top_index,
                                cont_scores, new_beam, new_token, is_eos)

        # Hypotheses end where EOS is among a sentence's k best candidates; each sentence keeps
        # its k best finished hypotheses, best first.
        eos_rows, eos_cols = is_eos[:, :k].nonzero(as_tuple=True)
        if eos_rows.numel():
            hist_cpu = history.cpu()
            attn_cpu = attn_history.cpu() if need_attention else None
            beams = top_beam.cpu()
            ends = top_scores.cpu()
            for row, col in zip(eos_rows.tolist(), eos_cols.tolist()):
                hyps = finished[alive_list[row]]
                beam_row = row * k + int(beams[row, col])
                out = hist_cpu[beam_row].tolist()
                lp = float(ends[row, col])
                attn = attn_cpu[beam_row].tolist() if attn_cpu is not None else None
                hyps.append(Hypothesis(out, lp / (len(out) + 1) ** length_penalty, lp, attn))
                hyps.sort(key=lambda h: h.score, reverse=True)  # kept best first
                del hyps[k:]
        if ended:
            hist_cpu = history.cpu()
            attn_cpu = attn_history.cpu() if need_attention else None
            for row, beam_index, lp, met in ended:
                hyps = finished[alive_list[row]]
                beam_row = row * k + beam_index
                out = hist_cpu[beam_row].tolist()
                attn = attn_cpu[beam_row].tolist() if attn_cpu is not None else None
                hyps.append(Hypothesis(out, lp / (len(out) + 1) ** length_penalty, lp, attn,
                                       met))
                hyps.sort(key=_rank, reverse=True)
                del hyps[k:]

        # A sentence is done at its length limit (every live beam was just forced to end), or
        # once it has the n_best finished hypotheses it returns and its best live beam, ended
        # now, would score no better than the worst of them. (log P only falls as a hypothesis
        # grows; with a length penalty this is the usual heuristic, as in Hugging Face's.)
        if banks is None:
            best = cont_scores[:, 0]
        else:
            # Only beams that have met their phrases could end now. Counting the others too
            # would keep most sentences decoding to their length limit: the beams that have
            # not spent probability on a phrase yet are the most probable ones.
            best = banks.could_end(cont_scores).max(dim=1).values
        best_live = (best / (step + 2) ** length_penalty).tolist()
        at_limit = (max_len_all[alive] == step + 1).tolist()
        keep_rows = []
        for row in range(n):
            hyps = finished[alive_list[row]]
            done = at_limit[row] or (
                len(hyps) >= need and hyps[need - 1].score >= best_live[row])
            if not done:
                keep_rows.append(row)
        keep = torch.arange(n, device=device)
        if len(keep_rows) < n:  # finished sentences leave the batch
            keep = torch.tensor(keep_rows, dtype=torch.long, device=device)
            alive, cont_scores = alive[keep], cont_scores[keep]
            new_beam, new_token = new_beam[keep], new_token[keep]
            alive_list = [alive_list[r] for r in keep_rows]
            if banks is not None:
                banks.keep(keep_rows)
        source_rows = (keep[:, None] * k + new_beam).view(-1)
        history = torch.cat([history.index_select(0, source_rows), new_token.view(-1, 1)], 1)
        if need_attention:  # the attention that produced each beam's new token
            step_attn = weights.mean(dim=1).index_select(0, source_rows)  # (n*k, S)
            attn_history = torch.cat([attn_history.index_select(0, source_rows),
                                      step_attn[:, None, :]], 1)
        tokens = new_token.view(-1)
        scores = cont_scores
        state = state.index_select(source_rows)
        step += 1
    return [hyps[:n_best] for hyps in finished]


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
               cont_scores: Tensor, new_beam: Tensor, new_token: Tensor, is_eos: Tensor
               ) -> list[tuple[int, int, float, list[bool]]]:
        """For the sentences with phrases: overwrite the new beams (``cont_scores``,
        ``new_beam``, ``new_token``, all (n, k)) with the allocation's, clear their
        ``is_eos``, and return the hypotheses they finish as (row, beam, log P, phrases
        met). ``candidates`` (n, k, V): each beam's score plus each token's log P."""
        rows = [r for r, a in enumerate(self.automata) if a is not None]
        if not rows:
            return []
        k, vocab = self.k, candidates.size(-1)
        device = candidates.device
        index = torch.tensor(rows, dtype=torch.long, device=device)
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
            for score, flat in zip(top_s[i], top_i[i]):
                if score != NEG_INF:
                    pool[(flat // vocab, flat % vocab)] = score
            for b in range(k):
                if best_score[i][b] != NEG_INF:
                    pool[(b, best_token[i][b])] = best_score[i][b]
        for i, b, t, score in zip(extra_row, extra_beam, extra_token, extra):
            if score != NEG_INF:
                pools[i][(b, t)] = score

        ends: list[tuple[int, int, float, list[bool]]] = []
        scores_out, beams_out, tokens_out = [], [], []
        for i, r in enumerate(rows):
            automaton, states = self.automata[r], self.states[r]
            ranked = []
            for (b, t), score in pools[i].items():
                state = states[b] if t == EOS_ID else automaton.advance(states[b], t)
                ranked.append(_Candidate(automaton.bank(state), score, b, t, state))
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
        cont_scores[index] = torch.tensor(scores_out, dtype=cont_scores.dtype, device=device)
        new_beam[index] = torch.tensor(beams_out, dtype=new_beam.dtype, device=device)
        new_token[index] = torch.tensor(tokens_out, dtype=new_token.dtype, device=device)
        is_eos[index] = False
        return ends

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
