"""tfm's own engine: the PyTorch model of a tfm model directory, decoded by tfm.decoding.search."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tfm.checkpoint import load_model_dir
from tfm.config import SearchOptions
from tfm.data.batching import pad_pairs
from tfm.data.text import normalize_text
from tfm.data.tokenizer import encode_batch
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.search import Hypothesis, beam_search, greedy_search
from tfm.decoding.translator import Translator, length_batches
from tfm.device import (
    decoding_workers,
    precision_name,
    resolve_device,
    resolve_precision,
    share_cpu_threads,
)
from tfm.errors import UsageError
from tfm.layout import WEIGHTS_FILE
from tfm.model import Transformer
from tfm.model.ensemble import Ensemble
from tfm.special_tokens import EOS_ID, PAD_ID


class TorchTranslator(Translator):
    """A loaded tfm model directory."""

    engine = "tfm"
    supports_attention = True

    def __init__(self, model_dir: Path, device: str = "auto", weights_file: str = WEIGHTS_FILE,
                 precision: str = "fp32", ensemble: Sequence[Path] = (),
                 workers: int | None = 1) -> None:
        """``weights_file``: another weights file of the directory, e.g. a numbered
        checkpoint ``checkpoints/step_00001000.safetensors``. ``precision``: fp32, or bf16 /
        fp16 weights (``auto``: bf16 on CUDA and on CPUs with native bf16, where they decode
        faster than fp32 with the same BLEU: docs/BENCHMARKS.md, else fp32). ``ensemble``: more model directories, with the
        same tokenizer, decoded together with the first (their probabilities averaged); the
        first gives the languages and decoding defaults. ``workers``: batches decoded at once
        (None: tfm.device.decoding_workers decides); with more than one, this thread keeps one
        CPU thread and the workers share the others (tfm.device.share_cpu_threads)."""
        self.device = resolve_device(device)
        self.workers = decoding_workers(workers, self.device)
        if self.workers > 1:
            self.worker_init = share_cpu_threads(self.workers)
        self.model, self.vocabs, self.info = load_model_dir(Path(model_dir), weights_file)
        if ensemble:
            self.model = Ensemble([self.model, *(self._member(Path(model_dir), Path(d),
                                                              weights_file)
                                                 for d in ensemble)])
        self.model.to(self.device)
        self.dtype = resolve_precision(precision, self.device, training=False)
        if self.dtype is not None:  # weights converted once: autocast would recast them
            self.model.to(self.dtype)
        self.max_source_tokens = self.model.config.max_positions

    def _member(self, first: Path, directory: Path, weights_file: str) -> Transformer:
        """An ensemble member's model (its ``weights_file``, as for the first: runs trained
        side by side have checkpoints of the same names), refused unless it reads and writes
        the first model's tokens (the same tokenizer, the same languages)."""
        model, vocabs, info = load_model_dir(directory, weights_file)
        same = (vocabs.src.to_str() == self.vocabs.src.to_str()
                and vocabs.tgt.to_str() == self.vocabs.tgt.to_str())
        if not same:
            raise UsageError(f"--ensemble {directory}: its tokenizer differs from {first}'s; "
                             "an ensemble's models must share their tokenizer")
        if (info.src_lang, info.tgt_lang) != (self.info.src_lang, self.info.tgt_lang):
            raise UsageError(f"--ensemble {directory} translates {info.src_lang}->"
                             f"{info.tgt_lang}, {first} {self.info.src_lang}->"
                             f"{self.info.tgt_lang}")
        return model

    def describe(self) -> dict[str, Any]:
        described = {"engine": self.engine, "device": str(self.device),
                     "precision": precision_name(self.dtype)}
        if isinstance(self.model, Ensemble):
            described["ensemble"] = len(self.model.members)
        return described

    @torch.inference_mode()
    def score(self, sources: Sequence[str], targets: Sequence[str], max_tokens: int = 2048
              ) -> list[tuple[float, int]]:
        """log P(target | source) of each pair of texts under the model (an ensemble: the log
        of its members' mean probability at each position), and the target's length in
        tokens, EOS included: forced decoding, all positions at once. Both sides are read as
        ``prepare`` reads a source (normalised, truncated to what the model takes); pairs are
        sorted by length into batches of about ``max_tokens`` source + target tokens."""
        limit = self.max_source_tokens - 1  # room for EOS (the source's) or BOS (the target's)
        src_ids = [x[:limit] + [EOS_ID] for x in encode_batch(
            self.vocabs.src, [normalize_text(s) for s in sources])]
        tgt_ids = [y[:limit] for y in encode_batch(
            self.vocabs.tgt, [normalize_text(t) for t in targets])]
        if len(src_ids) != len(tgt_ids):
            raise ValueError(f"{len(src_ids)} sources but {len(tgt_ids)} targets")
        results: list[tuple[float, int]] = [(0.0, 0)] * len(src_ids)
        pair_tokens = [len(x) + len(y) + 1 for x, y in zip(src_ids, tgt_ids)]
        for batch in length_batches(pair_tokens, range(len(pair_tokens)), max_tokens):
            pairs = pad_pairs([src_ids[i] for i in batch], [tgt_ids[i] for i in batch])
            pairs = pairs.to(self.device)
            logits = self.model(pairs.src, pairs.tgt_in).float()  # (B, T, V)
            # log_softmax at the gold tokens only, without a second (B, T, V) tensor.
            gold = (logits.gather(-1, pairs.tgt_out[..., None])[..., 0]
                    - logits.logsumexp(dim=-1))
            sums = gold.masked_fill(~pairs.tgt_mask, 0.0).sum(dim=1).tolist()
            for row, i in enumerate(batch):
                results[i] = (sums[row], len(tgt_ids[i]) + 1)
        return results

    def search(self, batch: list[list[int]], o: SearchOptions,
               constraints: list[TargetConstraints | None] | None = None
               ) -> list[list[Hypothesis]]:
        src = _padded(batch).to(self.device)
        if o.beam == 1:
            return greedy_search(self.model, src, o.max_len_a, o.max_len_b, o.min_len,
                                 o.attention, constraints)
        return beam_search(self.model, src, o.beam, o.length_penalty, o.max_len_a, o.max_len_b,
                           o.min_len, o.n_best, o.attention, o.stop_early, constraints)


def _padded(rows: list[list[int]]) -> torch.Tensor:
    """Token ids (B, longest), padded at the end."""
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(rows):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out
