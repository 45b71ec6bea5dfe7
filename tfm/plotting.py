"""Pictures: the learning curve of a training run (from metrics.jsonl) and the cross-attention
of one translation as a heatmap.

matplotlib is imported only when a picture is drawn, and used through its object interface
with the Agg canvas: no pyplot, no global backend switch, no display needed. The ``*_figure``
functions build a picture, the ``plot_*`` functions also write it as a PNG; both return the
matplotlib Figure, whose axes hold what was drawn.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tfm.atomic import atomic_write_bytes
from tfm.errors import DataError

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl file; a line cut short by a kill is skipped."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except FileNotFoundError as e:
        raise DataError(f"{path}: no such metrics file (written by `tfm train`)") from e
    records = []
    for line in lines:
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if isinstance(record, dict) and "step" in record:
            records.append(record)
    return records


def learning_curve_figure(records: list[dict[str, Any]], title: str,
                          against: str = "step") -> Figure:
    """Train and validation loss and, in a second panel when validation has BLEU, validation
    BLEU (a multilingual run's macro-average and each direction's), from metrics.jsonl
    records: against the step, or with ``against="time"`` against the minutes of training
    (records written before tfm timed validations have no time and are left out)."""
    if against not in ("step", "time"):
        raise ValueError(f"against must be 'step' or 'time', not {against!r}")
    if against == "time":
        records = [r for r in records if isinstance(r.get("elapsed"), (int, float))]
    train = [r for r in records if r.get("kind") == "train" and "loss" in r]
    valid = [r for r in records if r.get("kind") == "valid" and "loss" in r]
    bleu = [r for r in valid if r.get("bleu") is not None]
    if not train and not valid:
        raise DataError("no training or validation records to draw"
                        + (" with their training time" if against == "time" else ""))

    def x(rows: list[dict[str, Any]]) -> list[float]:
        return [r["step"] if against == "step" else r["elapsed"] / 60 for r in rows]

    height = 6.5 if bleu else 4
    # Margins fixed in inches (ticks, axis labels, the title): the panels' labels are short
    # and alike in every run, and working the layout out each time ("constrained") was a large
    # share of the drawing, which every training run does at its end (docs/BENCHMARKS.md).
    figure = _figure(figsize=(7, height), layout=None)
    figure.subplots_adjust(left=0.8 / 7, right=1 - 0.2 / 7, bottom=0.55 / height,
                           top=1 - 0.5 / height, hspace=0.5 / height)
    axes = figure.subplots(2 if bleu else 1, 1, sharex=True, squeeze=False)[:, 0]
    loss_axes = axes[0]
    if train:
        loss_axes.plot(x(train), [r["loss"] for r in train],
                       label="train loss", linewidth=1)
    if valid:
        loss_axes.plot(x(valid), [r["loss"] for r in valid],
                       label="valid loss", marker="o", markersize=3)
    loss_axes.set_ylabel("loss (label-smoothed, per token)")
    loss_axes.grid(alpha=0.3)
    loss_axes.legend()
    if bleu:
        directions = list(dict.fromkeys(d for r in bleu for d in r.get("directions") or {}))
        axes[1].plot(x(bleu), [r["bleu"] for r in bleu],
                     label="valid BLEU" + (" (macro-average)" if directions else ""),
                     marker="o", markersize=3, color="black" if directions else "tab:green")
        for direction in directions:  # a multilingual run: each direction's BLEU too
            rows = [r for r in bleu if direction in (r.get("directions") or {})]
            axes[1].plot(x(rows), [r["directions"][direction]["bleu"] for r in rows],
                         label=direction, linewidth=1, linestyle="--", marker=".")
        axes[1].set_ylabel("BLEU")
        axes[1].grid(alpha=0.3)
        axes[1].legend()
    axes[-1].set_xlabel("step" if against == "step" else "minutes of training")
    figure.suptitle(f"Learning curve: {title}")
    return figure


def plot_learning_curve(metrics_path: Path, png_path: Path, against: str = "step") -> Figure:
    """Draw the learning curve of a training run's metrics.jsonl (titled with the run's
    directory name), against the step or the minutes of training, and write it to
    ``png_path`` as a PNG (atomically); returns the figure."""
    records = read_metrics(metrics_path)
    title = Path(metrics_path).parent.name
    try:
        figure = learning_curve_figure(records, title, against)
    except DataError as e:
        raise DataError(f"{metrics_path}: {e}") from e
    _write_png(figure, Path(png_path))
    return figure


def attention_figure(attention: list[list[float]], source: list[str],
                     target: list[str]) -> Figure:
    """Heatmap of cross-attention: one row per target symbol, one column per source symbol."""
    width = max(4.0, 0.45 * len(source) + 1.5)
    height = max(3.0, 0.35 * len(target) + 1.5)
    figure = _figure(figsize=(width, height))
    axes = figure.subplots()
    image = axes.imshow(attention, cmap="Blues", vmin=0.0, vmax=1.0, aspect="auto")
    axes.set_xticks(range(len(source)), source, rotation=60, ha="right")
    axes.set_yticks(range(len(target)), target)
    axes.set_xlabel("source")
    axes.set_ylabel("target")
    figure.colorbar(image, ax=axes, label="attention")
    return figure


def plot_attention(attention: list[list[float]], source: list[str], target: list[str],
                   png_path: Path) -> Figure:
    """The attention heatmap written to ``png_path`` as a PNG (atomically); returns the
    figure."""
    figure = attention_figure(attention, source, target)
    _write_png(figure, Path(png_path))
    return figure


DPI = 100  # pixels per inch of the PNGs


def _figure(figsize: tuple[float, float], layout: str | None = "constrained") -> Figure:
    """An empty figure on an Agg canvas of its own (no pyplot state)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=figsize, layout=layout)
    FigureCanvasAgg(figure)
    return figure


def _write_png(figure: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    figure.savefig(buffer, format="png", dpi=DPI)
    atomic_write_bytes(path, buffer.getvalue())


__all__ = ["attention_figure", "learning_curve_figure", "plot_attention", "plot_learning_curve",
           "read_metrics"]
