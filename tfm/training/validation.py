"""Validation during training: loss, perplexity and greedy BLEU on the validation split."""

from __future__ import annotations

import math
from typing import Any

import torch

from tfm.config import TrainConfig
from tfm.data.batching import collate, make_batches
from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import decode_batch, normalize_reference
from tfm.decoding.scoring import bleu
from tfm.decoding.search import greedy_search
from tfm.device import autocast
from tfm.model import Transformer
from tfm.training.objective import label_smoothed_loss


@torch.inference_mode()
def validate(model: Transformer, split: TokenizedSplit, tokenizer: Any, config: TrainConfig,
              device: torch.device, amp_dtype: torch.dtype | None) -> dict[str, Any]:
    """Validation loss and perplexity, and greedy BLEU against the reference text."""
    batches = make_batches(split.src_lengths, split.tgt_lengths, config.max_tokens,
                           shuffle=False)
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    hypotheses: dict[int, str] = {}
    for indices in batches:
        batch = collate(split, indices).to(device)
        with autocast(device, amp_dtype):
            logits = model(batch.src, batch.tgt_in, batch.tgt_mask)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                            config.label_smoothing)
            loss_sum += float(loss)
            nll_sum += float(nll)
            n_tokens += batch.n_tgt_tokens
            if config.valid_bleu and split.tgt_text is not None:
                hyps = greedy_search(model, batch.src)
                texts = decode_batch(tokenizer, [h[0].tokens for h in hyps])
                hypotheses.update(zip(indices.tolist(), texts))
    metrics: dict[str, Any] = {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
                               "ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    if hypotheses and split.tgt_text is not None:
        # References as the tokenizer normalises text (lowercased, for a lowercasing one).
        refs = [normalize_reference(tokenizer, t) for t in split.tgt_text]
        score = bleu([hypotheses[i] for i in range(len(split))], refs)
        metrics.update(bleu=score.score, bleu_signature=score.signature)
    return metrics
