"""The pictures: the learning curve (drawn at the end of training, never a reason for a run to
fail) and the attention heatmap. Each test checks what is drawn: the data of the plotted lines,
the image of the heatmap, the panels and the size of the PNG."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from conftest import tfm
from matplotlib.image import imread

from tfm.config import ModelConfig, TrainConfig
from tfm.errors import DataError
from tfm.layout import ModelDir
from tfm.plotting import (
    DPI,
    plot_attention,
    plot_learning_curve,
    read_metrics,
)
from tfm.training.loop import train
from tfm.training.reporting import TrainReporter

CURVE_FILE = ModelDir(".").curve.name

TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64)


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


def lines_of(axes) -> dict[str, tuple[list[float], list[float]]]:
    """The plotted lines of ``axes``, by label: (x data, y data)."""
    return {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
            for line in axes.get_lines()}


def write_metrics(path: Path, records: list[dict[str, Any]], tail: str = "") -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in records) + tail)
    return path


def test_training_draws_the_learning_curve_of_its_metrics(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config())
    written = imread(tmp_path / "m" / CURVE_FILE)
    # The picture is the curve of the run's own metrics: drawn again from metrics.jsonl, it is
    # the same image, pixel for pixel.
    figure = plot_learning_curve(tmp_path / "m" / "metrics.jsonl", tmp_path / "again.png")
    assert np.array_equal(written, imread(tmp_path / "again.png"))
    records = read_metrics(tmp_path / "m" / "metrics.jsonl")
    train_steps = [r["step"] for r in records if r["kind"] == "train"]
    assert train_steps == [1, 2, 3, 4]
    loss_panel, bleu_panel = figure.axes
    drawn = lines_of(loss_panel)
    assert drawn["train loss"][0] == train_steps
    assert drawn["valid loss"][0] == [2, 4]
    assert lines_of(bleu_panel)["valid BLEU"][0] == [2, 4]
    assert figure.texts[0].get_text() == "Learning curve: m"


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


def test_the_curve_draws_each_record_and_skips_a_cut_line(tmp_path: Path) -> None:
    records = [{"kind": "train", "step": s, "loss": 8.0 / s} for s in range(1, 21)]
    records += [{"kind": "valid", "step": s, "loss": 7.0 / s, "bleu": s / 2.0}
                for s in (10, 20)]
    metrics = write_metrics(tmp_path / "metrics.jsonl", records, tail='{"kind": "tr')
    assert len(read_metrics(metrics)) == 22
    figure = plot_learning_curve(metrics, tmp_path / "curve.png")
    loss_panel, bleu_panel = figure.axes
    assert lines_of(loss_panel) == {
        "train loss": (list(range(1, 21)), [8.0 / s for s in range(1, 21)]),
        "valid loss": ([10, 20], [0.7, 0.35]),
    }
    assert lines_of(bleu_panel) == {"valid BLEU": ([10, 20], [5.0, 10.0])}
    assert bleu_panel.get_xlabel() == "step" and bleu_panel.get_ylabel() == "BLEU"
    assert imread(tmp_path / "curve.png").shape[:2] == (6.5 * DPI, 7 * DPI)


def test_the_curve_against_time_puts_each_record_at_its_minutes_of_training(
        tmp_path: Path) -> None:
    records = [{"kind": "train", "step": 1, "loss": 5.0}]  # from before records were timed
    records += [{"kind": "train", "step": s, "loss": 8.0 / s, "elapsed": 30.0 * s}
                for s in (2, 4)]
    records += [{"kind": "valid", "step": 4, "loss": 1.5, "bleu": 12.0, "elapsed": 150.0}]
    metrics = write_metrics(tmp_path / "metrics.jsonl", records)
    loss_panel, bleu_panel = plot_learning_curve(metrics, tmp_path / "t.png", "time").axes
    assert lines_of(loss_panel) == {"train loss": ([1.0, 2.0], [4.0, 2.0]),
                                    "valid loss": ([2.5], [1.5])}
    assert lines_of(bleu_panel) == {"valid BLEU": ([2.5], [12.0])}
    assert bleu_panel.get_xlabel() == "minutes of training"
    untimed = write_metrics(tmp_path / "old.jsonl", records[:1])
    with pytest.raises(DataError, match="no training or validation records to draw with "
                       "their training time"):
        plot_learning_curve(untimed, tmp_path / "old.png", "time")


def test_plot_curve_time_writes_the_curve_against_time_beside_the_run(tmp_path: Path) -> None:

    write_metrics(tmp_path / "metrics.jsonl",
                  [{"kind": "train", "step": s, "loss": 1.0 / s, "elapsed": 6.0 * s}
                   for s in (1, 2)])
    result = tfm("plot-curve", str(tmp_path), "--time")
    assert result.returncode == 0, result.stderr
    assert imread(tmp_path / "learning_curve_time.png").shape[:2] == (4 * DPI, 7 * DPI)
    assert not (tmp_path / CURVE_FILE).exists()  # the step curve is left as it was


def test_a_curve_without_validation_has_one_panel(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl",
                            [{"kind": "train", "step": s, "loss": 1.0 / s} for s in (1, 2)])
    figure = plot_learning_curve(metrics, tmp_path / "curve.png")
    (panel,) = figure.axes
    assert lines_of(panel) == {"train loss": ([1, 2], [1.0, 0.5])}
    assert imread(tmp_path / "curve.png").shape[:2] == (4 * DPI, 7 * DPI)


def test_validation_without_bleu_is_drawn_without_a_bleu_panel(tmp_path: Path) -> None:
    metrics = write_metrics(tmp_path / "metrics.jsonl",
                            [{"kind": "valid", "step": 5, "loss": 2.0, "bleu": None}])
    (panel,) = plot_learning_curve(metrics, tmp_path / "curve.png").axes
    assert lines_of(panel) == {"valid loss": ([5], [2.0])}


def test_nothing_to_draw_is_a_data_error(tmp_path: Path) -> None:
    with pytest.raises(DataError, match="no such metrics file"):
        plot_learning_curve(tmp_path / "metrics.jsonl", tmp_path / "curve.png")
    metrics = write_metrics(tmp_path / "metrics.jsonl", [])
    with pytest.raises(DataError, match=r"metrics\.jsonl: no training or validation records"):
        plot_learning_curve(metrics, tmp_path / "curve.png")
    assert not (tmp_path / "curve.png").exists()


def test_the_attention_heatmap_shows_the_weights_between_the_symbols(tmp_path: Path) -> None:
    attention = [[0.9, 0.1, 0.0], [0.2, 0.7, 0.1]]
    figure = plot_attention(attention, ["ĠThe", "Ġdog", "</s>"], ["ĠDer", "ĠHund"],
                            tmp_path / "attention.png")
    heatmap = figure.axes[0]
    (image,) = heatmap.get_images()
    assert np.array_equal(image.get_array(), np.array(attention))
    assert [t.get_text() for t in heatmap.get_xticklabels()] == ["ĠThe", "Ġdog", "</s>"]
    assert [t.get_text() for t in heatmap.get_yticklabels()] == ["ĠDer", "ĠHund"]
    assert image.get_clim() == (0.0, 1.0)  # the colour scale is absolute, not per picture
    picture = imread(tmp_path / "attention.png")
    width, height = figure.get_size_inches() * DPI
    assert picture.shape[:2] == (round(height), round(width))

    def brightness(col: int, row: int) -> float:
        """The picture's brightness at the centre of a cell (display y runs upwards)."""
        x, y = heatmap.transData.transform((col, row))
        return float(picture[int(picture.shape[0] - y), int(x), :3].sum())

    # A stronger weight is a darker cell.
    assert brightness(0, 0) < brightness(1, 0) < brightness(2, 0)
    assert brightness(1, 1) < brightness(0, 1)
