"""Checkpoint averaging: the elementwise mean of the weights of a run's last N numbered
checkpoints, written as a new, self-contained model directory.

Averaging the last few checkpoints of a run (Vaswani et al. 2017 average the last 5 or 20)
smooths out the noise of the final updates and usually gains a little BLEU at no cost.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch

from tfm.checkpoint import load_weights, save_model_dir, save_recorded
from tfm.data.tokenizer import load_vocabularies
from tfm.errors import ModelError, UsageError
from tfm.integrity import Manifest
from tfm.layout import ModelDir
from tfm.model import Transformer
from tfm.model_info import read_model_info

# Provenance that describes the best checkpoint, not an average.
_NOT_INHERITED = ("best_step", "valid_bleu", "valid_bleu_signature", "valid_loss")


@dataclass
class AverageResult:
    output: Path
    steps: list[int]  # the steps averaged, oldest first


def numbered_checkpoints(model_dir: Path) -> dict[int, Path]:
    """The numbered checkpoints of a run directory, by step, oldest first."""
    return ModelDir(model_dir).numbered_checkpoints()


def average_checkpoints(model_dir: Path, last: int, output: Path | None = None
                        ) -> AverageResult:
    """Average the weights of the ``last`` latest checkpoints in ``model_dir/checkpoints`` and
    write a model directory ``output`` (default ``model_dir/averaged``): config.json (its
    provenance lists the averaged steps), tokenizer.json, model.safetensors, and the vocabulary
    shortlist if ``model_dir`` has one.

    Each checkpoint is loaded into the model of ``model_dir/config.json``, which refuses any
    that does not fit it; sums are kept in float64 and the mean stored in the weights' dtype.
    """
    model_dir = Path(model_dir)
    files = ModelDir(model_dir)
    output = Path(output) if output is not None else files.averaged
    if last < 1:
        raise UsageError(f"--last must be at least 1, not {last}")
    info = read_model_info(model_dir)  # refuses a missing or foreign directory
    if output.resolve() == model_dir.resolve():
        raise UsageError(f"--output {output} is the training run itself; write the average "
                         "to another directory")
    if ModelDir(output).train_state.exists():
        raise UsageError(f"--output {output} holds a training run; choose another directory")
    available = numbered_checkpoints(model_dir)
    if len(available) < last:
        have = (f"only {len(available)} (steps {', '.join(map(str, available))})"
                if available else "none")
        raise UsageError(f"{model_dir}: --last {last} needs {last} numbered checkpoints in "
                         f"{files.checkpoints.name}/ but there are {have}; lower --last, or train "
                         f"with --keep-last {last} or more")
    steps = list(available)[-last:]

    model = Transformer(info.model)
    manifest = Manifest.read(model_dir)
    sums: dict[str, torch.Tensor] = {}
    for step in steps:
        data = available[step].read_bytes()
        load_weights(model, available[step], data)  # refuses missing names, other shapes
        damage = manifest.damage(available[step], data)
        if damage is not None:
            raise ModelError(f"{available[step]}: damaged since it was written ({damage}); "
                             "restore it, or average fewer checkpoints (a lower --last)")
        for name, tensor in model.state_dict().items():
            if name in sums:
                sums[name] += tensor.double()
            else:
                sums[name] = tensor.double().clone()
    reference = model.state_dict()
    mean = {name: (total / len(steps)).to(reference[name].dtype)
            for name, total in sums.items()}
    model.load_state_dict(mean)

    vocabs = load_vocabularies(files.tokenizer)
    info.provenance = {k: v for k, v in info.provenance.items() if k not in _NOT_INHERITED}
    info.provenance["averaged_steps"] = steps
    save_model_dir(output, model, vocabs, info)
    if files.shortlist.is_file():  # built from the data, not the weights: it serves the average
        save_recorded(output, {ModelDir(output).shortlist: files.shortlist.read_bytes()})
    return AverageResult(output, steps)


__all__ = ["AverageResult", "average_checkpoints", "numbered_checkpoints"]
