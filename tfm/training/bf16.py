"""bf16 training on CPUs that compute bf16 natively: a bf16 copy of the model runs the steps,
the fp32 model keeps the master weights that the optimizer updates (fairseq's ``--bf16``).

bf16 autocast speeds up only the matrix products: it casts every weight again at each forward,
and each bf16 sub-layer output added to the fp32 residual stream turns it back into fp32, so the
next product casts its input again, while LayerNorm, dropout and the residual sums stay in fp32.
Here the weights, activations and residual stream are bf16 throughout, cast once per step.
What stays fp32: the log-softmax and the loss (tfm.training.objective computes them in fp32
whatever the logits' dtype), the attention inside PyTorch's fused CPU kernel (see
tfm.model.attention), and everything the optimizer sees. An update in bf16 weights would be
lost below their 8 bits of mantissa; on the fp32 masters it accumulates, and the bf16 copy is
rounded from them after every step. bf16 has fp32's exponent range, so no loss scaling is
needed.

The fp32 model is the one saved, validated against its best and resumed: checkpoints, the
optimizer state and resume are those of an fp32 run, and a run may change its precision when
resumed.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

# A bf16 run on a CPU pads each batch's source and target widths up to a multiple of this.
# oneDNN compiles a kernel for each bf16 matrix-product shape it meets and keeps the last 1,024;
# batches of every width made more shapes than that, so kernels were compiled again all along
# the run, its memory kept growing and its steps slowed down. Even widths make fewer shapes,
# whose kernels stay cached. The extra column is padding, masked and unlabelled: it changes no
# loss (docs/BENCHMARKS.md, "Training in bf16 on a CPU with AMX").
BATCH_WIDTH_MULTIPLE = 2


class Bf16Copy:
    """``model``, the bf16 copy of ``master`` (an fp32 model, tied weights tied again), and
    the transfers between them: gradients to the masters, weights back from them."""

    def __init__(self, master: nn.Module) -> None:
        self.master = master
        self.model = copy.deepcopy(master).to(torch.bfloat16)
        self._master_params = list(master.parameters())  # shared weights once, same order
        self._params = list(self.model.parameters())

    @torch.no_grad()
    def gradients_to_master(self) -> None:
        """The bf16 gradients of the step, in fp32, as the masters' gradients; the bf16 ones
        are dropped (the next backward starts from none)."""
        for master, p in zip(self._master_params, self._params):
            master.grad = None if p.grad is None else p.grad.float()
            p.grad = None

    @torch.no_grad()
    def weights_from_master(self) -> None:
        """The bf16 weights rounded from the masters (after an update, a resume or a load)."""
        torch._foreach_copy_(self._params, self._master_params)

    def zero_grad(self) -> None:
        self.model.zero_grad(set_to_none=True)
