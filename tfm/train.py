"""The training loop: label-smoothed cross-entropy, Adam with warmup + inverse square root,
validation with BLEU, atomic checkpoints, exact resume (of a single process), clean stop on
Ctrl-C / SIGTERM, and DistributedDataParallel under torchrun.

Files in the output (model) directory:

    config.json, tokenizer.json     the model directory (see tfm.checkpoint)
    model.safetensors               the best weights by validation BLEU (the last, without one)
    last.safetensors                the latest weights
    checkpoints/step_N.safetensors  the last ``keep_last`` saved weights, for averaging
    train_state.pt                  weights, optimizer, RNG, data position: what resume reads
    train_config.json               the TrainConfig of the run
    metrics.jsonl                   one JSON line per logged step and per validation
    learning_curve.png              losses and validation BLEU against step, drawn at the end

``train_state.pt`` is one file written atomically, so a run killed at any moment resumes from
its last complete save.

Under torchrun each process trains on its own shard of the batches with DistributedDataParallel
(tfm.distributed); an update is the same as one process accumulating the same batches with
``--update-freq``. Rank 0 writes every file.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from tfm import distributed
from tfm.atomic import remove_stale_temporaries
from tfm.batching import Batch, collate, make_batches, shard
from tfm.checkpoint import (
    ModelInfo,
    atomic_write_bytes,
    load_train_state,
    save_model_dir,
    save_train_state,
    weights_to_bytes,
)
from tfm.config import ModelConfig, TrainConfig, train_config_from_dict
from tfm.data import TokenizedSplit, load_split, read_prepare_info
from tfm.device import autocast, precision_name, resolve_device, resolve_precision
from tfm.errors import ResourceError, TfmError, UsageError
from tfm.evaluate import bleu
from tfm.model import Transformer, count_parameters
from tfm.search import greedy_search
from tfm.tokenizer import PAD_ID, decode_batch, load_vocabularies

STATE_FILE = "train_state.pt"
TRAIN_CONFIG_FILE = "train_config.json"
METRICS_FILE = "metrics.jsonl"
CURVE_FILE = "learning_curve.png"
CHECKPOINTS_DIR = "checkpoints"
# Options that may change when a run is resumed: how long it goes on, and where and how it
# computes (a run may move from CPU to GPU), but not what it computes.
RESUMABLE_CHANGES = {"max_steps", "max_epochs", "max_time", "patience", "valid_every",
                     "save_every", "keep_last", "log_every", "device", "num_threads", "compile",
                     "precision"}


class TrainingDiverged(TfmError):
    exit_code = 6


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


def label_smoothed_loss(logits: torch.Tensor, target: torch.Tensor, epsilon: float,
                        pad_id: int = PAD_ID) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed label-smoothed cross-entropy and summed NLL over non-padding positions.

    logits (..., V) and target (...) of the same leading shape, e.g. (B, T, V) and (B, T), or
    (N, V) and (N,) for real positions only. The smoothed target puts 1 - epsilon on the
    reference and spreads epsilon evenly over the whole vocabulary.
    """
    lprobs = F.log_softmax(logits.float(), dim=-1).reshape(-1, logits.size(-1))  # (N, V)
    target = target.reshape(-1)
    keep = target != pad_id
    nll = -lprobs.gather(1, target[:, None]).squeeze(1)
    smooth = -lprobs.mean(dim=-1)
    loss = (1.0 - epsilon) * nll + epsilon * smooth
    return loss[keep].sum(), nll[keep].sum()


@dataclass
class TrainResult:
    output: str
    step: int
    epoch: int
    stopped: str  # why the run ended
    best_bleu: float | None
    best_step: int | None
    parameters: int
    elapsed: float
    processes: int = 1  # torchrun's world size
    is_main: bool = True  # rank 0: the process that wrote the files and reports the result


class TrainReporter:
    """Receives progress; the CLI draws it, tests ignore it."""

    def start(self, info: dict[str, Any]) -> None: ...
    def step(self, metrics: dict[str, Any]) -> None: ...
    def validation(self, metrics: dict[str, Any]) -> None: ...
    def message(self, text: str) -> None: ...
    def end(self) -> None: ...


@dataclass
class _RunState:
    """What resume restores besides weights and optimizer."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_bleu: float | None = None
    best_step: int | None = None
    bad_validations: int = 0
    elapsed: float = 0.0  # seconds of training before this process
    saved_steps: list[int] = field(default_factory=list)
    world_size: int = 1  # processes that trained up to ``step``


class _StopSignal:
    """Turns the first SIGINT/SIGTERM into a flag checked between steps; a second one
    interrupts at once. (torchrun passes a signal it receives on to every process once.)"""

    def __init__(self) -> None:
        self.signum = 0  # the signal received, 0 while none
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.signum:
            raise KeyboardInterrupt
        self.signum = signum

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


class _Reporters(TrainReporter):
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


def train(
    data_dir: Path,
    output: Path,
    model_config: ModelConfig | None,
    config: TrainConfig,
    resume: bool = False,
    explicit: set[str] | None = None,
    reporter: TrainReporter | None = None,
    overwrite: bool = False,
    tensorboard: Path | None = None,
) -> TrainResult:
    """Train a model on a prepared dataset into the model directory ``output``.

    ``model_config`` None means: take it from ``output`` (resume). ``explicit`` names the
    TrainConfig fields the user set; on resume only those are compared with the saved run.
    ``tensorboard``: also log the metrics there (needs the tensorboard package).

    Started by torchrun, each process trains on its shard of every epoch's batches with
    DistributedDataParallel (see tfm.distributed); rank 0 alone writes files and reports.
    """
    reporter = reporter or TrainReporter()
    data_dir, output = Path(data_dir), Path(output)
    if tensorboard is not None:
        from tfm.tensorboard_log import require_tensorboard

        require_tensorboard()  # before any work, in every process
    config, model_config, run, saved, remove_old = _start_or_resume(
        output, model_config, config, resume, explicit or set(), overwrite)
    with distributed.process_group(resolve_device(config.device)) as (dist, device):
        if not dist.is_main:
            reporter = TrainReporter()
        elif tensorboard is not None:
            from tfm.tensorboard_log import TensorBoardReporter

            reporter = _Reporters([reporter, TensorBoardReporter(Path(tensorboard))])
        if dist.is_main and remove_old:
            _remove_run(output)
        if dist.is_main and output.is_dir():
            remove_stale_temporaries(output)  # left by a process killed mid-write
        trainer = _Trainer(data_dir, output, model_config, config, run, saved, dist, device,
                           reporter)
        stopped = trainer.train()
        distributed.barrier(dist)
    return TrainResult(str(output), run.step, run.epoch, stopped, run.best_bleu, run.best_step,
                       trainer.n_params, trainer.elapsed(), dist.world_size, dist.is_main)


def _start_or_resume(
    output: Path, model_config: ModelConfig | None, config: TrainConfig, resume: bool,
    explicit: set[str], overwrite: bool,
) -> tuple[TrainConfig, ModelConfig, _RunState, dict[str, Any] | None, bool]:
    """The run's configuration and state, new or read back from ``output``; refuses what
    cannot be done. Returns (config, model config, run state, saved state or None, whether an
    old run must be removed first)."""
    state_path = output / STATE_FILE
    run = _RunState()
    saved: dict[str, Any] | None = None
    remove_old = False
    if resume:
        saved = load_train_state(state_path)
        config = _resumed_config(output, config, explicit)
        model_config = ModelConfig(**saved["model_config"])
        run = _RunState(**saved["run"])
    elif state_path.exists() and overwrite:
        remove_old = True
    elif state_path.exists():
        raise UsageError(f"{output} already holds a training run; continue it with --resume, "
                         "start again with --overwrite, or choose another --output")
    if model_config is None:
        raise UsageError("no model configuration given")
    if not (config.max_steps or config.max_epochs or config.max_time or config.patience):
        raise UsageError("give a stopping rule: --max-steps, --max-epochs, --max-time or "
                         "--patience")
    if config.lr_schedule not in SCHEDULES:
        raise UsageError(f"unknown --lr-schedule {config.lr_schedule!r}; choose one of: "
                         f"{', '.join(SCHEDULES)}")
    if config.lr_schedule != "inverse-sqrt" and not (
            config.max_steps or config.max_epochs or config.max_time):
        raise UsageError(f"--lr-schedule {config.lr_schedule} decays to 0 at the end of the "
                         "budget: give --max-steps, --max-epochs or --max-time")
    if config.max_steps and run.step >= config.max_steps:
        raise UsageError(f"nothing left to do: the run in {output} is at step {run.step} of "
                         f"{config.max_steps}; raise --max-steps to train on")
    if config.max_epochs and run.epoch >= config.max_epochs:
        raise UsageError(f"nothing left to do: the run in {output} finished epoch "
                         f"{run.epoch} of {config.max_epochs}; raise --max-epochs to train on")
    return config, model_config, run, saved, remove_old


class _Trainer:
    """One process's share of a training run: data, model, optimizer, and (rank 0 only) the
    files of the output directory and the reports."""

    def __init__(self, data_dir: Path, output: Path, model_config: ModelConfig,
                 config: TrainConfig, run: _RunState, saved: dict[str, Any] | None,
                 dist: distributed.Distributed, device: torch.device,
                 reporter: TrainReporter) -> None:
        self.output, self.config, self.run, self.dist = output, config, run, dist
        self.device, self.reporter = device, reporter
        self.amp_dtype = resolve_precision(config.precision, device)
        if config.num_threads:
            torch.set_num_threads(config.num_threads)
        torch.manual_seed(config.seed)  # the same initial weights in every process

        prep = read_prepare_info(data_dir)
        # The vocabularies decide the sizes, and whether one embedding can serve both sides.
        self.vocabs = load_vocabularies(data_dir / "tokenizer.json")
        sizes = {"src_vocab_size": self.vocabs.src.get_vocab_size(),
                 "tgt_vocab_size": self.vocabs.tgt.get_vocab_size(),
                 "share_embeddings": model_config.share_embeddings and self.vocabs.joint}
        if any(getattr(model_config, k) != v for k, v in sizes.items()):
            model_config = ModelConfig(**{**asdict(model_config), **sizes})
        self.model_config = model_config
        self.train_split = load_split(data_dir, "train")
        self.valid_split = load_split(data_dir, "valid") if "valid" in prep["splits"] else None

        self.model = Transformer(model_config).to(device)
        self.optimizer = torch.optim.Adam(
            self.model.parameters(), lr=config.lr, betas=config.adam_betas, eps=config.adam_eps,
            weight_decay=config.weight_decay)
        if saved is not None:
            self.model.load_state_dict(saved["model"])
            self.optimizer.load_state_dict(saved["optimizer"])
            if dist.is_main:
                torch.set_rng_state(saved["rng"])
        if not dist.is_main:  # dropout: a stream of its own in each process
            torch.manual_seed(distributed.dropout_seed(config.seed, dist.rank, run.step))
        wrapped = distributed.wrap_model(self.model, dist)
        self.no_sync = distributed.no_sync(wrapped)
        self.step_model = torch.compile(wrapped) if config.compile else wrapped
        if saved is not None and run.world_size != dist.world_size:
            position = distributed.resume_position(run.batch_in_epoch, run.world_size,
                                                   dist.world_size)
            run.batch_in_epoch = min(position, len(self.epoch_updates(run.epoch)) - 1)
        run.world_size = dist.world_size

        self.info = ModelInfo(model_config, prep.get("src_lang"), prep.get("tgt_lang"),
                              provenance={"data_fingerprint": prep["fingerprint"],
                                          "seed": config.seed})
        if saved is None and dist.is_main:
            output.mkdir(parents=True, exist_ok=True)
            (output / METRICS_FILE).unlink(missing_ok=True)
            save_model_dir(output, self.model, self.vocabs, self.info)
            atomic_write_bytes(output / TRAIN_CONFIG_FILE,
                               (json.dumps(asdict(config), indent=2) + "\n").encode())
        self.n_params = count_parameters(self.model)
        self.metrics_file = (output / METRICS_FILE).open("a", encoding="utf-8") \
            if dist.is_main else None
        self.resumed = saved is not None
        self.elapsed_before = self.run.elapsed  # training time of earlier processes
        self.start_time = time.monotonic()
        self.agreed_seconds = self.elapsed_before  # the same in every process
        self.window = _Window()

    def elapsed(self) -> float:
        """Seconds of training, earlier processes of a resumed run included."""
        return self.elapsed_before + time.monotonic() - self.start_time

    def epoch_updates(self, epoch: int) -> list[list[np.ndarray]]:
        """This process's updates of ``epoch``: its shard of the epoch's batches, in groups of
        ``update_freq``."""
        c = self.config
        batches = make_batches(self.train_split.src_lengths, self.train_split.tgt_lengths,
                               c.max_tokens, c.seed, epoch)
        mine = shard(batches, self.dist.rank, self.dist.world_size)
        if not mine:
            raise UsageError(f"an epoch of the training data is {len(batches)} batches, fewer "
                             f"than the {self.dist.world_size} processes; lower --max-tokens "
                             "or start fewer processes")
        return [mine[i:i + c.update_freq] for i in range(0, len(mine), c.update_freq)]

    def train(self) -> str:
        """Train until a stopping rule fires; returns why it stopped."""
        run, config = self.run, self.config
        self.reporter.start({
            "parameters": self.n_params, "device": str(self.device),
            "precision": precision_name(self.amp_dtype), "train_pairs": len(self.train_split),
            "valid_pairs": len(self.valid_split) if self.valid_split else 0,
            "batches_per_epoch": len(make_batches(
                self.train_split.src_lengths, self.train_split.tgt_lengths, config.max_tokens,
                config.seed, 0)),
            "steps_per_epoch": len(self.epoch_updates(0)),
            "resumed_step": run.step if self.resumed else None,
            "max_steps": config.max_steps or None, "max_epochs": config.max_epochs or None,
            "max_time": config.max_time or None, "processes": self.dist.world_size,
        })
        if self.dist.enabled:
            self.reporter.message(f"{self.dist.world_size} processes ({self.dist.backend})")
        self.start_time = time.monotonic()
        self.window = _Window()
        stopped = ""
        self.model.train()
        with _StopSignal() as signals:
            while not stopped:
                epoch = run.epoch
                updates = self.epoch_updates(epoch)
                while run.epoch == epoch and not stopped:  # step() moves on at the epoch end
                    stopped = self.step(updates, signals)
        self.finish()
        return stopped

    def step(self, updates: list[list[np.ndarray]], signals: _StopSignal) -> str:
        """One optimizer step, then what follows it: logging, validation, the end of an epoch,
        saving. Returns why the run stops here, or ""."""
        run, config = self.run, self.config
        group = [collate(self.train_split, b).to(self.device)
                 for b in updates[run.batch_in_epoch]]
        # The schedule's progress through the budget, from the time all processes agreed on.
        progress = budget_progress(config, run.step,
                                   run.epoch + run.batch_in_epoch / len(updates),
                                   self.agreed_seconds)
        try:
            loss, nll, n_tokens = _update(self.step_model, self.optimizer, group, config,
                                          self.amp_dtype, run.step + 1, self.dist,
                                          self.no_sync, progress)
        except (torch.OutOfMemoryError, MemoryError) as e:
            self.finish()
            raise _out_of_memory(group, config, self.device) from e
        # Every process must stop at the same step: agree on signals, time and divergence.
        signum, seconds, diverged = distributed.all_reduce(
            [signals.signum, self.elapsed(), not math.isfinite(loss)], self.dist, op="max")
        self.agreed_seconds = seconds
        over_time = bool(config.max_time) and seconds >= config.max_time * 60
        if diverged:
            self.finish()
            raise TrainingDiverged(
                f"the loss became {loss if not math.isfinite(loss) else 'non-finite'} at step "
                f"{run.step + 1}; the last good checkpoint (step "
                f"{run.saved_steps[-1] if run.saved_steps else 0}) is kept. Lower --lr, "
                "raise --warmup or use --precision fp32")
        run.step += 1
        run.batch_in_epoch += 1
        self.window.add(loss, nll, n_tokens, sum(b.n_src_tokens for b in group))
        if run.step % config.log_every == 0 or run.step == 1:
            self.log_window()
        stopped = ""
        if signum:
            stopped = f"interrupted by {signal.Signals(int(signum)).name}"
        elif config.max_steps and run.step >= config.max_steps:
            stopped = f"reached --max-steps {config.max_steps}"
        elif over_time:
            stopped = f"reached --max-time {config.max_time:g} min"
        at_epoch_end = run.batch_in_epoch == len(updates)
        if self.valid_split is not None and not signum and (
                run.step % config.valid_every == 0 or at_epoch_end or stopped):
            self.validate()
            if config.patience and run.bad_validations >= config.patience:
                stopped = stopped or f"no better BLEU in {config.patience} validations"
        if at_epoch_end:
            run.epoch += 1
            run.batch_in_epoch = 0
            if config.max_epochs and run.epoch >= config.max_epochs and not stopped:
                stopped = f"reached --max-epochs {config.max_epochs}"
        if stopped or run.step % config.save_every == 0:
            self.save()
        return stopped

    def record(self, metrics: dict[str, Any]) -> None:
        """Append one line to metrics.jsonl (rank 0)."""
        if self.metrics_file is not None:
            self.metrics_file.write(json.dumps(metrics) + "\n")
            self.metrics_file.flush()

    def log_window(self) -> None:
        """Log the steps since the last log, summed over all processes."""
        w = self.window
        loss, nll, tokens, src_tokens = distributed.all_reduce(
            [w.loss, w.nll, w.tokens, w.src_tokens], self.dist)
        now = time.monotonic()
        seconds = max(now - w.start, 1e-9)
        per_token = max(tokens, 1)
        metrics = {
            "kind": "train", "step": self.run.step, "epoch": self.run.epoch,
            "loss": loss / per_token, "nll": nll / per_token,
            "ppl": math.exp(min(nll / per_token, 50.0)),
            "lr": self.optimizer.param_groups[0]["lr"],
            "tgt_tokens": int(tokens),
            "tokens_per_s": (tokens + src_tokens) / seconds,
            "elapsed": self.elapsed(),
        }
        self.record(metrics)
        self.reporter.step(metrics)
        self.window = _Window(start=now)

    def validate(self) -> None:
        """Rank 0 validates and keeps the best weights; the others wait, then take its
        verdict, so that all processes agree on the best step and on patience."""
        run = self.run
        if self.dist.is_main:
            self.model.eval()
            metrics = _validate(self.model, self.valid_split, self.vocabs.tgt, self.config,
                                self.device, self.amp_dtype)
            self.model.train()
            metrics.update(step=run.step, epoch=run.epoch, kind="valid")
            improved = metrics.get("bleu") is not None and (
                run.best_bleu is None or metrics["bleu"] > run.best_bleu)
            if improved:
                run.best_bleu, run.best_step, run.bad_validations = metrics["bleu"], run.step, 0
                weights = weights_to_bytes(self.model, {"format": "pt", "step": str(run.step)})
                atomic_write_bytes(self.output / "model.safetensors", weights)
                self.info.provenance.update(best_step=run.step, valid_bleu=metrics["bleu"],
                                            valid_bleu_signature=metrics["bleu_signature"])
                save_model_dir_config(self.output, self.info)
            else:
                run.bad_validations += 1
            metrics["best_bleu"] = run.best_bleu
            self.record(metrics)
            self.reporter.validation(metrics)
        run.best_bleu, run.best_step, run.bad_validations = distributed.broadcast(
            (run.best_bleu, run.best_step, run.bad_validations), self.dist)

    def save(self) -> None:
        """Checkpoint: the latest weights, a numbered copy (keeping ``keep_last``) and the
        training state. Every process keeps the books; rank 0 writes the files."""
        run, config, output = self.run, self.config, self.output
        run.elapsed = self.elapsed()
        numbered = config.keep_last > 0 and run.step not in run.saved_steps
        dropped = []
        if numbered:
            run.saved_steps.append(run.step)
            while len(run.saved_steps) > config.keep_last:
                dropped.append(run.saved_steps.pop(0))
        if not self.dist.is_main:
            return
        weights = weights_to_bytes(self.model, {"format": "pt", "step": str(run.step)})
        atomic_write_bytes(output / "last.safetensors", weights)
        if self.valid_split is None or run.best_step is None:
            atomic_write_bytes(output / "model.safetensors", weights)
        if numbered:
            atomic_write_bytes(_numbered_checkpoint(output, run.step), weights)
        for old in dropped:
            _numbered_checkpoint(output, old).unlink(missing_ok=True)
        save_train_state(output / STATE_FILE, {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "rng": torch.get_rng_state(),  # rank 0's: exact resume is for one process
            "model_config": asdict(self.model_config),
            "run": asdict(run),
        })

    def finish(self) -> None:
        """Close the metrics, draw the learning curve (rank 0) and end the reports."""
        if self.metrics_file is not None:
            self.metrics_file.close()
            self.metrics_file = None
            _draw_learning_curve(self.output, self.reporter)
        self.reporter.end()


@dataclass
class _Window:
    """Sums over the steps since the last log line, in this process."""

    loss: float = 0.0
    nll: float = 0.0
    tokens: int = 0  # target tokens
    src_tokens: int = 0
    start: float = field(default_factory=time.monotonic)

    def add(self, loss: float, nll: float, tokens: int, src_tokens: int) -> None:
        self.loss += loss
        self.nll += nll
        self.tokens += tokens
        self.src_tokens += src_tokens


def _numbered_checkpoint(output: Path, step: int) -> Path:
    return output / CHECKPOINTS_DIR / f"step_{step:08d}.safetensors"


def _draw_learning_curve(output: Path, reporter: TrainReporter) -> None:
    """learning_curve.png from metrics.jsonl; a failure costs a warning, never the run."""
    try:
        from tfm.plotting import plot_learning_curve

        plot_learning_curve(output / METRICS_FILE, output / CURVE_FILE)
    except Exception as e:  # a picture is never worth a failed run
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
        reporter.message(f"warning: could not draw {CURVE_FILE}: {detail}")


def _out_of_memory(group: list[Batch], config: TrainConfig, device: torch.device
                   ) -> ResourceError:
    """Which batch did not fit, and what to do about it."""
    shapes = ", ".join(f"{b.src.size(0)} sentences x {max(b.src.size(1), b.tgt_in.size(1))} "
                       "positions" for b in group)
    return ResourceError(
        f"out of {'GPU memory' if device.type == 'cuda' else 'memory'} at a batch of {shapes} "
        f"(--max-tokens {config.max_tokens}); lower --max-tokens and raise --update-freq to "
        "keep the same batch size per update. Resume with --resume.")


def _remove_run(output: Path) -> None:
    """Delete the files a training run writes in ``output`` (and nothing else)."""
    import shutil

    for name in (STATE_FILE, TRAIN_CONFIG_FILE, METRICS_FILE, CURVE_FILE, "last.safetensors",
                 "model.safetensors", "config.json", "tokenizer.json", "tokenizer.src.json",
                 "tokenizer.tgt.json"):
        (output / name).unlink(missing_ok=True)
    shutil.rmtree(output / CHECKPOINTS_DIR, ignore_errors=True)


def save_model_dir_config(output: Path, info: ModelInfo) -> None:
    atomic_write_bytes(output / "config.json",
                       (json.dumps(info.to_json(), indent=2, ensure_ascii=False) + "\n").encode())


def _update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, group: list[Batch],
            config: TrainConfig, amp_dtype: torch.dtype | None, step: int,
            dist: distributed.Distributed | None = None,
            no_sync: Callable[[], AbstractContextManager] = nullcontext,
            progress: float = 0.0) -> tuple[float, float, int]:
    """One optimizer step over ``group`` (``update_freq`` batches) in every process, the loss
    normalised by the number of target tokens of the whole update. Returns this process's
    summed loss, summed NLL and target tokens.

    Across processes the update must equal one process's over all their batches: the gradient
    of (every process's summed loss) / (all their target tokens). So each process divides its
    loss by the total token count, and multiplies it by the world size because DDP averages
    the gradients over the processes (divides their sum by the world size).
    """
    dist = dist or distributed.Distributed()
    n_tokens = sum(b.n_tgt_tokens for b in group)
    (total_tokens,) = distributed.all_reduce([n_tokens], dist)
    lr = learning_rate(step, config.lr, config.warmup_steps, config.lr_schedule, progress)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    total_loss = total_nll = 0.0
    device = group[0].src.device
    for i, batch in enumerate(group):
        # Accumulate locally; gradients are all-reduced once, in the update's last backward.
        with no_sync() if i < len(group) - 1 else nullcontext():
            with autocast(device, amp_dtype):
                logits = model(batch.src, batch.tgt_in, batch.tgt_mask)  # (N, V), real positions
            loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                            config.label_smoothing)
            (loss * dist.world_size / total_tokens).backward()
        total_loss += loss.item()
        total_nll += nll.item()
    if not math.isfinite(total_loss):
        return total_loss, total_nll, n_tokens
    # The gradient norm, clipped when asked; a non-finite one must never reach the weights.
    norm = torch.nn.utils.clip_grad_norm_(model.parameters(),
                                          config.clip_norm if config.clip_norm > 0 else math.inf)
    if not torch.isfinite(norm):
        return math.nan, total_nll, n_tokens
    optimizer.step()
    return total_loss, total_nll, n_tokens


@torch.inference_mode()
def _validate(model: Transformer, split: TokenizedSplit, tokenizer: Any, config: TrainConfig,
              device: torch.device, amp_dtype: torch.dtype | None) -> dict[str, Any]:
    """Validation loss and perplexity, and greedy BLEU against the reference text."""
    batches = make_batches(split.src_lengths, split.tgt_lengths, config.max_tokens,
                           shuffle=False)
    loss_sum = nll_sum = 0.0
    n_tokens = 0
    hypotheses: dict[int, str] = {}
    for indices in batches:
        batch = collate(split, indices).to(device)
        with autocast(device, amp_dtype):
            logits = model(batch.src, batch.tgt_in, batch.tgt_mask)
            loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                            config.label_smoothing)
            loss_sum += float(loss)
            nll_sum += float(nll)
            n_tokens += batch.n_tgt_tokens
            if config.valid_bleu and split.tgt_text is not None:
                hyps = greedy_search(model, batch.src)
                texts = decode_batch(tokenizer, [h[0].tokens for h in hyps])
                hypotheses.update(zip(indices.tolist(), texts))
    metrics: dict[str, Any] = {"loss": loss_sum / n_tokens, "nll": nll_sum / n_tokens,
                               "ppl": math.exp(min(nll_sum / n_tokens, 50.0))}
    if hypotheses and split.tgt_text is not None:
        score = bleu([hypotheses[i] for i in range(len(split))], split.tgt_text)
        metrics.update(bleu=score.score, bleu_signature=score.signature)
    return metrics


def _resumed_config(output: Path, given: TrainConfig, explicit: set[str]) -> TrainConfig:
    """The saved run's TrainConfig with the options the user set now; refuses changes other
    than how long the run goes on."""
    path = output / TRAIN_CONFIG_FILE
    try:
        saved = train_config_from_dict(json.loads(path.read_text()))
    except FileNotFoundError as e:
        raise UsageError(f"{output}: no {TRAIN_CONFIG_FILE}; nothing to resume") from e
    values = asdict(saved)
    for name in explicit:
        new = getattr(given, name)
        if name not in RESUMABLE_CHANGES and new != values[name]:
            raise UsageError(
                f"--{name.replace('_', '-')} {new} contradicts the run being resumed "
                f"({values[name]}); resume with the same options or start a new --output")
        values[name] = new
    return TrainConfig(**values)
