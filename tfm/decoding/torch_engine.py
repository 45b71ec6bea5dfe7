"""tfm's own engine: the PyTorch model of a tfm model directory, decoded by tfm.decoding.search."""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from tfm.checkpoint import load_model_dir
from tfm.config import SearchOptions
from tfm.data.batching import pad_pairs
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.graphs import CudaGraphs
from tfm.decoding.search import Hypothesis, search
from tfm.decoding.shortlist import load_shortlist, shortlist_search
from tfm.decoding.translator import Translator, length_batches
from tfm.decoding.workers import Workers
from tfm.device import precision_name, resolve_device, resolve_precision
from tfm.errors import UsageError
from tfm.layout import WEIGHTS_FILE
from tfm.model import Transformer
from tfm.model.ensemble import Ensemble
from tfm.model.int8 import quantize_linears
from tfm.special_tokens import PAD_ID


class TorchTranslator(Translator):
    """A loaded tfm model directory."""

    engine = "tfm"
    supports_attention = True

    def __init__(self, model_dir: Path, device: str = "auto", weights_file: str = WEIGHTS_FILE,
                 precision: str = "fp32", ensemble: Sequence[Path] = (),
                 workers: int | None = None, shortlist: bool = False,
                 cuda_graphs: bool = True) -> None:
        """``weights_file``: another weights file of the directory, e.g. a numbered
        checkpoint ``checkpoints/step_00001000.safetensors``. ``precision``: fp32, or bf16 /
        fp16 weights (``auto``: bf16 on CUDA and on CPUs with native bf16, where they decode
        faster than fp32 with the same BLEU: docs/BENCHMARKS.md, else fp32), or on a CPU int8
        Linear layers (tfm.model.int8). ``ensemble``:
        more model directories, with the same tokenizer, decoded together with the first
        (their probabilities averaged); the first gives the languages and decoding defaults.
        ``workers``: batches decoded at once, each by a thread of its own with its share of the
        CPU threads (tfm.decoding.workers; None: its default for the device). ``shortlist``:
        decode over the vocabulary shortlist of the directory (tfm.decoding.shortlist).
        ``cuda_graphs``: on CUDA, short batches that tfm.decoding.graphs takes are searched by
        replaying CUDA graphs (not with an ensemble, a shortlist or int8)."""
        self.device = resolve_device(device)
        self.workers = Workers.for_device(workers, self.device.type)  # before the model loads
        self.model, self.vocabs, self.info = load_model_dir(Path(model_dir), weights_file)
        self.lexicon_dir = Path(model_dir)
        if ensemble:
            self.model = Ensemble([self.model, *(self._member(Path(model_dir), Path(d),
                                                              weights_file)
                                                 for d in ensemble)])
        self.model.to(self.device)
        self.dtype = resolve_precision(precision, self.device, training=False)
        self.precision = precision_name(self.dtype)
        if self.dtype is torch.int8:
            self.precision = quantize_linears(self.model).describe()
        elif self.dtype is not None:  # weights converted once: autocast would recast them
            self.model.to(self.dtype)
        self.max_source_tokens = self.model.config.max_positions
        self.shortlist = (load_shortlist(Path(model_dir), self.vocabs, ensemble)
                          if shortlist else None)
        self.graphs = (CudaGraphs(self.model) if cuda_graphs and self.device.type == "cuda"
                       and isinstance(self.model, Transformer) and self.shortlist is None
                       else None)

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
                     "precision": self.precision}
        if isinstance(self.model, Ensemble):
            described["ensemble"] = len(self.model.members)
        if self.graphs is not None:
            described["cuda_graphs"] = True
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
               constraints: list[TargetConstraints | None] | None = None,
               start: list[tuple[int, ...]] | None = None) -> list[list[Hypothesis]]:
        src = _padded(batch).to(self.device)
        forced = None if start is None else torch.tensor(start, dtype=torch.long,
                                                         device=self.device)
        if self.shortlist is not None:  # the same search, over the batch's shortlist
            return shortlist_search(self.model, self.shortlist, batch, src, o, constraints,
                                    forced)
        if self.graphs is not None and CudaGraphs.takes(o, constraints, len(batch)):
            try:
                return self.graphs.search(src, o, forced)
            except RuntimeError as e:  # a kernel this GPU or torch cannot capture
                warnings.warn(f"CUDA graphs unavailable here ({e}); decoding step by step",
                              stacklevel=2)
                self.graphs = None
        return search(self.model, src, o, constraints, forced)


def _padded(rows: list[list[int]]) -> torch.Tensor:
    """Token ids (B, longest), padded at the end."""
    out = torch.full((len(rows), max(len(r) for r in rows)), PAD_ID, dtype=torch.long)
    for row, ids in enumerate(rows):
        out[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return out
