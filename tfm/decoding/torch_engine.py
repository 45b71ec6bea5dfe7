"""tfm's own engine: the PyTorch model of a tfm model directory, decoded by tfm.decoding.search."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tfm.checkpoint import load_model_dir
from tfm.config import SearchOptions
from tfm.data.batching import pad_pairs
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
from tfm.special_tokens import PAD_ID


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
        faster than fp32 with the same BLEU: docs/BENCHMARKS.md, else fp32). ``ensemble``:
        more model directories, with the same tokenizer, decoded together with the first
        (their probabilities averaged); the first gives the languages and decoding defaults.
        ``workers``: batches decoded at once (None: tfm.device.decoding_workers decides); with
        more than one, this thread keeps one CPU thread and the workers share the others
        (tfm.device.share_cpu_threads)."""
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
        if sorted(info.direction_names) != sorted(self.info.direction_names):
            raise UsageError(f"--ensemble {directory} translates "
                             f"{', '.join(info.direction_names)}; {first} "
                             f"{', '.join(self.info.direction_names)}: an ensemble's models "
                             "translate the same directions")
        return model

    def describe(self) -> dict[str, Any]:
        described = {"engine": self.engine, "device": str(self.device),
                     "precision": precision_name(self.dtype)}
        if isinstance(self.model, Ensemble):
            described["ensemble"] = len(self.model.members)
        return described

    @torch.inference_mode()
    def forced_log_probs(self, sources: list[list[int]], targets: list[list[int]],
                         batch_tokens: int = 2048) -> list[list[float]]:
        """Translator.forced_log_probs: all positions at once, pairs sorted by length into
        batches of about ``batch_tokens`` source + target tokens."""
        results: list[list[float]] = [[] for _ in sources]
        pair_tokens = [len(x) + len(y) + 1 for x, y in zip(sources, targets)]
        for batch in length_batches(pair_tokens, range(len(pair_tokens)), batch_tokens):
            pairs = pad_pairs([sources[i] for i in batch], [targets[i] for i in batch])
            pairs = pairs.to(self.device)
            logits = self.model(pairs.src, pairs.tgt_in).float()  # (B, T, V)
            # log_softmax at the gold tokens only, without a second (B, T, V) tensor.
            gold = (logits.gather(-1, pairs.tgt_out[..., None])[..., 0]
                    - logits.logsumexp(dim=-1)).tolist()
            for row, i in enumerate(batch):
                results[i] = gold[row][: len(targets[i]) + 1]
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
