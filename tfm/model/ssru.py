"""The SSRU, a decoder sub-layer in place of masked self-attention (Kim et al., WNGT 2019,
"From Research to Production and Back: Ludicrously Fast Neural Machine Translation"), as
Marian implements it (``dec-cell: ssru``, Firefox Translations' students):

    f_t = sigmoid(W_f x_t + b_f)                  the forget gate
    c_t = f_t * c_{t-1} + (1 - f_t) * W x_t       the cell, c_{-1} = 0
    o_t = relu(c_t)                               the sub-layer's output

wrapped, as every sub-layer is, in the residual connection and LayerNorm
(tfm.model.layers.residual). A decoding step reads and writes one vector per row (c_{t-1}),
where self-attention reads every earlier position: a step costs the same at every length.

Teacher forcing computes c over the whole target at once, as a scan: c_t = a_t c_{t-1} + b_t
with a = f, b = (1 - f) W x is a chain of affine maps, and composing them pairwise, twice as
many positions a round (Hillis and Steele), gives every c_t in log2(T) rounds of tensor
operations instead of T steps.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn


class SSRU(nn.Module):
    """The recurrence above over d_model-wide inputs. ``proj``: W and W_f in one matrix
    (2D, D), rows 0..D-1 W (no bias) and D..2D-1 W_f, one matrix product for both;
    ``forget_bias``: b_f. The cell is kept in float32 at least (``cell_dtype``) whatever the
    model's dtype: it sums over the whole target."""

    def __init__(self, d_model: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, 2 * d_model, bias=False)
        self.forget_bias = nn.Parameter(torch.zeros(d_model))

    def gates(self, x: Tensor) -> tuple[Tensor, Tensor]:
        """x (B, T, D) -> the forget gate f and the candidate W x, each (B, T, D) in
        ``cell_dtype``."""
        dtype = cell_dtype(x.dtype)
        candidate, forget = self.proj(x).to(dtype).chunk(2, dim=-1)
        return torch.sigmoid(forget + self.forget_bias.to(dtype)), candidate

    def forward(self, x: Tensor, real: Tensor | None = None, cell: Tensor | None = None
                ) -> tuple[Tensor, Tensor]:
        """x (B, T, D) -> o (B, T, D), each o_t from x_0..x_t only, and the last cell
        c_{T-1} (B, D) in ``cell_dtype``. ``cell`` (B, D): c_{-1}, the state a decoding step carries
        (None: zeros, the start of a target). ``real`` (B, T): False at padding, which leaves
        the cell as it was (f = 1), as padded keys get no attention."""
        f, candidate = self.gates(x)
        if real is not None:
            f = f.masked_fill(~real[..., None], 1.0)
        b = (1 - f) * candidate
        if cell is not None:  # c_0 = f_0 c_{-1} + b_0
            first = b[:, :1] + f[:, :1] * cell[:, None]
            b = first if b.size(1) == 1 else torch.cat([first, b[:, 1:]], dim=1)
        cells = scan(f, b)  # (B, T, D)
        return F.relu(cells).to(x.dtype), cells[:, -1]


def cell_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype an SSRU's cell is kept in for a model of ``dtype``: float32, or float64."""
    return torch.promote_types(dtype, torch.float32)


def scan(a: Tensor, b: Tensor) -> Tensor:
    """c_t = a_t c_{t-1} + b_t along dim 1 with c_{-1} = 0: a, b (B, T, D) -> c (B, T, D).

    After the round with ``shift``, (a_t, b_t) is the map from c_{t-shift*2} to c_t (from
    c_{-1} where t < shift*2, whose b is then c_t itself): each round composes a position's map
    with the one ``shift`` positions before it."""
    t = a.size(1)
    shift = 1
    while shift < t:
        b = torch.cat([b[:, :shift], b[:, shift:] + a[:, shift:] * b[:, :-shift]], dim=1)
        a = torch.cat([a[:, :shift], a[:, shift:] * a[:, :-shift]], dim=1)
        shift *= 2
    return b
