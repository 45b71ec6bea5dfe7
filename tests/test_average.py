"""Checkpoint averaging: the mean of the last N numbered checkpoints, as a model directory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from conftest import tfm
from safetensors.torch import load_file
from tokenizers import Tokenizer

from tfm.atomic import atomic_write_bytes
from tfm.checkpoint import save_model_dir, weights_to_bytes
from tfm.config import ModelConfig
from tfm.decoding.torch_engine import TorchTranslator
from tfm.errors import ModelError, UsageError
from tfm.model import Transformer
from tfm.model_info import ModelInfo
from tfm.training.average import average_checkpoints, numbered_checkpoints

STEPS = (100, 200, 300)


def tiny_config(vocab: int, d_model: int = 32) -> ModelConfig:
    return ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=d_model, n_heads=2,
                       encoder_layers=1, decoder_layers=1, d_ff=64, dropout=0.0)


def write_checkpoint(run: Path, step: int, model: torch.nn.Module) -> Path:
    path = run / "checkpoints" / f"step_{step:08d}.safetensors"
    atomic_write_bytes(path, weights_to_bytes(model, {"format": "pt", "step": str(step)}))
    return path


@pytest.fixture
def run_dir(tmp_path: Path, tokenizer: Tokenizer) -> Path:
    """A training run's directory with three numbered checkpoints of different weights."""
    run = tmp_path / "run"
    config = tiny_config(tokenizer.get_vocab_size())
    for i, step in enumerate(STEPS):
        torch.manual_seed(i)
        model = Transformer(config)
        if i == 0:
            save_model_dir(run, model, tokenizer, ModelInfo(
                config, src_lang="en", tgt_lang="de",
                provenance={"seed": 1, "best_step": 100, "valid_bleu": 12.3}))
        write_checkpoint(run, step, model)
    return run


def test_the_average_of_two_checkpoints_is_their_elementwise_mean(run_dir: Path) -> None:
    result = average_checkpoints(run_dir, last=2)
    assert result.steps == [200, 300]
    assert result.output == run_dir / "averaged"
    a = load_file(run_dir / "checkpoints" / "step_00000200.safetensors")
    b = load_file(run_dir / "checkpoints" / "step_00000300.safetensors")
    mean = load_file(result.output / "model.safetensors")
    assert mean.keys() == a.keys()
    for name in a:
        assert torch.equal(mean[name], (a[name] + b[name]) / 2), name


def test_the_averaged_directory_is_a_complete_model_that_translates(
    run_dir: Path, tmp_path: Path,
) -> None:
    out = tmp_path / "avg"
    average_checkpoints(run_dir, last=3, output=out)
    config = json.loads((out / "config.json").read_text())
    assert config["provenance"]["averaged_steps"] == list(STEPS)
    assert "valid_bleu" not in config["provenance"]  # that score was the best checkpoint's
    assert config["provenance"]["seed"] == 1
    assert (out / "tokenizer.json").read_text() == (run_dir / "tokenizer.json").read_text()
    translator = TorchTranslator(out, device="cpu")
    results = translator.translate(["A dog runs."], translator.default_options(
        beam=2, max_len_a=0.0, max_len_b=5))
    assert len(results) == 1


def test_checkpoints_are_found_by_step_oldest_first(run_dir: Path) -> None:
    (run_dir / "checkpoints" / ".step_00000400.safetensors.abc.tmp").write_bytes(b"partial")
    assert list(numbered_checkpoints(run_dir)) == list(STEPS)


def test_asking_for_more_checkpoints_than_there_are_is_refused(run_dir: Path) -> None:
    with pytest.raises(UsageError, match="--last 4 needs 4 .* only 3 .*--keep-last"):
        average_checkpoints(run_dir, last=4)


def test_a_missing_model_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ModelError, match="no such model directory"):
        average_checkpoints(tmp_path / "nope", last=2)


def test_a_checkpoint_of_another_shape_is_refused(run_dir: Path, tokenizer: Tokenizer) -> None:
    write_checkpoint(run_dir, 400, Transformer(tiny_config(tokenizer.get_vocab_size(), 64)))
    with pytest.raises(ModelError, match="step_00000400.*shape"):
        average_checkpoints(run_dir, last=2)


def test_the_training_run_itself_is_never_overwritten(run_dir: Path) -> None:
    with pytest.raises(UsageError, match="training run itself"):
        average_checkpoints(run_dir, last=2, output=run_dir)


def test_the_command_line_averages_and_reports_errors_in_one_line(run_dir: Path) -> None:
    ok = tfm("average", "-m", str(run_dir), "--last", "2", "-o", str(run_dir.parent / "avg"))
    assert ok.returncode == 0, ok.stderr
    assert "steps 200, 300" in ok.stderr
    assert (run_dir.parent / "avg" / "model.safetensors").exists()
    bad = tfm("average", "-m", str(run_dir), "--last", "9")
    assert bad.returncode == 2
    lines = [line for line in bad.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:") and "--last 9" in lines[0]


def test_the_average_keeps_the_runs_vocabulary_shortlist(run_dir: Path) -> None:
    """A shortlist is built from the data, not the weights: the average serves it too."""
    from tfm.checkpoint import save_recorded
    from tfm.integrity import Manifest
    from tfm.layout import ModelDir

    shortlist = b"the shortlist's bytes"
    save_recorded(run_dir, {ModelDir(run_dir).shortlist: shortlist})
    result = average_checkpoints(run_dir, last=2)
    copied = ModelDir(result.output).shortlist
    assert copied.read_bytes() == shortlist
    manifest = Manifest.read(result.output)
    assert manifest.name(copied) in manifest.files  # recorded, and intact
    assert manifest.damage(copied, shortlist) is None
