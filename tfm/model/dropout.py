"""Dropout that costs half of torch's on CPU.

torch draws a CPU dropout mask with ``bernoulli_``, one float draw per element; thresholding
31-bit random integers draws the same mask distribution in about half the time. Dropout on the
embeddings, every sub-layer and the FFN activations makes that a visible share of a small
model's training step (docs/BENCHMARKS.md). On other devices torch's fused kernel is used as
it is.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class _MaskedScale(torch.autograd.Function):
    """x * keep / (1 - p), with keep drawn once in the forward pass and reused backward."""

    @staticmethod
    def forward(ctx, x: Tensor, p: float) -> Tensor:
        # random_() on int32 draws uniformly from [0, 2^31): keep with probability 1 - p.
        keep = torch.empty(x.shape, dtype=torch.int32).random_() >= int(p * 2**31)
        ctx.save_for_backward(keep)
        ctx.scale = 1.0 / (1.0 - p)
        return x * keep * ctx.scale

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        (keep,) = ctx.saved_tensors
        return grad * keep * ctx.scale, None


def dropout(x: Tensor, p: float, training: bool) -> Tensor:
    """F.dropout(x, p, training), with a cheaper mask on CPU."""
    if not training or p == 0.0:
        return x
    if x.device.type != "cpu" or p >= 1.0:
        return F.dropout(x, p, training)
    return _MaskedScale.apply(x, p)


class Dropout(nn.Module):
    """nn.Dropout with the CPU mask of ``dropout``."""

    def __init__(self, p: float) -> None:
        super().__init__()
        self.p = p

    def forward(self, x: Tensor) -> Tensor:
        return dropout(x, self.p, self.training)

    def extra_repr(self) -> str:
        return f"p={self.p}"
