"""BLEU against training time: score every numbered checkpoint of a training run.

    python bench/curve.py runs/m30k/model --src test.en.gz --ref test.de.gz [--beam 5]
        [--ensemble runs/other/model ...] [--json curve.json] [--png curve.png]

Reads the run's metrics.jsonl for the training time at which each checkpoint was saved, and
prints one row per checkpoint: minutes, step, BLEU (sacrebleu, detokenised) with the signature.
``--ensemble DIR`` (repeatable): runs trained side by side with the same checkpoint schedule
(recipes/multi30k-ensemble.sh): each step's checkpoints of all runs decoded together, for the
steps every run has. ``--png``: the scores against minutes of training, beside the validation
BLEU each run logged while it trained (greedy, on its validation set: pass ``--src``/``--ref`` of
that set and ``--beam 1`` to compare like with like).
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import torch

from tfm.data.corpus import read_text_lines
from tfm.decoding.scoring import bleu
from tfm.decoding.torch_engine import TorchTranslator

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def elapsed_by_step(metrics: Path) -> dict[int, float]:
    """Seconds of training at each logged step."""
    times = {}
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "train":
            times[record["step"]] = record["elapsed"]
    return times


def plot_bleu_against_time(curves: dict[str, list[tuple[float, float]]], png_path: Path,
                           title: str) -> Figure:
    """BLEU against minutes of training, one line per name through its (minutes, BLEU)
    points (runs trained side by side, and their ensemble, say), written to ``png_path`` as a
    PNG; returns the figure. Drawn as tfm.plotting draws: on an Agg canvas, without pyplot."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    from tfm.plotting import DPI

    if not any(curves.values()):
        raise ValueError("no BLEU points to draw")
    figure = Figure(figsize=(7, 4.5), layout="constrained")
    FigureCanvasAgg(figure)
    axes = figure.subplots()
    for name, points in curves.items():
        if points:
            minutes, scores = zip(*sorted(points))
            axes.plot(minutes, scores, label=name, marker="o", markersize=3)
    axes.set_xlabel("minutes of training")
    axes.set_ylabel("BLEU")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.suptitle(title)
    figure.savefig(png_path, format="png", dpi=DPI)
    return figure


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--ensemble", type=Path, action="append", default=[])
    parser.add_argument("--json", type=Path)
    parser.add_argument("--png", type=Path)
    parser.add_argument("--title", default="BLEU against training time")
    args = parser.parse_args()

    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    times = elapsed_by_step(args.model / "metrics.jsonl")
    rows = []
    threads = torch.get_num_threads()
    for path in sorted((args.model / "checkpoints").glob("step_*.safetensors")):
        if not all((d / "checkpoints" / path.name).is_file() for d in args.ensemble):
            continue
        step = int(re.search(r"step_(\d+)", path.name).group(1))
        logged = [s for s in times if s <= step]
        minutes = times[max(logged)] / 60 if logged else float("nan")
        # Decoded as tfm translate decodes, by its default workers: each translator leaves this
        # thread one CPU thread (tfm.decoding.workers), so give them all back first.
        torch.set_num_threads(threads)
        translator = TorchTranslator(args.model, "cpu", f"checkpoints/{path.name}",
                                     ensemble=args.ensemble, workers=None)
        options = translator.default_options(beam=args.beam)
        hypotheses = [t.text for t in translator.translate(sources, options)]
        score = bleu(hypotheses, references)
        rows.append({"step": step, "minutes": round(minutes, 1), "bleu": round(score.score, 2),
                     "signature": score.signature})
        print(f"{minutes:6.1f} min  step {step:6d}  BLEU {score.score:5.2f}", flush=True)
    if rows:
        print(f"signature: {rows[-1]['signature']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    if args.png and rows:
        from tfm.plotting import read_metrics

        runs = [args.model, *args.ensemble]
        name = "decoded together" if args.ensemble else "its checkpoints"
        curves = {f"{name} (beam {args.beam})": [(r["minutes"], r["bleu"]) for r in rows]}
        for run in runs:  # what each run logged (validation, greedy) as it trained
            curves[f"{run.name}, as logged"] = [
                (r["elapsed"] / 60, r["bleu"]) for r in read_metrics(run / "metrics.jsonl")
                if r.get("kind") == "valid" and r.get("bleu") is not None and "elapsed" in r]
        plot_bleu_against_time(curves, args.png, args.title)
    sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
