"""Rich progress display for training: step, epoch, loss, ppl, lr, tokens/s, ETA."""

from __future__ import annotations

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

from tfm.train import TrainReporter


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
        bleu = f" bleu {m['bleu']:.2f} (best {m['best_bleu']:.2f})" if "bleu" in m else ""
        self.console.print(f"[cyan]valid[/] step {m['step']} loss {m['loss']:.3f} "
                           f"ppl {m['ppl']:.2f}{bleu}", highlight=False)

    def message(self, text: str) -> None:
        self.console.print(text, markup=False, highlight=False)

    def end(self) -> None:
        if self.progress is not None:
            self.progress.stop()
            self.progress = None
