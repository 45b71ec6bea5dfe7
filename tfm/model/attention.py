"""Masks, scaled dot-product attention and multi-head attention (paper sections 3.2.1-3.2.2).

Mask convention, used everywhere in tfm: a boolean tensor where **True means "may attend"**.
Masks are built by the small pure functions below and broadcast against attention scores of
shape (B, H, T, S): B batch, H heads, T query positions, S key positions.
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from torch.nn.attention import SDPBackend, sdpa_kernel

# PyTorch's fused attention kernels for CUDA, all but cuDNN's. cuDNN's (chosen first for bf16 and
# fp16 on recent GPUs) builds an execution plan for every new shape, and translation brings a
# new shape with nearly every batch and decoding step, which made decoding and bf16 training
# on a GPU slower with it than without (docs/BENCHMARKS.md, "On a GPU").
CUDA_KERNELS = [SDPBackend.FLASH_ATTENTION, SDPBackend.EFFICIENT_ATTENTION, SDPBackend.MATH]


def attention_kernels(device: torch.device) -> AbstractContextManager:
    """Where the fused attention of ``device`` may run: CUDA_KERNELS on CUDA, torch's choice
    elsewhere. (torch keeps the choice in process-wide flags; this sets them for the block and
    puts them back after it.)"""
    return sdpa_kernel(CUDA_KERNELS) if device.type == "cuda" else nullcontext()


def padding_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """(B, S) token ids -> (B, 1, 1, S): True for real tokens, False for padding.

    Padded keys never receive attention weight; the singleton dims broadcast over heads
    and query positions.
    """
    return (tokens != pad_id)[:, None, None, :]


def causal_mask(size: int, device: torch.device | None = None) -> Tensor:
    """(T, T) look-ahead mask: position t may attend to positions <= t only."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()


def decoder_self_attention_mask(tokens: Tensor, pad_id: int) -> Tensor:
    """(B, T) target ids -> (B, 1, T, T): the look-ahead mask combined with the padding mask."""
    return padding_mask(tokens, pad_id) & causal_mask(tokens.size(1), tokens.device)


def attention(
    q: Tensor,
    k: Tensor,
    v: Tensor,
    mask: Tensor | None = None,
    dropout: float = 0.0,
    need_weights: bool = False,
) -> tuple[Tensor, Tensor | None]:
    """softmax(Q K^T / sqrt(d_k)) V.

    q: (B, H, T, Dh), k and v: (B, H, S, Dh), mask broadcastable to (B, H, T, S).
    Returns the output (B, H, T, Dh) and, when ``need_weights``, the weights (B, H, T, S)
    (before attention dropout).
    The fast path is PyTorch's fused kernel; the explicit path below is the same formula
    written out, used when a caller wants the weights (alignments, attention pictures).
    """
    if not need_weights:
        if q.device.type == "cpu" and q.dtype == torch.bfloat16:
            # PyTorch's fused CPU kernel is slower in bf16 than in fp32 (docs/BENCHMARKS.md);
            # attention is a small share of the FLOPs, so it runs in fp32 and only the
            # projections around it in bf16.
            out = F.scaled_dot_product_attention(q.float(), k.float(), v.float(), attn_mask=mask,
                                                 dropout_p=dropout)
            return out.to(q.dtype), None
        with attention_kernels(q.device):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout)
        return out, None
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.size(-1))  # (B, H, T, S)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = scores.softmax(dim=-1)
    # The weights returned are those before dropout: the attention's distribution, which
    # guided alignment trains (tfm.training.objective) and alignments are read from.
    dropped = F.dropout(weights, p=dropout) if dropout > 0.0 else weights
    return dropped @ v, weights


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1..head_h) W_O with head_i = Attention(Q W_Q, K W_K, V W_V).

    The projections of all heads are done by one matrix each (``q_proj`` is W_Q for every head,
    and so on), with biases. The four are named ``q_proj``, ``k_proj``, ``v_proj`` and
    ``out_proj`` as in fairseq's and Hugging Face's (Marian, BART) attention modules; the rest
    of tfm's parameter names are its own (``encoder_layers.N``, ``ffn.fc1``, ``src_embed.token``
    where Marian has ``model.encoder.layers.N``, ``fc1``, ``model.shared``), so loading weights
    from or into those models needs a name mapping.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0) -> None:
        super().__init__()
        self.n_heads = n_heads
        self.d_head = d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model)
        self.k_proj = nn.Linear(d_model, d_model)
        self.v_proj = nn.Linear(d_model, d_model)
        self.out_proj = nn.Linear(d_model, d_model)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, L, D) -> (B, H, L, Dh)."""
        b, length, _ = x.shape
        return x.view(b, length, self.n_heads, self.d_head).transpose(1, 2)

    def project_kv(self, memory: Tensor) -> tuple[Tensor, Tensor]:
        """Keys and values of a memory (B, S, D) -> two (B, H, S, Dh); cached by the decoder."""
        return self.split_heads(self.k_proj(memory)), self.split_heads(self.v_proj(memory))

    def forward(
        self,
        query: Tensor,
        kv: tuple[Tensor, Tensor],
        mask: Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[Tensor, Tensor | None]:
        """query (B, T, D) attends to projected keys/values (B, H, S, Dh) -> (B, T, D)."""
        q = self.split_heads(self.q_proj(query))  # (B, H, T, Dh)
        k, v = kv
        dropout = self.dropout if self.training else 0.0
        out, weights = attention(q, k, v, mask, dropout, need_weights)  # (B, H, T, Dh)
        b, _, t, _ = out.shape
        out = out.transpose(1, 2).reshape(b, t, self.n_heads * self.d_head)  # (B, T, D)
        return self.out_proj(out), weights
