"""bench/curve.py's picture: BLEU against minutes of training, one line per run. bench/ is not a
package: the script is loaded from its file."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

import pytest
from bench_scripts import load
from matplotlib.image import imread

from tfm.plotting import DPI


def curve_script() -> ModuleType:
    return load("curve")


def test_bleu_against_time_draws_one_line_per_run_through_its_points(tmp_path: Path) -> None:
    plot_bleu_against_time = curve_script().plot_bleu_against_time
    curves = {"member 1": [(20.0, 27.3), (10.0, 14.5)], "together": [(10.0, 16.0)],
              "never scored": []}
    [axes] = plot_bleu_against_time(curves, tmp_path / "bleu.png", "en-de").axes
    lines = {line.get_label(): (list(line.get_xdata()), list(line.get_ydata()))
             for line in axes.get_lines()}
    assert lines == {"member 1": ([10.0, 20.0], [14.5, 27.3]),
                     "together": ([10.0], [16.0])}  # in time order; none for []
    assert axes.get_xlabel() == "minutes of training" and axes.get_ylabel() == "BLEU"
    assert imread(tmp_path / "bleu.png").shape[:2] == (4.5 * DPI, 7 * DPI)
    with pytest.raises(ValueError, match="no BLEU points"):
        plot_bleu_against_time({"x": []}, tmp_path / "none.png", "t")
