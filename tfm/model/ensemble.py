"""Several models decoded as one: an ensemble.

Search (tfm.decoding.search) knows a model only through ``encode``, ``start_decoding``,
``decode_step`` and ``config.max_positions``; ``Ensemble`` offers the same four over models that
share their vocabularies, so greedy and beam search decode an ensemble unchanged. The next-token
distribution is the mean of the members' probabilities, returned as its logarithm
(log(1/n sum_i p_i), as fairseq and OpenNMT-py ensemble); it is already normalised, so the
search's log-softmax leaves it as it is. Cross-attention weights, when asked for, are the
members' mean (over their heads, then over the members).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch
from torch import Tensor, nn

from tfm.config import ModelConfig
from tfm.model.transformer import DecoderState, Transformer


@dataclass
class EnsembleState:
    """One DecoderState per member, reordered and pruned together."""

    members: list[DecoderState]

    def index_select(self, index: Tensor) -> EnsembleState:
        return EnsembleState([state.index_select(index) for state in self.members])


class Ensemble(nn.Module):
    """Models with the same source and target vocabularies (the caller checks the tokenizers)
    whose probabilities are averaged at every decoding step."""

    def __init__(self, models: list[Transformer]) -> None:
        super().__init__()
        if not models:
            raise ValueError("an ensemble needs at least one model")
        sizes = {(m.config.src_vocab_size, m.config.tgt_vocab_size) for m in models}
        if len(sizes) > 1:
            raise ValueError(f"ensemble members differ in vocabulary sizes: {sorted(sizes)}")
        self.members = nn.ModuleList(models)
        # The longest input every member takes: the one limit search and truncation see.
        self.config: ModelConfig = replace(
            models[0].config, max_positions=min(m.config.max_positions for m in models))

    def forward(self, src: Tensor, tgt_in: Tensor) -> Tensor:
        """Teacher forcing, as Transformer.forward: src (B, S), tgt_in (B, T) -> the log of the
        members' mean next-token probability at every target position (B, T, V)."""
        return _log_mean_probability([m(src, tgt_in) for m in self.members])

    def encode(self, src: Tensor) -> tuple[list[Tensor], list[Tensor]]:
        """Each member's encoder output and source mask."""
        encoded = [m.encode(src) for m in self.members]
        return [memory for memory, _ in encoded], [mask for _, mask in encoded]

    def start_decoding(self, memory: list[Tensor], memory_mask: list[Tensor], group: int = 1
                       ) -> EnsembleState:
        return EnsembleState([m.start_decoding(mem, mask, group)
                              for m, mem, mask in zip(self.members, memory, memory_mask)])

    def decode_step(self, tokens: Tensor, state: EnsembleState, need_weights: bool = False
                    ) -> tuple[Tensor, EnsembleState, Tensor | None]:
        """tokens (B,) -> log of the mean next-token probability (B, V), the extended state, and
        the members' mean cross-attention (B, 1, S), averaged over heads, when asked for."""
        member_logits, states, weights = [], [], []
        for model, member_state in zip(self.members, state.members):
            logits, new_state, w = model.decode_step(tokens, member_state, need_weights)
            member_logits.append(logits)
            states.append(new_state)
            if w is not None:  # (B, H, S); members may differ in heads: mean over them first
                weights.append(w.float().mean(dim=1, keepdim=True))
        mean = _log_mean_probability(member_logits)
        mean_weights = torch.stack(weights).mean(dim=0) if weights else None
        return mean, EnsembleState(states), mean_weights


def _log_mean_probability(logits: list[Tensor]) -> Tensor:
    """log(1/n sum_i softmax(logits_i)): the members' mean distribution, as log-probabilities."""
    log_probs = torch.stack([torch.log_softmax(x.float(), dim=-1) for x in logits])
    return torch.logsumexp(log_probs, dim=0) - math.log(len(logits))
