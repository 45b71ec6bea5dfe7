"""The Transformer model: attention and masks, layers, and the encoder-decoder."""

from tfm.model.attention import (
    MultiHeadAttention,
    attention,
    causal_mask,
    decoder_self_attention_mask,
    padding_mask,
)
from tfm.model.layers import LayerCache, sinusoidal_positions
from tfm.model.transformer import (
    DecoderState,
    FixedDecoderState,
    Transformer,
    count_parameters,
)

__all__ = [
    "DecoderState",
    "FixedDecoderState",
    "LayerCache",
    "MultiHeadAttention",
    "Transformer",
    "attention",
    "causal_mask",
    "count_parameters",
    "decoder_self_attention_mask",
    "padding_mask",
    "sinusoidal_positions",
]
