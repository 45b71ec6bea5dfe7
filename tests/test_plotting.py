"""The learning-curve picture: drawn at the end of training, never a reason for a run to fail."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tfm.config import ModelConfig, TrainConfig
from tfm.errors import DataError
from tfm.layout import ModelDir
from tfm.plotting import plot_learning_curve, read_metrics
from tfm.training.loop import train
from tfm.training.reporting import TrainReporter

CURVE_FILE = ModelDir(".").curve.name

TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def config(**overrides: Any) -> TrainConfig:
    values = dict(max_tokens=1024, lr=1e-3, warmup_steps=2, max_steps=4, valid_every=2,
                  save_every=10**6, log_every=1, precision="fp32", num_threads=1)
    values.update(overrides)
    return TrainConfig(**values)


class Messages(TrainReporter):
    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def test_training_draws_a_learning_curve(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config())
    png = (tmp_path / "m" / CURVE_FILE).read_bytes()
    assert png.startswith(PNG_MAGIC)
    assert len(png) > 10_000  # axes, two curves and a BLEU panel, not an empty canvas


def test_a_failing_picture_costs_one_warning_not_the_run(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(metrics_path: Path, png_path: Path) -> None:
        raise RuntimeError("no fonts\nsecond line")

    monkeypatch.setattr("tfm.plotting.plot_learning_curve", broken)
    reporter = Messages()
    result = train(dataset, tmp_path / "m", TINY, config(max_steps=2), reporter=reporter)
    assert result.step == 2
    assert reporter.lines == [f"warning: could not draw {CURVE_FILE}: no fonts"]
    assert not (tmp_path / "m" / CURVE_FILE).exists()


def write_metrics(path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_the_curve_is_drawn_from_metrics_alone_and_a_cut_line_is_skipped(tmp_path: Path) -> None:
    records = [{"kind": "train", "step": s, "loss": 8.0 / s} for s in range(1, 21)]
    records += [{"kind": "valid", "step": s, "loss": 7.0 / s, "bleu": s / 2.0}
                for s in (10, 20)]
    metrics = write_metrics(tmp_path / "metrics.jsonl", records, tail='{"kind": "tr')
    assert len(read_metrics(metrics)) == 22
    plot_learning_curve(metrics, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG_MAGIC)


def test_a_curve_without_validation_has_one_panel(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl",
                            [{"kind": "train", "step": s, "loss": 1.0} for s in (1, 2)])
    plot_learning_curve(metrics, tmp_path / "curve.png")
    assert (tmp_path / "curve.png").read_bytes().startswith(PNG_MAGIC)


def test_nothing_to_draw_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such metrics file"):
        plot_learning_curve(tmp_path / "metrics.jsonl", tmp_path / "curve.png")
    metrics = write_metrics(tmp_path / "metrics.jsonl", [])
    with pytest.raises(DataError, match="no training or validation records"):
        plot_learning_curve(metrics, tmp_path / "curve.png")
