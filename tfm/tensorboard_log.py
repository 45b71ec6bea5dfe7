"""Optional TensorBoard logging of the training metrics (``tfm train --tensorboard DIR``).

The tensorboard package is not a dependency of tfm: when it is missing, asking for TensorBoard
is a usage error that says how to install it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tfm.errors import UsageError
from tfm.train import TrainReporter

TRAIN_SCALARS = ("loss", "nll", "ppl", "lr", "tokens_per_s")
VALID_SCALARS = ("loss", "nll", "ppl", "bleu")


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

    def end(self) -> None:
        if self.writer is not None:
            self.writer.close()
            self.writer = None


__all__ = ["TensorBoardReporter", "require_tensorboard"]
