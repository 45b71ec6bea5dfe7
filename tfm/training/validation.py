"""Validation during training: loss, perplexity and greedy BLEU on the validation split."""

from __future__ import annotations

import math
from typing import Any

import torch

from tfm.config import SearchOptions, TrainConfig
from tfm.data.batching import collate, make_batches
from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import decode_batch, normalize_reference
from tfm.decoding.scoring import bleu, score
from tfm.decoding.search import greedy_search
from tfm.device import autocast
from tfm.model import Transformer
from tfm.training.objective import label_smoothed_loss

# Validation BLEU decodes greedily, with the length limits a new model's directory starts with.
_GREEDY = SearchOptions(beam=1)


@torch.inference_mode()
def validate(model: Transformer, split: TokenizedSplit, tokenizer: Any, config: TrainConfig,
             device: torch.device, amp_dtype: torch.dtype | None,
             directions: list[str] | None = None,
             starts: list[list[int]] | None = None) -> dict[str, Any]:
    """Validation loss and perplexity, and greedy BLEU and chrF against the reference text.

    With several ``directions`` (the dataset's, which the split's rows index), BLEU and chrF
    of each under ``directions``, and ``bleu`` their macro-average (each direction counts
    alike, whatever its size): the score the best checkpoint and --patience go by. With one,
    ``bleu`` is its corpus BLEU. ``starts``: each direction's forced decoder start (a model of
    language codes), fed in the loss and in the search alike."""
    batches = make_batches(split.src_lengths, split.tgt_lengths, config.max_tokens,
                           shuffle=False)
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    hypotheses: dict[int, str] = {}
    for indices in batches:
        batch = collate(split, indices, starts=starts).to(device)
        with autocast(device, amp_dtype):
            logits = model(batch.src, batch.tgt_in, batch.tgt_mask)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                            config.label_smoothing)
            loss_sum += float(loss)
            nll_sum += float(nll)
            n_tokens += batch.n_tgt_tokens
            if config.valid_bleu and split.tgt_text is not None:
                start = None if starts is None else torch.tensor(
                    [starts[d] for d in split.directions[indices]], device=device)
                hyps = greedy_search(model, batch.src, _GREEDY, start=start)
                texts = decode_batch(tokenizer, [h[0].tokens for h in hyps])
                hypotheses.update(zip(indices.tolist(), texts))
    metrics: dict[str, Any] = {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
                               "ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    if hypotheses and split.tgt_text is not None:
        metrics.update(_scores(split, tokenizer, hypotheses, directions or ["?"]))
    return metrics


def _scores(split: TokenizedSplit, tokenizer: Any, hypotheses: dict[int, str],
            directions: list[str]) -> dict[str, Any]:
    """BLEU (and chrF) of the hypotheses, per direction where the split has several."""
    # References as the tokenizer normalises text (lowercased, for a lowercasing one).
    refs = [normalize_reference(tokenizer, t) for t in split.tgt_text or []]
    rows = split.directions
    present = sorted(set(rows.tolist()))
    if len(present) == 1:  # one direction: the corpus BLEU of the whole split
        whole = bleu([hypotheses[i] for i in range(len(split))], refs)
        return {"bleu": whole.score, "bleu_signature": whole.signature}
    each: dict[str, dict[str, float]] = {}
    signature = ""
    for d in present:
        mine = [i for i in range(len(split)) if rows[i] == d]
        hyps, their_refs = [hypotheses[i] for i in mine], [refs[i] for i in mine]
        b = bleu(hyps, their_refs)
        signature = b.signature
        each[directions[d]] = {"bleu": b.score, "chrf": score("chrf", hyps, their_refs).score}
    macro = sum(v["bleu"] for v in each.values()) / len(each)
    return {"bleu": macro, "bleu_signature": f"macro-average of {len(each)} directions; "
            f"each {signature}", "directions": each}
