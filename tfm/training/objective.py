"""The training objective: label-smoothed cross-entropy (Szegedy et al. 2016; the paper's
epsilon_ls = 0.1), summed over the real (non-padding) target positions."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from tfm.special_tokens import PAD_ID


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                        pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-padding positions.

    logits (..., V) and target (...) of the same leading shape, e.g. (B, T, V) and (B, T), or
    (N, V) and (N,) for real positions only. The smoothed target puts 1 - epsilon on the
    reference and spreads epsilon evenly over the whole vocabulary.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)
    keep = target != pad_id
    nll = -lprobs.gather(1, target[:, None]).squeeze(1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return loss[keep].sum(), nll[keep].sum()
