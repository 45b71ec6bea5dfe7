"""The encoder-decoder Transformer, and the state it carries through incremental decoding.

Training calls ``model(src, tgt_in)`` for logits at every target position. Search calls
``encode`` once, ``start_decoding`` once (cross-attention keys/values are projected here, once
per sentence) and then ``decode_step`` once per output token, which extends the self-attention
cache by one position (a decoder of SSRU layers, ``decoder_self_attention`` "ssru", replaces
each layer's one-vector state instead). The model knows nothing of tokenizers, files or search
strategies.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor, nn
from torch.nn import functional as F

from tfm.config import ModelConfig
from tfm.model.attention import decoder_self_attention_mask, padding_mask
from tfm.model.layers import (
    Cache,
    DecoderLayer,
    Embeddings,
    EncoderLayer,
    FixedLayerCache,
    FixedSsruCache,
    LayerCache,
    SsruCache,
    position_table,
)
from tfm.model.ssru import cell_dtype
from tfm.special_tokens import PAD_ID


@dataclass
class DecoderState:
    """Everything incremental decoding needs besides the next input token.

    memory_mask: (B / group, 1, 1, S) source padding mask; layers: one LayerCache per decoder
    layer (an SsruCache per SSRU layer); step: how many target positions have been fed so
    far; group: how many consecutive rows (the beams of a sentence) share one sentence's
    encoder output and mask.
    """

    memory_mask: Tensor
    layers: list[Cache]
    step: int = 0
    group: int = 1

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
        )

    @property
    def batch_size(self) -> int:
        return self.memory_mask.size(0) * self.group


@dataclass
class FixedDecoderState:
    """Incremental decoding's state in buffers of a fixed shape, written in place
    (Transformer.fixed_decoder_state): rows (B), source positions (S) and target positions (L)
    do not change from step to step, so a CUDA graph can replay the step (tfm.decoding.graphs).
    Rows are never pruned: the search ignores those it has finished with.

    memory_mask: (B / group, 1, 1, S); layers: one FixedLayerCache per decoder layer, all
    sharing ``position`` (1,), the position fed next (a FixedSsruCache per SSRU layer);
    group as in DecoderState.
    """

    memory_mask: Tensor
    layers: list[FixedLayerCache | FixedSsruCache]
    position: Tensor
    group: int = 1

    def reorder(self, index: Tensor) -> None:
        """Rows ``index`` (B,) of the self-attention caches (the SSRU cells), in place; beams
        move within their sentence, so the memory stays as it is."""
        for layer in self.layers:
            layer.reorder(index)

    @property
    def nbytes(self) -> int:
        """The memory the layers' buffers take."""
        return sum(t.numel() * t.element_size() for layer in self.layers
                   for t in layer.tensors())


@dataclass
class OutputRows:
    """The output layer's rows for some target ids, gathered once (Transformer.output_rows):
    weight (V', D), bias (V',) or None."""

    weight: Tensor
    bias: Tensor | None


class Transformer(nn.Module):
    def __init__(self, config: ModelConfig) -> None:
        super().__init__()
        self.config = config
        c = config
        src_embed = nn.Embedding(c.src_vocab_size, c.d_model, padding_idx=PAD_ID)
        tgt_embed = src_embed if c.share_embeddings else nn.Embedding(
            c.tgt_vocab_size, c.d_model, padding_idx=PAD_ID)
        positions = position_table(c)
        self.src_embed = Embeddings(src_embed, positions, c.dropout)
        self.tgt_embed = Embeddings(tgt_embed, positions.clone(), c.dropout)
        layer_args = (c.d_model, c.n_heads, c.d_ff, c.dropout, c.attention_dropout,
                      c.activation_dropout, c.norm_first, c.activation)
        self.encoder_layers = nn.ModuleList(
            EncoderLayer(*layer_args, attention_residual=i + 1 != c.drop_residual_layer)
            for i in range(c.encoder_layers))
        self.decoder_layers = nn.ModuleList(
            DecoderLayer(*layer_args, self_attention=c.decoder_self_attention)
            for _ in range(c.decoder_layers))
        # Pre-norm leaves the last residual sum un-normalised: normalise it once at the end.
        self.encoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.decoder_norm = nn.LayerNorm(c.d_model) if c.norm_first else nn.Identity()
        self.output_proj = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)
        if c.output_bias:
            # A constant added to the logits (MarianMT's final_logits_bias): a buffer, saved
            # with the weights but not trained, as transformers keeps it.
            self.register_buffer("output_bias", torch.zeros(c.tgt_vocab_size))
        else:
            self.output_bias = None
        self.reset_parameters()
        if c.tie_output:
            self.output_proj.weight = tgt_embed.weight

    def logits(self, hidden: Tensor, rows: OutputRows | None = None) -> Tensor:
        """(..., D) decoder output -> (..., V) logits over the target vocabulary; with
        ``rows`` (``output_rows(ids)``), (..., V') over those ids only, in their order."""
        if rows is None:
            out, bias = self.output_proj(hidden), self.output_bias
        else:
            out, bias = F.linear(hidden, rows.weight), rows.bias
        return out if bias is None else out + bias.to(out.dtype)

    def output_rows(self, ids: Tensor) -> OutputRows:
        """The output layer for the target ids ``ids`` (V',) only: what ``logits`` and
        ``decode_step`` take to score just those (a vocabulary shortlist)."""
        bias = None if self.output_bias is None else self.output_bias[ids]
        return OutputRows(self.output_proj.weight[ids], bias)

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
                      need_weights: bool = False, alignment_only: bool = False
                      ) -> tuple[Tensor, Tensor | None]:
        """tgt_in (B, T) ids -> decoder output (B, T, D) before the vocabulary projection, and
        the alignment heads' cross-attention weights (B, H', T, S) when asked
        (``alignment_heads``). ``alignment_only``: the weights computed in that layer alone
        (training's guided alignment); otherwise every layer computes them, as before."""
        if self.config.decoder_self_attention == "ssru":
            self_mask = tgt_in != PAD_ID  # (B, T): the SSRU is causal by its recurrence
        else:
            self_mask = decoder_self_attention_mask(tgt_in, PAD_ID)  # (B, 1, T, T)
        x = self.tgt_embed(tgt_in)
        weights = None
        kept = self.alignment_layer
        for i, layer in enumerate(self.decoder_layers):
            cross_kv = layer.encoder_attn.project_kv(memory)
            asked = need_weights and (i == kept or not alignment_only)
            x, _, layer_weights = layer(x, cross_kv, self_mask, memory_mask, None, asked)
            if i == kept:
                weights = layer_weights
        return self.decoder_norm(x), self.alignment_heads(weights)

    @property
    def alignment_layer(self) -> int:
        """The decoder layer alignments are read from: the guided one, else the last."""
        c = self.config
        return c.decoder_layers - 1 if c.alignment_layer is None else c.alignment_layer

    def alignment_heads(self, weights: Tensor | None) -> Tensor | None:
        """A layer's cross-attention weights (B, H, ...) -> those alignments are read from:
        the first head alone (B, 1, ...) in a model trained with guided alignment, else all
        heads (averaged by the search)."""
        if weights is None or self.config.alignment_layer is None:
            return weights
        return weights[:, :1]

    def forward(self, src: Tensor, tgt_in: Tensor, score_mask: Tensor | None = None,
                alignment: bool = False) -> Tensor | tuple[Tensor, Tensor]:
        """Teacher forcing: src (B, S), tgt_in (B, T) = BOS + target -> logits (B, T, V).

        With ``score_mask`` (B, T), logits only where it is True, as (N, V): training skips
        the vocabulary projection, the largest matrix product, at padded positions.
        With ``alignment`` (a model with ``alignment_layer``, in guided-alignment training),
        also the guided head's cross-attention weights (B, T, S), before dropout.
        """
        memory, memory_mask = self.encode(src)
        hidden, weights = self.decode_hidden(tgt_in, memory, memory_mask, alignment, True)
        if score_mask is not None:
            hidden = hidden[score_mask]  # (N, D)
        if not alignment:
            return self.logits(hidden)
        assert weights is not None and self.config.alignment_layer is not None
        return self.logits(hidden), weights[:, 0]

    # --- decoder, one position at a time (search) ----------------------------------------------

    def start_decoding(self, memory: Tensor, memory_mask: Tensor, group: int = 1
                       ) -> DecoderState:
        """An empty self-attention cache (the SSRU's c_{-1} = 0), and cross-attention
        keys/values projected once per sentence. ``group``: decoder rows per sentence (the
        beam size), consecutive."""
        rows = memory.size(0) * group
        c = self.config
        empty = memory.new_zeros(rows, c.n_heads, 0, c.d_head)
        layers: list[Cache] = []
        for layer in self.decoder_layers:
            cross_k, cross_v = layer.encoder_attn.project_kv(memory)
            if layer.ssru is not None:
                cell = memory.new_zeros(rows, c.d_model, dtype=cell_dtype(memory.dtype))
                layers.append(SsruCache(cell, cross_k, cross_v))
            else:
                layers.append(LayerCache(empty, empty, cross_k, cross_v))
        return DecoderState(memory_mask, layers, 0, group)

    def decode_step(self, tokens: Tensor, state: DecoderState, need_weights: bool = False,
                    rows: OutputRows | None = None
                    ) -> tuple[Tensor, DecoderState, Tensor | None]:
        """tokens (B,) fed at position ``state.step`` -> logits (B, V) for the next position
        (with ``rows``, (B, V') over their ids: ``logits``), the extended state, and the
        alignment heads' cross-attention weights (B, H', S) (``alignment_heads``: the last
        layer's H heads, or the guided head alone)."""
        x = self.tgt_embed(tokens[:, None], offset=state.step)  # (B, 1, D)
        new_layers = []
        weights = None
        for i, (layer, cache) in enumerate(zip(self.decoder_layers, state.layers)):
            x, new_cache, layer_weights = layer(x, (cache.cross_k, cache.cross_v), None,
                                                state.memory_mask, cache, need_weights,
                                                state.group)
            new_layers.append(new_cache)
            if i == self.alignment_layer:
                weights = self.alignment_heads(layer_weights)
        logits = self.logits(self.decoder_norm(x), rows)[:, 0]  # (B, V)
        new_state = DecoderState(state.memory_mask, new_layers, state.step + 1, state.group)
        return logits, new_state, None if weights is None else weights[:, :, 0]

    # --- decoder, one position at a time in fixed buffers (CUDA graphs) ------------------------

    def fixed_decoder_state(self, sentences: int, source_length: int, length: int,
                            group: int = 1) -> FixedDecoderState:
        """Zeroed buffers for ``sentences`` x ``group`` decoder rows, sources of
        ``source_length`` positions and up to ``length`` target positions, on the model's
        device and in its dtype; ``load_memory`` fills them for a batch."""
        c = self.config
        weight = self.output_proj.weight
        rows = sentences * group

        def zeros(*shape: int) -> Tensor:
            return torch.zeros(shape, dtype=weight.dtype, device=weight.device)

        position = torch.zeros(1, dtype=torch.long, device=weight.device)
        layers: list[FixedLayerCache | FixedSsruCache] = []
        for layer in self.decoder_layers:
            cross = (zeros(sentences, c.n_heads, source_length, c.d_head),
                     zeros(sentences, c.n_heads, source_length, c.d_head))
            if layer.ssru is not None:
                cell = torch.zeros(rows, c.d_model, dtype=cell_dtype(weight.dtype),
                                   device=weight.device)
                layers.append(FixedSsruCache(cell, *cross))
            else:
                layers.append(FixedLayerCache(zeros(rows, c.n_heads, length, c.d_head),
                                              zeros(rows, c.n_heads, length, c.d_head),
                                              *cross, position))
        mask = torch.zeros(sentences, 1, 1, source_length, dtype=torch.bool,
                           device=weight.device)
        return FixedDecoderState(mask, layers, position, group)

    def load_memory(self, state: FixedDecoderState, memory: Tensor, memory_mask: Tensor) -> None:
        """``state`` made ready for a batch: the encoder output's cross-attention keys and
        values (as ``start_decoding`` projects them) copied in, the self-attention caches
        emptied (the SSRU cells zeroed), position 0."""
        state.memory_mask.copy_(memory_mask)
        for layer, cache in zip(self.decoder_layers, state.layers):
            cross_k, cross_v = layer.encoder_attn.project_kv(memory)
            cache.cross_k.copy_(cross_k)
            cache.cross_v.copy_(cross_v)
            cache.clear()
        state.position.zero_()

    def decode_step_in_place(self, tokens: Tensor, state: FixedDecoderState) -> Tensor:
        """``decode_step`` over fixed buffers: tokens (B,) fed at ``state.position`` -> logits
        (B, V) for the next position; their keys and values are written into the caches. The
        position is left for the caller to advance. Reads nothing back to the host."""
        x = self.tgt_embed.at(tokens[:, None], state.position)  # (B, 1, D)
        for layer, cache in zip(self.decoder_layers, state.layers):
            x = layer(x, (cache.cross_k, cache.cross_v), None, state.memory_mask, cache,
                      False, state.group)[0]
        return self.logits(self.decoder_norm(x))[:, 0]  # (B, V)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters, each shared tensor counted once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)
