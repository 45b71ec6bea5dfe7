"""Greedy and beam search over the model's key/value cache.

Search knows the model only through ``encode``, ``start_decoding`` and ``decode_step``. Both
searches are batched: sentences that are finished leave the batch (their rows are pruned from
the cache), so a long sentence does not keep short ones computing.

The search's vocabulary is not written here: the forced start, the length limits, a step's
rules, the choice of a step and the ranking of finished hypotheses are tfm.decoding.steps'
tensor functions, which the fixed-shape search of CUDA graphs (tfm.decoding.graphs) calls too;
the numbers behind them (the limit and "at the limit", the score and greedy search's length
penalty, when a sentence is done) are tfm.decoding.rules'.

Both take per-sentence constraints (tfm.decoding.constraints): a forced prefix (greedy and
beam), and phrases the translation must contain (beam search only), searched by dynamic beam
allocation (tfm.decoding.allocation). Without constraints, the search is exactly the
unconstrained one: the constrained work is done only for the sentences that have
constraints, beside it.

Each sentence's decoder starts from forced tokens (``start``: ``<s>`` alone unless the caller
gives more, e.g. ``<s>`` and a target-language token): they are fed to the decoder before the
search's first step, never scored and never part of the output (steps.prime). (A
constraint's prefix, by contrast, is output the user asked for: forced, scored and written
out.)
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from tfm.config import SearchOptions
from tfm.decoding.allocation import Banks
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.rules import (
    Hypothesis,
    at_limit,
    hypotheses_needed,
    hypothesis,
    keep,
    length_penalty_of,
    live_counted,
    score,
    sentence_done,
    worst_needed,
)
from tfm.decoding.steps import (
    Choice,
    decoder_start,
    expand,
    greedy_choice,
    limits,
    prime,
    sampled_choice,
    sentence_generators,
    step_log_probs,
    top_candidates,
)
from tfm.model import Transformer
from tfm.special_tokens import PAD_ID

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


@torch.inference_mode()
def greedy_search(model: Transformer, src: Tensor, options: SearchOptions,
                  constraints: Sequence[TargetConstraints | None] | None = None,
                  start: Tensor | None = None) -> list[list[Hypothesis]]:
    """The most probable next token at every step (with ``options.sampling_topk`` other than
    1: a token drawn, each sentence from its own seeded generator); one hypothesis per
    sentence. Of
    ``constraints`` (one per sentence, or None), greedy search takes only prefixes.
    ``start``: as for ``search``."""
    if constraints is not None and any(c is not None and c.phrases for c in constraints):
        raise ValueError("constraint phrases need beam search (beam 2 or more)")
    need_attention = options.attention
    prefix = _prefix_table(constraints, src.device)
    b = src.size(0)
    start = decoder_start(start, b, src.device)
    max_len = limits(model, src, options, start.size(1))
    memory, memory_mask = model.encode(src)
    tokens, state = prime(model, model.start_decoding(memory, memory_mask), start)
    alive = torch.arange(b, device=src.device)  # original row of each row still decoding
    outputs: list[list[int]] = [[] for _ in range(b)]
    attention: list[list[list[float]]] = [[] for _ in range(b)]
    log_probs = [0.0] * b
    sampling = options.sampling_topk != 1
    generators = sentence_generators(src, PAD_ID, options.sampling_seed) if sampling else []
    step = 0
    while alive.numel():
        logits, state, weights = model.decode_step(tokens, state, need_attention)
        logp = step_log_probs(logits, step, options.min_len, max_len[alive],
                              options.sampling_topk)
        if prefix is not None and step < prefix.size(1):
            _force(logp, prefix[alive, step])
        if sampling:
            best_logp, tokens, ended = sampled_choice(
                logp, [generators[i] for i in alive.tolist()], options.sampling_temp)
        else:
            best_logp, tokens, ended = greedy_choice(logp)
        done = ended.tolist()
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
            rows_left = torch.tensor([i for i, d in enumerate(done) if not d],
                                     dtype=torch.long, device=src.device)
            alive, tokens = alive[rows_left], tokens[rows_left]
            state = state.index_select(rows_left)
    forced, penalty = start.size(1), length_penalty_of(options)
    return [[hypothesis(out, lp, forced, penalty, attn if need_attention else None)]
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
    with phrases keeps its beam by dynamic beam allocation (allocation.Banks); its hypotheses may
    end only once they contain every phrase, except at the length limit, where those that
    could not are kept as well, ranked below those that did and flagged (constraints_met).

    ``start``: as for ``search``.

    Each step is five named steps of ``_BeamSearch``: expand (each beam's candidates),
    allocate (the new beams and the hypotheses that end), finish (keep those), stop (which
    sentences are done) and prune (those leave the batch).
    """
    return _BeamSearch(model, src, options, constraints, start).run()


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
        self.max_len = limits(model, src, options, self.forced)
        self.prefix = _prefix_table(constraints, device)
        self.banks = Banks(constraints, k) if constraints is not None and any(
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
        k, step = self.k, self.step
        max_len = self.max_len[self.alive].repeat_interleave(k)
        logp = step_log_probs(logits, step, self.o.min_len, max_len)  # (n*k, V)
        if self.prefix is not None and step < self.prefix.size(1):
            _force(logp, self.prefix[self.alive, step].repeat_interleave(k))
        if self.banks is not None:  # unmet constraints: no EOS before the limit
            self.banks.forbid_eos(logp, ~at_limit(max_len, step))
        return expand(self.scores, logp)

    def allocate(self, candidates: Tensor) -> Choice:
        """The new beams: each sentence's k best candidates that do not end in EOS; those of
        its k best that do end in EOS are finished hypotheses. Sentences with phrases choose
        by their banks instead (allocation.Banks.select)."""
        k = self.k
        top = top_candidates(candidates)
        choice = Choice(top.cont_scores, top.cont_beam, top.cont_token, [])
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
        best, best first (rules.keep)."""
        if not endings:
            return
        history = self.history.cpu()
        attention = self.attn_history.cpu() if self.o.attention else None
        penalty = length_penalty_of(self.o)
        for row, beam, log_prob, met in endings:
            beam_row = row * self.k + beam
            attn = attention[beam_row].tolist() if attention is not None else None
            keep(self.finished[self.alive_list[row]],
                 hypothesis(history[beam_row].tolist(), log_prob, self.forced, penalty, attn,
                            met), self.k)

    def stop(self, choice: Choice) -> list[int]:
        """The live rows that go on (rules.sentence_done decides)."""
        if self.banks is None:
            best = choice.scores[:, 0]
        else:
            # Only beams that have met their phrases could end now. Counting the others too
            # would keep most sentences decoding to their length limit: the beams that have
            # not spent probability on a phrase yet are the most probable ones.
            best = self.banks.could_end(choice.scores).max(dim=1).values
        best_live = score(best, live_counted(self.step, self.forced),
                          length_penalty_of(self.o)).tolist()
        last = at_limit(self.max_len[self.alive], self.step).tolist()
        return [row for row in range(len(last))
                if not sentence_done(worst_needed(self.finished[self.alive_list[row]],
                                                  self.needed), best_live[row], last[row],
                                     self.o.stop_early)]

    def prune(self, choice: Choice, keep_rows: list[int], weights: Tensor | None) -> None:
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
