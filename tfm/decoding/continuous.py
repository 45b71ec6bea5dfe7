"""Greedy and beam search over a stream of sentences: continuous (iteration-level) batching.

A server's sentences arrive one request at a time. Decoded in fixed batches, a batch runs as
many steps as its longest sentence needs, its rows emptying as shorter sentences end, while
the sentences that arrived meanwhile wait for the next batch. Here the batch is a running one:
before each decoding step, sentences waiting join it (encoded together, their rows appended to
the cache), and a sentence leaves it, answered, at the step it ends. The rows decode at
different positions (``DecoderState.lengths``).

Each sentence's hypotheses are those ``greedy_search`` or ``beam_search`` give it alone: its
keys sit in the cache where they would sit alone, the padding after them masked, with the same
length limits, the same per-step rules (``_step_log_probs``, applied row by row) and, for beam
search, the same candidates, finished hypotheses and stopping rule, each sentence at its own
step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from tfm.decoding.search import Hypothesis, beam_candidates, length_limits
from tfm.model import Transformer
from tfm.special_tokens import BOS_ID, EOS_ID, PAD_ID, UNK_ID


@dataclass
class StreamItem:
    """One sentence to translate: token ids ending with EOS, its search options (those of
    ``greedy_search`` and ``beam_search``; the beam size is the stream's), and a tag for the
    caller."""

    ids: list[int]
    max_len_a: float = 1.5
    max_len_b: int = 10
    min_len: int = 0
    tag: Any = None
    n_best: int = 1
    length_penalty: float = 1.0
    stop_early: bool = True


TakeFn = Callable[[int, bool], list[StreamItem]]  # (at most n, wait for one?) -> items
DoneFn = Callable[[StreamItem, Hypothesis], None]
BeamDoneFn = Callable[[StreamItem, list[Hypothesis]], None]


@torch.inference_mode()
def continuous_greedy(model: Transformer, take: TakeFn, done: DoneFn, max_rows: int,
                      device: torch.device | str = "cpu", min_join: int = 1) -> None:
    """Decode what ``take`` gives, ``max_rows`` sentences at most at a time, handing each
    sentence's hypothesis to ``done`` as soon as it ends; return once ``take`` gives nothing
    while no sentence is left to decode.

    ``take(n, wait)``: up to ``n`` more sentences; with ``wait`` (nothing is decoding) it
    blocks until there is one, and an empty list then means stop."""
    items: list[StreamItem] = []
    outputs: list[list[int]] = []
    log_probs: list[float] = []
    state = None
    tokens = torch.empty(0, dtype=torch.long, device=device)
    max_len = torch.empty(0, dtype=torch.long, device=device)
    min_len = torch.empty(0, dtype=torch.long, device=device)
    limit = model.config.max_positions
    while True:
        room = max_rows - len(items)
        new = take(room, not items) if room >= min_join or not items else []
        if not items and not new:
            return
        if new:
            joined = _encode(model, new, 1, device)
            state = joined if state is None else state.concat(joined)
            new_max, new_min = _joined_limits(new, limit, device)
            max_len, min_len = torch.cat([max_len, new_max]), torch.cat([min_len, new_min])
            tokens = torch.cat([tokens, torch.full((len(new),), BOS_ID, dtype=torch.long,
                                                   device=device)])
            items += new
            outputs += [[] for _ in new]
            log_probs += [0.0] * len(new)
        assert state is not None and state.lengths is not None
        steps = state.lengths  # the output position each row computes now
        logits, state, _ = model.decode_step(tokens, state)
        logp = _row_log_probs(logits, steps, min_len, max_len)
        best_logp, tokens = logp.max(dim=-1)
        finished = (tokens == EOS_ID).tolist()
        for row, (token, lp) in enumerate(zip(tokens.tolist(), best_logp.tolist())):
            log_probs[row] += lp
            if not finished[row]:
                outputs[row].append(token)
        if any(finished):
            for row in (r for r, end in enumerate(finished) if end):
                out, lp = outputs[row], log_probs[row]
                done(items[row], Hypothesis(out, lp / (len(out) + 1), lp))
            keep_rows = [r for r, end in enumerate(finished) if not end]
            keep = torch.tensor(keep_rows, dtype=torch.long, device=device)
            state = state.index_select(keep).trimmed()
            tokens, max_len, min_len = tokens[keep], max_len[keep], min_len[keep]
            items = [items[r] for r in keep_rows]
            outputs = [outputs[r] for r in keep_rows]
            log_probs = [log_probs[r] for r in keep_rows]
            if not items:
                state = None


def _joined_limits(items: list[StreamItem], limit: int, device: torch.device | str
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """(n,) most output positions and (n,) least output tokens of joining sentences."""
    lengths = torch.tensor([len(item.ids) for item in items], device=device)
    max_len = torch.cat([length_limits(lengths[i:i + 1], item.max_len_a, item.max_len_b, limit)
                         for i, item in enumerate(items)])
    return max_len, torch.tensor([item.min_len for item in items], device=device)


def _encode(model: Transformer, items: list[StreamItem], group: int,
            device: torch.device | str) -> Any:
    """The decoder state of joining sentences, their rows apart."""
    width = max(len(item.ids) for item in items)
    src = torch.full((len(items), width), PAD_ID, dtype=torch.long)
    for row, item in enumerate(items):
        src[row, : len(item.ids)] = torch.tensor(item.ids)
    return model.start_decoding(*model.encode(src.to(device)), group=group, rows_apart=True)


@torch.inference_mode()
def continuous_beam(model: Transformer, take: TakeFn, done: BeamDoneFn, max_rows: int,
                    beam: int, device: torch.device | str = "cpu") -> None:
    """``beam_search`` over a stream, as ``continuous_greedy`` is greedy search over one:
    ``max_rows`` sentences at most (``beam`` decoder rows each) decode at once, and each
    sentence's ``n_best`` hypotheses go to ``done`` as soon as it is finished."""
    k = beam
    inf = float("-inf")
    items: list[StreamItem] = []
    finished: list[list[Hypothesis]] = []
    state = None
    scores = torch.empty(0, k, device=device)  # (n, k) summed log P of each beam
    history = torch.empty(0, 0, dtype=torch.long, device=device)  # (n*k, capacity)
    tokens = torch.empty(0, dtype=torch.long, device=device)
    steps = torch.empty(0, dtype=torch.long, device=device)  # (n,) each sentence's step
    max_len = torch.empty(0, dtype=torch.long, device=device)
    min_len = torch.empty(0, dtype=torch.long, device=device)
    limit = model.config.max_positions
    while True:
        room = max_rows - len(items)
        new = take(room, not items) if room > 0 else []
        if not items and not new:
            return
        if new:
            joined = _encode(model, new, k, device)
            state = joined if state is None else state.concat(joined)
            new_max, new_min = _joined_limits(new, limit, device)
            max_len, min_len = torch.cat([max_len, new_max]), torch.cat([min_len, new_min])
            fresh = torch.full((len(new), k), inf, device=device)
            fresh[:, 0] = 0.0  # all beams start identical: expand only the first at step 0
            scores = torch.cat([scores, fresh])
            history = torch.cat([history, history.new_zeros(len(new) * k, history.size(1))])
            tokens = torch.cat([tokens, torch.full((len(new) * k,), BOS_ID, dtype=torch.long,
                                                   device=device)])
            steps = torch.cat([steps, torch.zeros(len(new), dtype=torch.long, device=device)])
            items += new
            finished += [[] for _ in new]
        assert state is not None
        n = len(items)
        logits, state, _ = model.decode_step(tokens, state)
        logp = _row_log_probs(logits, steps.repeat_interleave(k), min_len.repeat_interleave(k),
                              max_len.repeat_interleave(k))  # (n*k, V)
        # From here on, beam_search's step, each sentence at its own step.
        top_scores, top_beam, is_eos, cont_scores, new_beam, new_token = beam_candidates(
            scores, logp)
        step_list = steps.tolist()
        eos_rows, eos_cols = is_eos[:, :k].nonzero(as_tuple=True)
        if eos_rows.numel():
            hist_cpu = history.cpu()
            beams = top_beam.cpu()
            ends = top_scores.cpu()
            for row, col in zip(eos_rows.tolist(), eos_cols.tolist()):
                hyps = finished[row]
                beam_row = row * k + int(beams[row, col])
                out = hist_cpu[beam_row, : step_list[row]].tolist()
                lp = float(ends[row, col])
                penalty = items[row].length_penalty
                hyps.append(Hypothesis(out, lp / (len(out) + 1) ** penalty, lp))
                hyps.sort(key=lambda h: h.score, reverse=True)  # kept best first
                del hyps[k:]
        divisors = torch.tensor([(step + 2) ** item.length_penalty
                                 for step, item in zip(step_list, items)], device=device)
        best_live = (cont_scores[:, 0] / divisors).tolist()
        at_limit = (max_len == steps + 1).tolist()
        keep_rows = []
        for row, item in enumerate(items):
            hyps = finished[row]
            need = min(item.n_best, k) if item.stop_early else k
            if at_limit[row] or (len(hyps) >= need and hyps[need - 1].score >= best_live[row]):
                done(item, hyps[: item.n_best])
            else:
                keep_rows.append(row)
        keep = torch.arange(n, device=device)
        if len(keep_rows) < n:  # finished sentences leave the batch
            keep = torch.tensor(keep_rows, dtype=torch.long, device=device)
            cont_scores, new_beam, new_token = cont_scores[keep], new_beam[keep], new_token[keep]
            steps, max_len, min_len = steps[keep], max_len[keep], min_len[keep]
            items = [items[r] for r in keep_rows]
            finished = [finished[r] for r in keep_rows]
        if not items:
            state = None
            scores = scores[:0]
            history = history[:0]
            tokens = tokens[:0]
            continue
        source_rows = (keep[:, None] * k + new_beam).view(-1)
        history = history.index_select(0, source_rows)
        if int(steps.max()) >= history.size(1):  # room for 16 more tokens at a time
            history = torch.cat([history, history.new_zeros(history.size(0), 16)], dim=1)
        rows = torch.arange(history.size(0), device=device)
        history[rows, steps.repeat_interleave(k)] = new_token.view(-1)
        tokens = new_token.view(-1)
        scores = cont_scores
        state = state.index_select(source_rows).trimmed()
        steps = steps + 1


def _row_log_probs(logits: torch.Tensor, steps: torch.Tensor, min_len: torch.Tensor,
                   max_len: torch.Tensor) -> torch.Tensor:
    """``search._step_log_probs`` with each row at its own step and its own limits: padding,
    BOS and UNK never produced, EOS forbidden before ``min_len`` and forced at the row's last
    allowed position."""
    logp = torch.log_softmax(logits.float(), dim=-1)
    logp[:, [PAD_ID, UNK_ID, BOS_ID]] = float("-inf")
    last = max_len == steps + 1
    early = (steps < min_len) & ~last
    if early.any():
        logp[early, EOS_ID] = float("-inf")
    if last.any():
        eos = logp[last, EOS_ID].clone()
        logp[last] = float("-inf")
        logp[last, EOS_ID] = eos
    return logp
