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


# Rows of bf16 logits made fp32 at a time: 32 x 10k fp32 values (1.3 MB) stay in a core's cache.
ROWS = 32


class _RowwiseSmoothedCrossEntropy(torch.autograd.Function):
    """The same loss and gradient for bf16 or fp16 logits on CPU, in fp32, a few rows at a time.

    Above, the fp32 copy of the (N, V) logits, the fp32 log-probabilities kept for the backward
    pass and the cast of their gradient back to bf16 each go through memory: in a bf16 training
    step on CPU, where the matrix products are faster than in fp32, these passes took a large
    share of the step (docs/BENCHMARKS.md). Here each block of rows is converted, reduced and
    dropped while it is in cache; the forward pass keeps only the log-sum-exp of each row, and
    the backward pass recomputes the softmax from the bf16 logits and writes the bf16 gradient
    directly:

        log p_ij = logit_ij - lse_i,   mean_j log p_ij = mean_j logit_ij - lse_i
    """

    @staticmethod
    def forward(ctx, logits: torch.Tensor, target: torch.Tensor, epsilon: float
                ) -> tuple[torch.Tensor, torch.Tensor]:
        n = logits.size(0)
        lse = logits.new_empty(n, dtype=torch.float32)  # log-sum-exp of each row
        mean = logits.new_empty(n, dtype=torch.float32)  # mean logit of each row
        for i in range(0, n, ROWS):
            x = logits[i:i + ROWS].float()  # (ROWS, V)
            lse[i:i + ROWS] = torch.logsumexp(x, dim=-1)
            mean[i:i + ROWS] = x.mean(dim=-1)
        nll = lse - logits.gather(1, target[:, None]).squeeze(1).float()
        loss = (1.0 - epsilon) * nll - epsilon * (mean - lse)
        ctx.save_for_backward(logits, target, lse)
        ctx.epsilon = epsilon
        ctx.mark_non_differentiable(nll)
        return loss, nll

    @staticmethod
    def backward(ctx, grad_loss: torch.Tensor, _grad_nll: torch.Tensor
                 ) -> tuple[torch.Tensor, None, None]:
        logits, target, lse = ctx.saved_tensors
        eps = ctx.epsilon
        grad = torch.empty_like(logits)
        at_target = torch.full_like(grad_loss, eps - 1.0)[:, None]  # (N, 1)
        for i in range(0, logits.size(0), ROWS):
            rows = slice(i, i + ROWS)
            p = logits[rows].float().sub_(lse[rows, None]).exp_()  # softmax, (ROWS, V)
            if eps:
                p.sub_(eps / logits.size(-1))
            p.scatter_add_(1, target[rows, None], at_target[rows])
            grad[rows] = p.mul_(grad_loss[rows, None])
        return grad, None, None


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
    rowwise = logits.device.type == "cpu" and logits.dtype in (torch.bfloat16, torch.float16)
    function = _RowwiseSmoothedCrossEntropy if rowwise else _SmoothedCrossEntropy
    loss, nll = function.apply(logits, target, float(epsilon))
    return loss.sum(), nll.sum()


def guided_alignment_loss(weights: torch.Tensor, targets: torch.Tensor,
                          floor: float = 1e-9) -> torch.Tensor:
    """Guided alignment's term (Garg et al., 2019): the summed cross-entropy
    -sum_t sum_s A[t, s] log p[t, s] of one head's cross-attention weights p (B, T, S) against
    the alignment targets A (B, T, S) (tfm.data.batching.alignment_targets: each aligned label
    a distribution over its aligned source positions, the others zero rows). Summed, as the
    translation loss is, so that the update divides both by its target tokens."""
    log_p = weights.float().clamp_min(floor).log()
    return -(targets * log_p).sum()
