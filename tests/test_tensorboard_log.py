"""TensorBoard logging is optional: without the package, --tensorboard is one clear error; with
it, train and valid scalars are written against the step."""

from __future__ import annotations

import importlib.util
import sys
import types
from pathlib import Path
from typing import Any

import pytest
from conftest import tfm

from tfm.config import ModelConfig, TrainConfig
from tfm.data.corpus import CorpusSpec
from tfm.data.prepare import prepare
from tfm.data.tokenizer import save_tokenizer, train_tokenizer
from tfm.errors import UsageError
from tfm.training.loop import train
from tfm.training.reporting import require_tensorboard

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"
HAVE_TENSORBOARD = importlib.util.find_spec("tensorboard") is not None


class FakeSummaryWriter:
    """Records what torch's SummaryWriter would write."""

    instances: list[FakeSummaryWriter] = []

    def __init__(self, log_dir: str) -> None:
        self.log_dir = log_dir
        self.scalars: list[tuple[str, float, int]] = []
        self.closed = False
        FakeSummaryWriter.instances.append(self)

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.scalars.append((tag, value, step))

    def flush(self) -> None: ...

    def close(self) -> None:
        self.closed = True


@pytest.mark.skipif(HAVE_TENSORBOARD, reason="tensorboard is installed here")
def test_without_tensorboard_the_option_is_one_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="pip install tensorboard"):
        require_tensorboard()
    result = tfm("train", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "m"),
                 "--max-steps", "1", "--tensorboard", str(tmp_path / "tb"))
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error:"), result.stderr
    assert "pip install tensorboard" in lines[0]
    assert not (tmp_path / "tb").exists() and not (tmp_path / "m").exists()


def test_train_and_valid_scalars_are_logged_against_the_step(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeSummaryWriter  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    FakeSummaryWriter.instances.clear()
    texts = (DEMO / "train.en").read_text().splitlines()[:200] + \
        (DEMO / "train.de").read_text().splitlines()[:200]
    save_tokenizer(train_tokenizer(texts, vocab_size=300), tmp_path / "tok.json")
    prepare(CorpusSpec((str(DEMO / "train"),), "en", "de"), tmp_path / "tok.json",
            tmp_path / "data", valid=CorpusSpec((str(DEMO / "valid"),), "en", "de"))
    config = TrainConfig(max_tokens=1024, warmup_steps=2, max_steps=3, valid_every=3,
                         log_every=1, valid_bleu=False, precision="fp32", num_threads=1)
    model = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)
    train(tmp_path / "data", tmp_path / "m", model, config, tensorboard=tmp_path / "tb")

    (writer,) = FakeSummaryWriter.instances
    assert writer.log_dir == str(tmp_path / "tb")
    assert writer.closed
    tags: dict[str, list[Any]] = {}
    for tag, _value, step in writer.scalars:
        tags.setdefault(tag, []).append(step)
    assert tags["train/loss"] == [1, 2, 3]
    assert tags["train/lr"] == [1, 2, 3]
    assert tags["valid/loss"] == [3]
    assert "valid/bleu" not in tags  # no BLEU was computed
