"""Learning-rate schedules: the paper's warmup + inverse square root, and budget-aware linear
or cosine decay to zero."""

from __future__ import annotations

import math

from tfm.config import TrainConfig
from tfm.errors import UsageError

SCHEDULES = ("inverse-sqrt", "linear", "cosine")


def learning_rate(step: int, peak: float, warmup: int, schedule: str = "inverse-sqrt",
                  progress: float = 0.0) -> float:
    """The learning rate of optimizer step ``step`` (counted from 1).

    ``inverse-sqrt`` (the paper's): linear warmup to ``peak`` over ``warmup`` steps, then decay
    as 1/sqrt(step). ``linear`` and ``cosine`` follow the same warmup, then decay to 0 as the
    run's budget is used up: ``progress`` is the fraction of it used so far (0 to 1; see
    ``budget_progress``). Under a fixed budget, decaying to zero by its end trains better
    models than a schedule that does not know the end (Li et al., 2020, "Budgeted training").
    """
    step = max(step, 1)
    ramp = step / warmup if warmup > 0 else 1.0
    if schedule == "inverse-sqrt":
        return peak * min(ramp, math.sqrt(warmup / step)) if warmup > 0 else peak
    left = 1.0 - min(max(progress, 0.0), 1.0)
    if schedule == "linear":
        decay = left
    elif schedule == "cosine":
        decay = 0.5 * (1.0 + math.cos(math.pi * (1.0 - left)))
    else:
        raise UsageError(f"unknown --lr-schedule {schedule!r}; choose one of: "
                         f"{', '.join(SCHEDULES)}")
    return peak * min(ramp, decay)


def budget_progress(config: TrainConfig, step: int, epochs: float, seconds: float) -> float:
    """The fraction of the run's budget used after ``step`` steps, ``epochs`` epochs (with
    fractions) and ``seconds`` of training: the largest of the fractions of --max-steps,
    --max-epochs and --max-time, since the first budget to run out ends the run."""
    fractions = [0.0]
    if config.max_steps:
        fractions.append(step / config.max_steps)
    if config.max_epochs:
        fractions.append(epochs / config.max_epochs)
    if config.max_time:
        fractions.append(seconds / (config.max_time * 60))
    return max(fractions)
