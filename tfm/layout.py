"""The layout of a model directory (and of the training run that writes one): the one place where
its file names are spelt.

    config.json                      format version, architecture, languages, generation
                                     defaults, provenance (tfm.checkpoint.ModelInfo)
    tokenizer.json                   the vocabulary; a model with one vocabulary per language has
                                     tokenizer.src.json and tokenizer.tgt.json instead
    model.safetensors                the weights translate uses (the best by validation BLEU)
    last.safetensors                 the latest weights of the run
    checkpoints/step_N.safetensors   numbered weights kept for averaging
    train_state.pt                   weights, optimizer, RNG, data position: what resume reads
    train_state.prev.pt              the training state of the save before (resume falls back
                                     to it when train_state.pt is damaged)
    manifest.json                    size and sha256 of every file above (tfm.integrity),
                                     checked before a file is used
    shortlist.safetensors            optional: each source token's likely target tokens
                                     (`tfm shortlist`, tfm.data.shortlist), for
                                     `translate --shortlist`; readers that do not know it
                                     ignore it
    alignment_lexicon.json.gz        optional: the word alignments of the training corpus
                                     counted (`tfm align`, tfm.data.lexical_alignment),
                                     which place a document's inline tags; copied from the
                                     prepared dataset by `tfm train`
    train_config.json                the TrainConfig of the run
    run.yaml                         the command's options resolved, a run config that
                                     repeats the run (`tfm train --config run.yaml`)
    metrics.jsonl                    one JSON line per logged step and per validation
    learning_curve.png               losses and validation BLEU against step
    averaged/                        the default output of `tfm average`

Only the first three make a model directory that translate and eval can use (with
manifest.json, which they check it against, where there is one); the rest belong to the
training run.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

CONFIG_FILE = "config.json"
TOKENIZER_FILE = "tokenizer.json"
WEIGHTS_FILE = "model.safetensors"
MANIFEST_FILE = "manifest.json"
SHORTLIST_FILE = "shortlist.safetensors"
_NUMBERED = re.compile(r"step_(\d+)\.safetensors")


@dataclass(frozen=True)
class ModelDir:
    """Paths of the files of the model (or run) directory ``root``."""

    root: Path

    def __post_init__(self) -> None:
        object.__setattr__(self, "root", Path(self.root))

    @property
    def config(self) -> Path:
        return self.root / CONFIG_FILE

    @property
    def tokenizer(self) -> Path:
        """The tokenizer's name; separate vocabularies sit beside it (tfm.data.tokenizer)."""
        return self.root / TOKENIZER_FILE

    @property
    def weights(self) -> Path:
        return self.root / WEIGHTS_FILE

    @property
    def last_weights(self) -> Path:
        return self.root / "last.safetensors"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def train_state(self) -> Path:
        return self.root / "train_state.pt"

    @property
    def previous_train_state(self) -> Path:
        """The training state of the save before the latest."""
        return self.root / "train_state.prev.pt"

    @property
    def manifest(self) -> Path:
        return self.root / MANIFEST_FILE

    @property
    def shortlist(self) -> Path:
        return self.root / SHORTLIST_FILE

    @property
    def train_config(self) -> Path:
        return self.root / "train_config.json"

    @property
    def run_config(self) -> Path:
        return self.root / "run.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.jsonl"

    @property
    def curve(self) -> Path:
        return self.root / "learning_curve.png"

    @property
    def averaged(self) -> Path:
        return self.root / "averaged"

    def checkpoint(self, step: int) -> Path:
        """The numbered weights of step ``step``."""
        return self.checkpoints / f"step_{step:08d}.safetensors"

    def numbered_checkpoints(self) -> dict[int, Path]:
        """The numbered checkpoints present, by step, oldest first."""
        found = {}
        if self.checkpoints.is_dir():
            for path in self.checkpoints.iterdir():
                match = _NUMBERED.fullmatch(path.name)
                if match and path.is_file():
                    found[int(match.group(1))] = path
        return dict(sorted(found.items()))

    def run_files(self) -> list[Path]:
        """Every file a training run writes here (the checkpoints folder aside), and the
        vocabulary shortlist made for its model (``tfm shortlist``), which a new run's model
        would not match: what ``tfm train --overwrite`` deletes, and nothing else."""
        tokenizers = [self.tokenizer, self.tokenizer.with_suffix(".src.json"),
                      self.tokenizer.with_suffix(".tgt.json")]
        return [self.train_state, self.previous_train_state, self.train_config,
                self.run_config, self.metrics,
                self.curve, self.last_weights, self.weights, self.config, *tokenizers,
                self.shortlist, self.manifest]
