"""MarianMT's weight layout beside tfm's, the one map between the two: read one way by the
export (tfm.interop.marian) and the other by the import (tfm.interop.marian_import)."""

from __future__ import annotations

from collections.abc import Iterator

import torch
from torch import Tensor

from tfm.config import ModelConfig


def residual_permutation(d_model: int) -> Tensor:
    """Index ``perm`` such that ``x[..., perm]`` turns tfm's residual layout into Marian's:
    tfm's positional table has sin/cos interleaved (dimensions 0, 2, 4, ... are sines), Marian's
    has all the sines first; both use frequency 10000^(-2i/d) for the i-th pair."""
    return torch.cat([torch.arange(0, d_model, 2), torch.arange(1, d_model, 2)])


def layer_names(c: ModelConfig) -> Iterator[tuple[str, str, bool, bool]]:
    """Every Linear and LayerNorm of the encoder and decoder layers: its name in tfm, its name
    in MarianMTModel, whether it reads the residual stream (its weight's columns are on the
    residual axis) and whether it writes it (its rows and bias are). The one map between the
    two, read one way by the export and the other by the import (marian_import)."""
    for side, n in (("encoder", c.encoder_layers), ("decoder", c.decoder_layers)):
        for i in range(n):
            tfm, marian = f"{side}_layers.{i}", f"model.{side}.layers.{i}"
            blocks = ["self_attn", "encoder_attn"] if side == "decoder" else ["self_attn"]
            for block in blocks:
                for proj in ("q_proj", "k_proj", "v_proj"):
                    yield f"{tfm}.{block}.{proj}", f"{marian}.{block}.{proj}", True, False
                yield f"{tfm}.{block}.out_proj", f"{marian}.{block}.out_proj", False, True
                yield f"{tfm}.{block}_layer_norm", f"{marian}.{block}_layer_norm", False, True
            yield f"{tfm}.ffn.fc1", f"{marian}.fc1", True, False
            yield f"{tfm}.ffn.fc2", f"{marian}.fc2", False, True
            yield f"{tfm}.final_layer_norm", f"{marian}.final_layer_norm", False, True


def permuted(weight: Tensor, bias: Tensor, perm: Tensor, reads: bool, writes: bool
             ) -> tuple[Tensor, Tensor]:
    """A layer's weight and bias with the residual axis reordered by ``perm`` where the layer
    reads it (the weight's columns) and where it writes it (its rows and bias; a LayerNorm's
    weight is a row)."""
    if reads:
        weight = weight[:, perm]
    if writes:
        weight, bias = weight[perm], bias[perm]
    return weight, bias
