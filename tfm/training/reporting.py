"""Training progress, reported: the reporter protocol the loop calls, and its implementations
(a rich progress bar or log lines, TensorBoard events). The loop depends on this module,
never the other way round.

TensorBoard is optional: the tensorboard package is not a dependency of tfm, and asking for it
without the package is a usage error that says how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from tfm.errors import UsageError

TRAIN_SCALARS = ("loss", "nll", "ppl", "lr", "tokens_per_s")
VALID_SCALARS = ("loss", "nll", "ppl", "bleu")


def sampling_line(sampling: dict[str, Any]) -> str:
    """How a multilingual run draws its directions, as the start of training says it:
    ``Directions (temperature 1): en-de 50.0% of 29,000 pairs, ...``."""
    parts = [f"{d} {p:.1%} of {n:,} pairs" for d, p, n in
             zip(sampling["directions"], sampling["probabilities"], sampling["pairs"])]
    return f"Directions (by {sampling['by']}): " + ", ".join(parts)


class TrainReporter:
    """Receives progress; the CLI draws it, tests ignore it."""

    def start(self, info: dict[str, Any]) -> None: ...
    def step(self, metrics: dict[str, Any]) -> None: ...
    def validation(self, metrics: dict[str, Any]) -> None: ...
    def message(self, text: str) -> None: ...
    def end(self) -> None: ...


class Reporters(TrainReporter):
    """Several reporters as one."""

    def __init__(self, reporters: list[TrainReporter]) -> None:
        self.reporters = reporters

    def start(self, info: dict[str, Any]) -> None:
        for r in self.reporters:
            r.start(info)

    def step(self, metrics: dict[str, Any]) -> None:
        for r in self.reporters:
            r.step(metrics)

    def validation(self, metrics: dict[str, Any]) -> None:
        for r in self.reporters:
            r.validation(metrics)

    def message(self, text: str) -> None:
        for r in self.reporters:
            r.message(text)

    def end(self) -> None:
        for r in self.reporters:
            r.end()


class RichTrainReporter(TrainReporter):
    """A live progress bar on a terminal; plain log lines when output is not a terminal."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self.progress: Progress | None = None
        self.task: Any = None

    def start(self, info: dict[str, Any]) -> None:
        c = self.console
        c.print(f"Model: {info['parameters']:,} parameters on {info['device']} "
                f"({info['precision']}); data: {info['train_pairs']:,} training pairs in "
                f"{info['batches_per_epoch']:,} batches, {info['valid_pairs']:,} validation pairs")
        sampling = info.get("sampling") or {}
        if len(sampling.get("directions", [])) > 1:
            c.print(sampling_line(sampling), highlight=False)
        if info.get("resumed_step") is not None:
            limit = f" of {info['max_steps']}" if info.get("max_steps") else ""
            c.print(f"Resuming at step {info['resumed_step']}{limit}")
        total = info.get("max_steps")
        if total is None and info.get("max_epochs"):
            total = info["max_epochs"] * info.get("steps_per_epoch", info["batches_per_epoch"])
        self.progress = Progress(
            TextColumn("[bold]step"), MofNCompleteColumn(), BarColumn(bar_width=24),
            TextColumn("{task.fields[stats]}"), TimeElapsedColumn(),
            TextColumn("ETA"), TimeRemainingColumn(),
            console=c, transient=False, disable=not c.is_terminal,
        )
        self.progress.start()
        self.task = self.progress.add_task("train", total=total,
                                           completed=info.get("resumed_step") or 0, stats="")

    def step(self, m: dict[str, Any]) -> None:
        stats = (f"ep {m['epoch'] + 1} loss {m['loss']:.3f} ppl {m['ppl']:.1f} "
                 f"lr {m['lr']:.2e} {m['tokens_per_s']:,.0f} tok/s")
        if self.progress is not None:
            self.progress.update(self.task, completed=m["step"], stats=stats)
        if not self.console.is_terminal:
            self.console.print(f"step {m['step']} {stats}", highlight=False)

    def validation(self, m: dict[str, Any]) -> None:
        if "bleu" in m:
            score = f"loss {m['loss']:.3f} ppl {m['ppl']:.2f} bleu {m['bleu']:.2f} " \
                f"(best {m['best_bleu']:.2f})"
        else:  # the best model is the one of the lowest loss
            score = f"loss {m['loss']:.3f} (best {m['best_loss']:.3f}) ppl {m['ppl']:.2f}"
        if m.get("directions"):  # BLEU above is their macro-average
            score += " | " + " ".join(f"{d} {v['bleu']:.2f}/{v['chrf']:.1f}"
                                      for d, v in m["directions"].items())
        self.console.print(f"[cyan]valid[/] step {m['step']} {score}", highlight=False)

    def message(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None


def require_tensorboard() -> None:
    """Raise UsageError unless torch's SummaryWriter can be used (it needs tensorboard)."""
    try:
        from torch.utils.tensorboard import SummaryWriter  # noqa: F401
    except ImportError as e:
        raise UsageError("--tensorboard needs the tensorboard package: pip install "
                         "tensorboard (or train without --tensorboard)") from e


class TensorBoardReporter(TrainReporter):
    """Writes the train and valid scalars of a run as TensorBoard events in ``log_dir``
    (``train/loss``, ``valid/bleu``, ...), against the step. The writer opens at the start
    of training, so only the process that reports creates files."""

    def __init__(self, log_dir: Path) -> None:
        self.log_dir = Path(log_dir)
        self.writer: Any = None

    def start(self, info: dict[str, Any]) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(self.log_dir))

    def _add(self, prefix: str, names: tuple[str, ...], metrics: dict[str, Any]) -> None:
        if self.writer is None:
            return
        for name in names:
            if metrics.get(name) is not None:
                self.writer.add_scalar(f"{prefix}/{name}", metrics[name], metrics["step"])
        self.writer.flush()

    def step(self, metrics: dict[str, Any]) -> None:
        self._add("train", TRAIN_SCALARS, metrics)

    def validation(self, metrics: dict[str, Any]) -> None:
        self._add("valid", VALID_SCALARS, metrics)
        for direction, scores in (metrics.get("directions") or {}).items():  # valid/en-de/bleu
            self._add(f"valid/{direction}", ("bleu", "chrf"),
                      {**scores, "step": metrics["step"]})

    def end(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None
