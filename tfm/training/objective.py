"""The training objective: label-smoothed cross-entropy (Szegedy et al. 2016; the paper's
epsilon_ls = 0.1), summed over the real (non-padding) target positions.

The loss is one autograd function with a hand-written gradient. Written with ``log_softmax``,
``gather`` and ``mean``, autograd keeps the (N, V) log-probabilities and builds three more
(N, V) tensors in the backward pass (a zero-filled one for the gather, an expanded and divided
one for the mean, the log-softmax gradient): with a 10k vocabulary that was a third of a small
model's training step on CPU. The gradient in closed form needs one (N, V) tensor beside
the log-probabilities:

    d loss_i / d logits_ij = softmax_ij - (1 - eps) [j = target_i] - eps / V
"""

from __future__ import annotations

import torch

from tfm.special_tokens import PAD_ID


def _at_least_fp32(x: torch.Tensor) -> torch.Tensor:
    return x if x.dtype == torch.float64 else x.float()


class _SmoothedCrossEntropy(torch.autograd.Function):
    """Per-row label-smoothed cross-entropy and NLL of logits (N, V) against target (N,),
    computed in fp32 (or fp64) whatever the logits' dtype. Only the first output has a gradient."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        lprobs = torch.log_softmax(_at_least_fp32(logits), dim=-1)  # (N, V)
        nll = -lprobs.gather(1, target[:, None]).squeeze(1)
        loss = (1.0 - epsilon) * nll - epsilon * lprobs.mean(dim=-1)
        ctx.save_for_backward(lprobs, target)
        ctx.epsilon = epsilon
        ctx.dtype = logits.dtype
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor
                 ) -> tuple[torch.Tensor, None, None]:
        lprobs, target = ctx.saved_tensors
        eps = ctx.epsilon
        grad = lprobs.exp()  # softmax
        if eps:
            grad.sub_(eps / lprobs.size(-1))
        grad.scatter_add_(1, target[:, None],
                          torch.full_like(grad_loss, eps - 1.0)[:, None])
        grad.mul_(grad_loss[:, None])
        return grad.to(ctx.dtype), None, None


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                        pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-padding positions.

    logits (..., V) and target (...) of the same leading shape, e.g. (B, T, V) and (B, T), or
    (N, V) and (N,) for real positions only. The smoothed target puts 1 - epsilon on the
    reference and spreads epsilon evenly over the whole vocabulary.
    """
    logits = logits.reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)
    keep = target != pad_id
    if not bool(keep.all()):  # training passes real positions only; others may not
        logits, target = logits[keep], target[keep]
    loss, nll = _SmoothedCrossEntropy.apply(logits, target, float(epsilon))
    return loss.sum(), nll.sum()
