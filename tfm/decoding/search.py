"""Greedy and beam search over the model's key/value cache.

Search knows the model only through ``encode``, ``start_decoding`` and ``decode_step``. Both
searches are batched: sentences that are finished leave the batch (their rows are pruned from
the cache), so a long sentence does not keep short ones computing.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from tfm.data.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID
from tfm.model import Transformer


@dataclass
class Hypothesis:
    tokens: list[int]  # without BOS/EOS
    score: float  # sum of log-probabilities (EOS included) / length ** length_penalty
    log_prob: float  # sum of log-probabilities, EOS included
    # With need_attention: for each output token, the last decoder layer's cross-attention
    # over the (padded) source positions, averaged over heads, at the step that produced it.
    attention: list[list[float]] | None = None


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
                  min_len: int = 0, need_attention: bool = False) -> list[list[Hypothesis]]:
    """The most probable next token at every step; one hypothesis per sentence."""
    pad = PAD_ID
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
                ) -> list[list[Hypothesis]]:
    """Beam search; for each sentence the ``n_best`` finished hypotheses, best first.

    Scores are length-normalised: log P / length ** length_penalty, the length counting EOS.
    A sentence is finished at its length limit, or when it has ``n_best`` finished hypotheses
    (``beam`` of them without ``stop_early``) and no live beam would beat the worst of those
    if it ended now. With one best asked for, ``stop_early`` ends a sentence as soon as its
    best hypothesis has ended, as OpenNMT-py and CTranslate2 do; without it, the search waits
    for ``beam`` finished hypotheses, as fairseq does: more steps, the same best hypothesis
    when there is no length normalisation, and with it sometimes a longer, better one.
    """
    pad = PAD_ID
    device = src.device
    b = src.size(0)
    k = beam
    need = min(n_best, k) if stop_early else k  # finished hypotheses needed before stopping
    max_len_all = max_lengths(src, pad, max_len_a, max_len_b, model.config.max_positions)
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

        # A sentence is done at its length limit (every live beam was just forced to end), or
        # once it has the n_best finished hypotheses it returns and its best live beam, ended
        # now, would score no better than the worst of them. (log P only falls as a hypothesis
        # grows; with a length penalty this is the usual heuristic, as in Hugging Face's.)
        best_live = (cont_scores[:, 0] / (step + 2) ** length_penalty).tolist()
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
