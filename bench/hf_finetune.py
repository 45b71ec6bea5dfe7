"""What the two stand-in builders share (bench/marian_standin.py, bench/nllb_standin.py, the
Hugging Face side of docs/IMPORT.md's and docs/NLLB.md's experiments): Multi30k's lines read,
and Hugging Face's fine-tuning loop, written once so that both stand-ins train alike.

The loop is ``Seq2SeqTrainer`` for a time budget (--minutes) or a step budget (--max-steps):
AdamW (betas 0.9/0.98, no weight decay), the peak LR after --warmup steps, then linear decay to
zero at the end of the budget (the schedule tfm's --lr-schedule linear --max-time uses),
label smoothing 0.1, gradients clipped at 1, batches of --batch sentences grouped by length.
"""

from __future__ import annotations

import gzip
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from harness import log


def read_lines(path: Path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def line_range(spec: str, n: int) -> slice:
    """``--lines`` (``START:STOP``, either may be left out) of a file of ``n`` lines."""
    start, _, stop = spec.partition(":")
    return slice(int(start or 0), int(stop) if stop else n)


def finetune(model: Any, train: list[dict], collator: Any, args: Any, *, adam_eps: float,
             progress: Callable[[float, float], str], logging_steps: int = 10**7,
             bf16: bool = False) -> tuple[int, float]:
    """Train ``model`` on the features ``train`` (batched by ``collator``) under ``args``'s
    budget (minutes, max_steps), lr, warmup, batch and seed; every 50 steps a progress line
    (``progress(seconds, lr)`` says what of the speed), and the Trainer's loss every
    ``logging_steps``. Returns the steps taken and the seconds they took."""
    from transformers import Seq2SeqTrainer, Seq2SeqTrainingArguments, TrainerCallback

    budget = args.minutes * 60
    start = [0.0]

    def lr_factor(step: int) -> float:
        warm = min(1.0, (step + 1) / args.warmup) if args.warmup else 1.0
        if args.max_steps:  # a step budget: decay by steps, whatever else runs on the machine
            return warm * max(0.0, 1 - step / args.max_steps)
        if not start[0]:
            return warm
        return warm * max(0.0, 1 - (time.perf_counter() - start[0]) / budget)

    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr, betas=(0.9, 0.98),
                                  eps=adam_eps, weight_decay=0.0)
    scheduler = torch.optim.lr_scheduler.LambdaLR(optimizer, lr_factor)

    class Budget(TrainerCallback):
        def on_train_begin(self, a, state, control, **kw):
            start[0] = time.perf_counter()

        def on_log(self, a, state, control, logs=None, **kw):
            if logs and "loss" in logs:
                log(f"step {state.global_step}: loss {logs['loss']:.3f}")

        def on_step_end(self, a, state, control, **kw):
            elapsed = time.perf_counter() - start[0]
            if state.global_step % 50 == 0:
                log(f"step {state.global_step}: {elapsed / 60:.1f} min, "
                    f"{progress(elapsed, scheduler.get_last_lr()[0])}")
            if (args.max_steps and state.global_step >= args.max_steps) or (
                    not args.max_steps and elapsed >= budget):
                control.should_training_stop = True

    targs = Seq2SeqTrainingArguments(
        output_dir=str(args.out / "trainer"), per_device_train_batch_size=args.batch,
        max_steps=10**7, logging_steps=logging_steps, save_strategy="no", report_to="none",
        use_cpu=True, dataloader_num_workers=0, train_sampling_strategy="group_by_length",
        seed=args.seed, label_smoothing_factor=0.1, max_grad_norm=1.0, disable_tqdm=True,
        bf16=bf16)
    trainer = Seq2SeqTrainer(model=model, args=targs, train_dataset=train,
                             data_collator=collator, optimizers=(optimizer, scheduler),
                             callbacks=[Budget()])
    trainer.train()
    return trainer.state.global_step, time.perf_counter() - start[0]
