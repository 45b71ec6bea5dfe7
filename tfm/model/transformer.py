"""The encoder-decoder Transformer, and the state it carries through incremental decoding.

Training calls ``model(src, tgt_in)`` for logits at every target position. Search calls
``encode`` once, ``start_decoding`` once (cross-attention keys/values are projected here, once
per sentence) and then ``decode_step`` once per output token, which extends the self-attention
cache by one position. The model knows nothing of tokenizers, files or search strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn

from tfm.config import ModelConfig
from tfm.model.attention import decoder_self_attention_mask, padding_mask
from tfm.model.layers import DecoderLayer, Embeddings, EncoderLayer, LayerCache
from tfm.special_tokens import PAD_ID


@dataclass
class DecoderState:
    """Everything incremental decoding needs besides the next input token.

    memory_mask: (B / group, 1, 1, S) source padding mask; layers: one LayerCache per decoder
    layer; step: how many target positions have been fed so far; group: how many consecutive
    rows (the beams of a sentence) share one sentence's encoder output and mask.

    lengths (B,), for rows that started at different steps (continuous batching, where
    sentences join and leave a running batch): how many positions each row has been fed. The
    self-attention cache is then a buffer of ``capacity`` positions, row b's prefix in its
    first ``lengths[b]``: each row's keys sit where they would sit were it decoded alone, so
    its result is the same (the padding after them is masked, as a source's padding is).
    """

    memory_mask: Tensor
    layers: list[LayerCache]
    step: int = 0
    group: int = 1
    lengths: Tensor | None = None

    def index_select(self, index: Tensor) -> DecoderState:
        """Keep and reorder batch rows: beam search reorders by ``index``, and finished
        sentences are pruned by leaving their rows out. With ``group`` > 1, ``index`` must keep
        the rows of a sentence together: its i-th run of ``group`` entries all come from one
        sentence (beams move within their sentence)."""
        memory_index = index if self.group == 1 else index[::self.group] // self.group
        return DecoderState(
            self.memory_mask.index_select(0, memory_index),
            [layer.index_select(index, memory_index) for layer in self.layers],
            self.step,
            self.group,
            None if self.lengths is None else self.lengths.index_select(0, index),
        )

    @property
    def batch_size(self) -> int:
        return self.memory_mask.size(0) * self.group

    @property
    def capacity(self) -> int:
        """Positions the self-attention cache holds (rows at different steps)."""
        return self.layers[0].self_k.size(2) if self.layers else 0

    def concat(self, other: DecoderState) -> DecoderState:
        """This state's rows, then ``other``'s: sentences joining a running batch. Both must
        track rows apart (``lengths``), with the same ``group``; sources and caches are padded
        to the longer of the two, and the padding masked."""
        assert self.lengths is not None and other.lengths is not None
        assert self.group == other.group
        s = max(self.memory_mask.size(-1), other.memory_mask.size(-1))
        c = max(self.capacity, other.capacity)
        layers = [LayerCache(*(torch.cat([_pad_dim(x, 2, n), _pad_dim(y, 2, n)])
                               for x, y, n in zip(a.as_tuple(), b.as_tuple(), (c, c, s, s))))
                  for a, b in zip(self.layers, other.layers)]
        mask = torch.cat([_pad_dim(self.memory_mask, 3, s), _pad_dim(other.memory_mask, 3, s)])
        return DecoderState(mask, layers, max(self.step, other.step), self.group,
                            torch.cat([self.lengths, other.lengths]))

    def trimmed(self) -> DecoderState:
        """The same rows without the padding no row needs any more (rows at different steps):
        sources cut to the longest left, caches to the longest prefix."""
        assert self.lengths is not None
        s = int(self.memory_mask.sum(dim=-1).max()) if self.memory_mask.numel() else 0
        c = int(self.lengths.max()) if self.lengths.numel() else 0
        # Keep some room (views cost nothing; growing again copies the cache).
        c = self.capacity if self.capacity - c <= 16 else c + 8
        if s == self.memory_mask.size(-1) and c == self.capacity:
            return self
        layers = [LayerCache(layer.self_k[:, :, :c], layer.self_v[:, :, :c],
                             layer.cross_k[:, :, :s], layer.cross_v[:, :, :s])
                  for layer in self.layers]
        return DecoderState(self.memory_mask[..., :s], layers, self.step, self.group,
                            self.lengths)


def _pad_dim(x: Tensor, dim: int, size: int) -> Tensor:
    """``x`` padded with zeros (False for masks) at the end of ``dim`` to ``size``."""
    if x.size(dim) >= size:
        return x
    shape = list(x.shape)
    shape[dim] = size - x.size(dim)
    return torch.cat([x, x.new_zeros(shape)], dim=dim)


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=PAD_ID)
        tgt_embed = src_embed if c.share_embeddings else nn.Embedding(
            c.tgt_vocab_size, c.d_model, padding_idx=PAD_ID)
        self.src_embed = Embeddings(src_embed, c.max_positions, c.dropout)
        self.tgt_embed = Embeddings(tgt_embed, c.max_positions, c.dropout)
        layer_args = (c.d_model, c.n_heads, c.d_ff, c.dropout, c.attention_dropout,
                      c.activation_dropout, c.norm_first)
        self.encoder_layers = nn.ModuleList(EncoderLayer(*layer_args)
                                            for _ in range(c.encoder_layers))
        self.decoder_layers = nn.ModuleList(DecoderLayer(*layer_args)
                                            for _ in range(c.decoder_layers))
        # Pre-norm leaves the last residual sum un-normalised: normalise it once at the end.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output_proj = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        self.reset_parameters()
        if c.tie_output:
            self.output_proj.weight = tgt_embed.weight

    def reset_parameters(self) -> None:
        """Xavier-uniform matrices, zero biases, N(0, d^-1/2) embeddings with a zero pad row.

        With the sqrt(d_model) scaling the embedded tokens start at unit variance, like the
        positional encoding they are added to.
        """
        for name, p in self.named_parameters():
            if p.dim() > 1 and "embed" not in name:
                nn.init.xavier_uniform_(p)
            elif name.endswith("bias"):
                nn.init.zeros_(p)
        for embed in {self.src_embed.token, self.tgt_embed.token}:
            nn.init.normal_(embed.weight, mean=0.0, std=self.config.d_model ** -0.5)
            with torch.no_grad():
                embed.weight[PAD_ID].zero_()

    # --- encoder -------------------------------------------------------------------------------

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src (B, S) ids -> memory (B, S, D) and its padding mask (B, 1, 1, S)."""
        src_mask = padding_mask(src, PAD_ID)
        x = self.src_embed(src)
        for layer in self.encoder_layers:
            x = layer(x, src_mask)
        return self.encoder_norm(x), src_mask

    # --- decoder, all positions at once (training, scoring) ------------------------------------

    def decode_hidden(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor,
                      need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """tgt_in (B, T) ids -> decoder output (B, T, D) before the vocabulary projection, and
        the last layer's cross-attention weights (B, H, T, S) when asked."""
        self_mask = decoder_self_attention_mask(tgt_in, PAD_ID)  # (B, 1, T, T)
        x = self.tgt_embed(tgt_in)
        weights = None
        for layer in self.decoder_layers:
            cross_kv = layer.encoder_attn.project_kv(memory)
            x, _, weights = layer(x, cross_kv, self_mask, memory_mask, None, need_weights)
        return self.decoder_norm(x), weights

    def decode(self, tgt_in: Tensor, memory: Tensor, memory_mask: Tensor,
               need_weights: bool = False) -> tuple[Tensor, Tensor | None]:
        """tgt_in (B, T) ids -> logits (B, T, V), and the last layer's cross-attention weights
        (B, H, T, S) when asked."""
        hidden, weights = self.decode_hidden(tgt_in, memory, memory_mask, need_weights)
        return self.output_proj(hidden), weights

    def forward(self, src: Tensor, tgt_in: Tensor, score_mask: Tensor | None = None) -> Tensor:
        """Teacher forcing: src (B, S), tgt_in (B, T) = BOS + target -> logits (B, T, V).

        With ``score_mask`` (B, T), logits only where it is True, as (N, V): training skips
        the vocabulary projection, the largest matrix product, at padded positions.
        """
        memory, memory_mask = self.encode(src)
        hidden = self.decode_hidden(tgt_in, memory, memory_mask)[0]  # (B, T, D)
        if score_mask is not None:
            hidden = hidden[score_mask]  # (N, D)
        return self.output_proj(hidden)

    # --- decoder, one position at a time (search) ----------------------------------------------

    def start_decoding(self, memory: Tensor, memory_mask: Tensor, group: int = 1,
                       rows_apart: bool = False) -> DecoderState:
        """An empty self-attention cache, and cross-attention keys/values projected once per
        sentence. ``group``: decoder rows per sentence (the beam size), consecutive.
        ``rows_apart``: rows that may later decode at different steps (``DecoderState.concat``,
        continuous batching)."""
        b = memory.size(0)
        c = self.config
        empty = memory.new_zeros(b * group, c.n_heads, 0, c.d_head)
        layers = []
        for layer in self.decoder_layers:
            cross_k, cross_v = layer.encoder_attn.project_kv(memory)
            layers.append(LayerCache(empty, empty, cross_k, cross_v))
        if rows_apart:
            lengths = torch.zeros(b * group, dtype=torch.long, device=memory.device)
            return DecoderState(memory_mask, layers, 0, group, lengths)
        return DecoderState(memory_mask, layers, 0, group)

    def decode_step(self, tokens: Tensor, state: DecoderState, need_weights: bool = False
                    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """tokens (B,) fed at position ``state.step`` -> logits (B, V) for the next position,
        the extended state, and the last layer's cross-attention weights (B, H, S).

        With rows apart (``state.lengths``), row b is fed at its own position ``lengths[b]``;
        the cache buffers are written in place (and grown when a row needs more room)."""
        write = state.lengths
        self_mask = None
        layers = state.layers
        if write is not None:
            longest = int(write.max()) + 1 if write.numel() else 0
            if longest > state.capacity:  # room for 16 more positions at a time
                size = longest + 15
                layers = [LayerCache(_pad_dim(layer.self_k, 2, size),
                                     _pad_dim(layer.self_v, 2, size), layer.cross_k,
                                     layer.cross_v) for layer in layers]
            capacity = layers[0].self_k.size(2) if layers else 0
            positions = torch.arange(capacity, device=tokens.device)
            self_mask = (positions[None, :] <= write[:, None])[:, None, None, :]  # (B,1,1,L)
        offset = state.step if write is None else write
        x = self.tgt_embed(tokens[:, None], offset=offset)  # (B, 1, D)
        new_layers = []
        weights = None
        for layer, cache in zip(self.decoder_layers, layers):
            x, new_cache, weights = layer(x, (cache.cross_k, cache.cross_v), self_mask,
                                          state.memory_mask, cache, need_weights, state.group,
                                          write)
            new_layers.append(new_cache)
        logits = self.output_proj(self.decoder_norm(x))[:, 0]  # (B, V)
        new_state = DecoderState(state.memory_mask, new_layers, state.step + 1, state.group,
                                 None if write is None else write + 1)
        return logits, new_state, None if weights is None else weights[:, :, 0]


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
