"""Embeddings, the position-wise feed-forward network, and the encoder and decoder layers.

Every sub-layer is wrapped in a residual connection and LayerNorm (paper section 3.1):
post-norm ``LayerNorm(x + Dropout(Sublayer(x)))`` as in the paper, or pre-norm
``x + Dropout(Sublayer(LayerNorm(x)))`` when ``norm_first``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfm.config import ACTIVATION_NAMES, ModelConfig
from tfm.model.attention import MultiHeadAttention
from tfm.model.dropout import Dropout, dropout
from tfm.model.ssru import SSRU


def sinusoidal_positions(length: int, d_model: int) -> Tensor:
    """(length, d_model) table: PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...)."""
    position = torch.arange(length, dtype=torch.float64)[:, None]  # (L, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float64)  # (D/2,)
    angle = position / torch.pow(10000.0, two_i / d_model)  # (L, D/2)
    table = torch.zeros(length, d_model, dtype=torch.float64)
    table[:, 0::2] = torch.sin(angle)
    table[:, 1::2] = torch.cos(angle[:, : d_model // 2])
    return table.float()


# Where fairseq's positions start: its padding id (1) + 1; row 1 of its table is the padding's.
FAIRSEQ_OFFSET = 2


def fairseq_positions(length: int, d_model: int) -> Tensor:
    """(length, d_model) fairseq's sinusoidal table (NLLB-200, M2M100) for positions 0..length-1
    of tfm's: fairseq's rows FAIRSEQ_OFFSET onwards. Each row is sin(p * f_j) for the j <
    half_dim, then cos(p * f_j), f_j = exp(-j * ln(10000) / (half_dim - 1)), computed in
    float32 as fairseq and transformers compute it (the same numbers to the last bit: at a
    position in the hundreds a float64 table differs in the fourth decimal)."""
    half = d_model // 2
    step = math.log(10000) / (half - 1)
    freq = torch.exp(torch.arange(half, dtype=torch.int64).float() * -step)  # (D/2,)
    position = torch.arange(length + FAIRSEQ_OFFSET, dtype=torch.int64).float()[:, None]
    angle = position * freq[None, :]  # (L + 2, D/2)
    table = torch.cat([torch.sin(angle), torch.cos(angle)], dim=1)
    if d_model % 2:
        table = torch.cat([table, torch.zeros(table.size(0), 1)], dim=1)
    return table[FAIRSEQ_OFFSET:].contiguous()


def position_table(config: ModelConfig) -> Tensor:
    """(max_positions, d_model) the positional encoding a model of ``config`` adds
    (ModelConfig.positions): what Embeddings holds and the exports write."""
    make = fairseq_positions if config.positions == "fairseq" else sinusoidal_positions
    return make(config.max_positions, config.d_model)


class Embeddings(nn.Module):
    """Token embedding scaled by sqrt(d_model) plus sinusoidal positional encoding, then dropout."""

    def __init__(self, token_embedding: nn.Embedding, positions: Tensor, dropout: float) -> None:
        super().__init__()
        self.token = token_embedding
        self.scale = math.sqrt(token_embedding.embedding_dim)
        # (max_positions, D) position_table's: not a parameter and not saved, a function of the
        # config alone.
        self.register_buffer("positions", positions, persistent=False)
        self.dropout = Dropout(dropout)

    def forward(self, tokens: Tensor, offset: int = 0) -> Tensor:
        """(B, L) ids -> (B, L, D); ``offset`` is the position of the first token (decoding)."""
        length = tokens.size(1)
        if offset + length > self.positions.size(0):
            raise ValueError(
                f"sequence of {offset + length} positions exceeds max_positions "
                f"{self.positions.size(0)}"
            )
        x = self.token(tokens) * self.scale + self.positions[offset : offset + length]
        return self.dropout(x)

    def at(self, tokens: Tensor, position: Tensor) -> Tensor:
        """(B, 1) ids at ``position`` (1,), a tensor -> (B, 1, D): ``forward`` with the offset
        read on the device (a CUDA graph replays it at every position)."""
        x = self.token(tokens) * self.scale + self.positions.index_select(0, position)
        return self.dropout(x)


# The FFN's activation functions (ModelConfig.activation): the paper's ReLU, and those of
# imported MarianMT models: swish (= SiLU, x * sigmoid(x)) and GELU (exact, with erf: what
# transformers' "gelu" computes).
ACTIVATIONS = dict(zip(ACTIVATION_NAMES, (F.relu, F.silu, F.gelu)))


class FeedForward(nn.Module):
    """FFN(x) = act(x W1 + b1) W2 + b2, applied to each position separately; act is ReLU
    (max(0, x)) in the paper."""

    def __init__(self, d_model: int, d_ff: int, activation_dropout: float = 0.0,
                 activation: str = "relu") -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_model, d_ff)
        self.fc2 = nn.Linear(d_ff, d_model)
        self.activation_dropout = activation_dropout
        self.activation = ACTIVATIONS[activation]

    def forward(self, x: Tensor) -> Tensor:
        h = self.activation(self.fc1(x))
        if self.activation_dropout > 0.0:
            h = dropout(h, self.activation_dropout, self.training)
        return self.fc2(h)


class EncoderLayer(nn.Module):
    """Self-attention, then the FFN; each in residual + LayerNorm. Without
    ``attention_residual`` (ModelConfig.drop_residual_layer), the self-attention's output
    replaces its input instead of being added to it."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float,
                 attention_dropout: float, activation_dropout: float, norm_first: bool,
                 activation: str = "relu", attention_residual: bool = True) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first
        self.attention_residual = attention_residual

    def forward(self, x: Tensor, src_mask: Tensor) -> Tensor:
        """x (B, S, D), src_mask (B, 1, 1, S) -> (B, S, D)."""
        h = sublayer_input(x, self.self_attn_layer_norm, self.norm_first)
        x = residual(x, self.self_attention(h, src_mask), self.self_attn_layer_norm,
                     self.dropout, self.norm_first, self.attention_residual)
        h = sublayer_input(x, self.final_layer_norm, self.norm_first)
        return residual(x, self.ffn(h), self.final_layer_norm, self.dropout, self.norm_first)

    def self_attention(self, h: Tensor, src_mask: Tensor) -> Tensor:
        """Every source position attends to every real source position: (B, S, D)."""
        return self.self_attn(h, self.self_attn.project_kv(h), src_mask)[0]


@dataclass
class LayerCache:
    """One decoder layer's keys and values, each (rows, H, L, Dh).

    ``self_k``/``self_v`` (B rows) grow by one position per decoding step; ``cross_k``/``cross_v``
    are the projected encoder output, computed once per sentence: B / group rows when ``group``
    consecutive decoder rows (the beams of a sentence) share one sentence (see DecoderState).
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor

    def index_select(self, index: Tensor, memory_index: Tensor | None = None) -> LayerCache:
        """Rows ``index`` of the self-attention cache and rows ``memory_index`` (default:
        ``index``) of the cross-attention keys and values."""
        memory_index = index if memory_index is None else memory_index
        return LayerCache(self.self_k.index_select(0, index), self.self_v.index_select(0, index),
                          self.cross_k.index_select(0, memory_index),
                          self.cross_v.index_select(0, memory_index))


@dataclass
class FixedLayerCache:
    """One decoder layer's keys and values in buffers of a fixed shape, written in place: what a
    CUDA graph replays (tfm.decoding.graphs), since a captured step may neither grow a tensor
    nor read a number back to the host.

    ``self_k``/``self_v`` (B, H, L, Dh) hold L positions, of which the first ``position + 1``
    are real once the step at ``position`` has written its own; ``position`` (1,) is a tensor,
    advanced by the search. ``cross_k``/``cross_v`` as in LayerCache.
    """

    self_k: Tensor
    self_v: Tensor
    cross_k: Tensor
    cross_v: Tensor
    position: Tensor

    def attend(self, attn: MultiHeadAttention, h: Tensor, k: Tensor, v: Tensor) -> Tensor:
        """h (B, 1, D) at ``position``, its keys/values k, v (B, H, 1, Dh): written into the
        buffers, then h attends to every position up to its own (a mask hides the later,
        unwritten ones) -> (B, 1, D)."""
        self.self_k.index_copy_(2, self.position, k)
        self.self_v.index_copy_(2, self.position, v)
        length = self.self_k.size(2)
        written = torch.arange(length, device=h.device) <= self.position  # (L,)
        return attn(h, (self.self_k, self.self_v), written[None, None, None, :])[0]

    def reorder(self, index: Tensor) -> None:
        """Rows ``index`` of the self-attention buffers, in place (beam search's new beams)."""
        self.self_k.copy_(self.self_k.index_select(0, index))
        self.self_v.copy_(self.self_v.index_select(0, index))

    def clear(self) -> None:
        """No position written yet: the self-attention buffers zeroed."""
        self.self_k.zero_()
        self.self_v.zero_()

    def tensors(self) -> tuple[Tensor, ...]:
        return self.self_k, self.self_v, self.cross_k, self.cross_v


@dataclass
class SsruCache:
    """An SSRU decoder layer's state: ``cell`` (B, D) in tfm.model.ssru.cell_dtype, the
    SSRU's c_{t-1} (zeros before the first step), where LayerCache keeps the keys and values
    of every position; ``cross_k``/``cross_v`` as in LayerCache."""

    cell: Tensor
    cross_k: Tensor
    cross_v: Tensor

    def index_select(self, index: Tensor, memory_index: Tensor | None = None) -> SsruCache:
        """Rows ``index`` of the cell and rows ``memory_index`` (default: ``index``) of the
        cross-attention keys and values."""
        memory_index = index if memory_index is None else memory_index
        return SsruCache(self.cell.index_select(0, index),
                         self.cross_k.index_select(0, memory_index),
                         self.cross_v.index_select(0, memory_index))


@dataclass
class FixedSsruCache:
    """SsruCache in buffers written in place (as FixedLayerCache, for CUDA graphs): the cell
    (B, D) holds c_t once the step at position t has run."""

    cell: Tensor
    cross_k: Tensor
    cross_v: Tensor

    def reorder(self, index: Tensor) -> None:
        """Rows ``index`` of the cell, in place (beam search's new beams)."""
        self.cell.copy_(self.cell.index_select(0, index))

    def clear(self) -> None:
        """Before the first step: c_{-1} = 0."""
        self.cell.zero_()

    def tensors(self) -> tuple[Tensor, ...]:
        return self.cell, self.cross_k, self.cross_v


# What a decoder layer carries from one decoding step to the next.
Cache = LayerCache | FixedLayerCache | SsruCache | FixedSsruCache


class DecoderLayer(nn.Module):
    """Masked self-attention, cross-attention over the encoder output, then the FFN.

    ``self_attention`` "ssru": an SSRU (tfm.model.ssru) in place of the masked self-attention,
    ``ssru`` where ``self_attn`` would be; ``self_attn_layer_norm`` is the LayerNorm of the
    first sub-layer either way."""

    def __init__(self, d_model: int, n_heads: int, d_ff: int, dropout: float,
                 attention_dropout: float, activation_dropout: float, norm_first: bool,
                 activation: str = "relu", self_attention: str = "attention") -> None:
        super().__init__()
        if self_attention == "ssru":
            self.ssru: SSRU | None = SSRU(d_model)
        else:
            self.ssru = None
            self.self_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.self_attn_layer_norm = nn.LayerNorm(d_model)
        self.encoder_attn = MultiHeadAttention(d_model, n_heads, attention_dropout)
        self.encoder_attn_layer_norm = nn.LayerNorm(d_model)
        self.ffn = FeedForward(d_model, d_ff, activation_dropout, activation)
        self.final_layer_norm = nn.LayerNorm(d_model)
        self.dropout = Dropout(dropout)
        self.norm_first = norm_first

    def forward(
        self,
        x: Tensor,
        cross_kv: tuple[Tensor, Tensor],
        self_mask: Tensor | None,
        src_mask: Tensor,
        cache: Cache | None = None,
        need_weights: bool = False,
        group: int = 1,
    ) -> tuple[Tensor, Cache | None, Tensor | None]:
        """x (B, T, D) -> (B, T, D), the extended cache, and cross-attention weights (B, H, T, S).

        Without a cache, x is the whole target prefix and ``self_mask`` (B, 1, T, T) hides later
        positions (an SSRU layer's: (B, T), False at padding; the recurrence sees no later
        position). With a cache, x holds only the newest position(s): their keys and values are
        appended to the cache, and they may attend to every cached position, so no mask is needed
        (an SSRU layer's cache holds its cell instead, read and replaced).

        ``group`` > 1: each run of ``group`` consecutive rows of x (the beams of one sentence)
        shares one row of ``cross_kv`` and ``src_mask`` (B / group rows).
        """
        h = sublayer_input(x, self.self_attn_layer_norm, self.norm_first)
        h, new_cache = self.self_attention(h, self_mask, cache)
        x = residual(x, h, self.self_attn_layer_norm, self.dropout, self.norm_first)
        h = sublayer_input(x, self.encoder_attn_layer_norm, self.norm_first)
        h, weights = self.cross_attention(h, cross_kv, src_mask, need_weights, group)
        x = residual(x, h, self.encoder_attn_layer_norm, self.dropout, self.norm_first)
        h = sublayer_input(x, self.final_layer_norm, self.norm_first)
        x = residual(x, self.ffn(h), self.final_layer_norm, self.dropout, self.norm_first)
        return x, new_cache, weights

    def self_attention(self, h: Tensor, self_mask: Tensor | None, cache: Cache | None
                       ) -> tuple[Tensor, Cache | None]:
        """Masked self-attention over the target prefix: h (B, T, D) -> (B, T, D), and the
        cache extended by h's keys and values (None without a cache; a FixedLayerCache is
        written in place and returned as it is). An SSRU layer: ``recurrence``."""
        if self.ssru is not None:
            return self.recurrence(h, self_mask, cache)
        k, v = self.self_attn.project_kv(h)  # (B, H, T, Dh)
        if cache is None:
            return self.self_attn(h, (k, v), self_mask)[0], None
        if isinstance(cache, FixedLayerCache):
            return cache.attend(self.self_attn, h, k, v), cache
        k = torch.cat([cache.self_k, k], dim=2)  # (B, H, L + T, Dh)
        v = torch.cat([cache.self_v, v], dim=2)
        # The newest positions may attend to every cached one: no mask.
        out = self.self_attn(h, (k, v), None)[0]
        return out, LayerCache(k, v, cache.cross_k, cache.cross_v)

    def recurrence(self, h: Tensor, real: Tensor | None, cache: Cache | None
                   ) -> tuple[Tensor, Cache | None]:
        """The SSRU over h (B, T, D) -> (B, T, D): from c_{-1} = 0 over the whole target
        without a cache (``real`` (B, T): its non-padding positions), else from the cache's
        cell, the new cell in a new SsruCache (a FixedSsruCache: written in place)."""
        assert self.ssru is not None
        if cache is None:
            return self.ssru(h, real)[0], None
        assert isinstance(cache, (SsruCache, FixedSsruCache))
        out, cell = self.ssru(h, None, cache.cell)
        if isinstance(cache, FixedSsruCache):
            cache.cell.copy_(cell)
            return out, cache
        return out, SsruCache(cell, cache.cross_k, cache.cross_v)

    def cross_attention(self, h: Tensor, cross_kv: tuple[Tensor, Tensor], src_mask: Tensor,
                        need_weights: bool, group: int) -> tuple[Tensor, Tensor | None]:
        """h (B, T, D) attends to the encoder output -> (B, T, D), and the weights
        (B, H, T, S) when ``need_weights``."""
        if group == 1:
            return self.encoder_attn(h, cross_kv, src_mask, need_weights)
        # The group's rows become query positions of one sentence: (B/g, g*T, D). Each
        # query attends on its own, so this is the same attention without g copies of the
        # sentence's keys and values.
        b, t, d = h.shape
        out, weights = self.encoder_attn(h.reshape(b // group, group * t, d), cross_kv,
                                         src_mask, need_weights)
        if weights is not None:  # (B/g, H, g*T, S) -> (B, H, T, S)
            n, heads, _, s = weights.shape
            weights = weights.view(n, heads, group, t, s).transpose(1, 2).reshape(
                b, heads, t, s)
        return out.reshape(b, t, d), weights


def sublayer_input(x: Tensor, norm: nn.LayerNorm, norm_first: bool) -> Tensor:
    """What a sub-layer reads: LayerNorm(x) in pre-norm, x itself in post-norm."""
    return norm(x) if norm_first else x


def residual(x: Tensor, sublayer_output: Tensor, norm: nn.LayerNorm, dropout: nn.Module,
             norm_first: bool, keep: bool = True) -> Tensor:
    """The residual connection around a sub-layer: x + Dropout(output), normalised after the
    sum in post-norm (LayerNorm(x + Dropout(f(x)))); pre-norm normalised the sub-layer's input
    instead (x + Dropout(f(LayerNorm(x)))). ``keep`` False: no connection, Dropout(output)
    alone (normalised in post-norm)."""
    x = x + dropout(sublayer_output) if keep else dropout(sublayer_output)
    return x if norm_first else norm(x)
