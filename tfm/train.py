"""The training loop: label-smoothed cross-entropy, Adam with warmup + inverse square root,
validation with BLEU, atomic checkpoints, exact resume, clean stop on Ctrl-C / SIGTERM.

Files in the output (model) directory:

    config.json, tokenizer.json     the model directory (see tfm.checkpoint)
    model.safetensors               the best weights by validation BLEU (the last, without one)
    last.safetensors                the latest weights
    checkpoints/step_N.safetensors  the last ``keep_last`` saved weights, for averaging
    train_state.pt                  weights, optimizer, RNG, data position: what resume reads
    train_config.json               the TrainConfig of the run
    metrics.jsonl                   one JSON line per logged step and per validation

``train_state.pt`` is one file written atomically, so a run killed at any moment resumes from
its last complete save.
"""

from __future__ import annotations

import json
import math
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F

from tfm.batching import Batch, collate, make_batches
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
from tfm.errors import TfmError, UsageError
from tfm.evaluate import bleu
from tfm.model import Transformer, count_parameters
from tfm.search import greedy_search
from tfm.tokenizer import PAD_ID, decode_batch, load_tokenizer

STATE_FILE = "train_state.pt"
TRAIN_CONFIG_FILE = "train_config.json"
METRICS_FILE = "metrics.jsonl"
# Options that may change when a run is resumed: how long it goes on.
RESUMABLE_CHANGES = {"max_steps", "max_epochs", "max_time", "patience", "valid_every",
                     "save_every", "keep_last", "log_every", "device", "num_threads"}


class TrainingDiverged(TfmError):
    exit_code = 6


def learning_rate(step: int, peak: float, warmup: int) -> float:
    """Linear warmup to ``peak`` over ``warmup`` steps, then decay as 1/sqrt(step) (the paper's
    schedule, with the peak as the parameter). ``step`` counts from 1."""
    step = max(step, 1)
    if warmup <= 0:
        return peak
    return peak * min(step / warmup, math.sqrt(warmup / step))


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


class _StopSignal:
    """Turns the first SIGINT/SIGTERM into a flag checked between steps; a second one
    interrupts at once."""

    def __init__(self) -> None:
        self.received: str | None = None
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> _StopSignal:
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                self._previous[sig] = signal.signal(sig, self._handle)
            except ValueError:  # not the main thread: leave signals alone
                pass
        return self

    def _handle(self, signum: int, frame: Any) -> None:
        if self.received:
            raise KeyboardInterrupt
        self.received = signal.Signals(signum).name

    def __exit__(self, *exc: Any) -> None:
        for sig, handler in self._previous.items():
            signal.signal(sig, handler)


def train(
    data_dir: Path,
    output: Path,
    model_config: ModelConfig | None,
    config: TrainConfig,
    resume: bool = False,
    explicit: set[str] | None = None,
    reporter: TrainReporter | None = None,
    overwrite: bool = False,
) -> TrainResult:
    """Train a model on a prepared dataset into the model directory ``output``.

    ``model_config`` None means: take it from ``output`` (resume). ``explicit`` names the
    TrainConfig fields the user set; on resume only those are compared with the saved run.
    """
    reporter = reporter or TrainReporter()
    data_dir, output = Path(data_dir), Path(output)
    state_path = output / STATE_FILE
    run = _RunState()
    saved: dict[str, Any] | None = None
    if resume:
        saved = load_train_state(state_path)
        config = _resumed_config(output, config, explicit or set())
        model_config = ModelConfig(**saved["model_config"])
        run = _RunState(**saved["run"])
    elif state_path.exists() and overwrite:
        _remove_run(output)
    elif state_path.exists():
        raise UsageError(f"{output} already holds a training run; continue it with --resume, "
                         "start again with --overwrite, or choose another --output")
    if model_config is None:
        raise UsageError("no model configuration given")
    if not (config.max_steps or config.max_epochs or config.max_time or config.patience):
        raise UsageError("give a stopping rule: --max-steps, --max-epochs, --max-time or "
                         "--patience")
    if config.max_steps and run.step >= config.max_steps:
        raise UsageError(f"nothing left to do: the run in {output} is at step {run.step} of "
                         f"{config.max_steps}; raise --max-steps to train on")
    if config.max_epochs and run.epoch >= config.max_epochs:
        raise UsageError(f"nothing left to do: the run in {output} finished epoch "
                         f"{run.epoch} of {config.max_epochs}; raise --max-epochs to train on")

    device = resolve_device(config.device)
    amp_dtype = resolve_precision(config.precision, device)
    if config.num_threads:
        torch.set_num_threads(config.num_threads)
    torch.manual_seed(config.seed)

    prep = read_prepare_info(data_dir)
    tokenizer = load_tokenizer(data_dir / "tokenizer.json")
    vocab = tokenizer.get_vocab_size()
    if model_config.src_vocab_size != vocab or model_config.tgt_vocab_size != vocab:
        model_config = ModelConfig(**{**asdict(model_config), "src_vocab_size": vocab,
                                      "tgt_vocab_size": vocab})
    train_split = load_split(data_dir, "train")
    valid_split = load_split(data_dir, "valid") if "valid" in prep["splits"] else None

    model = Transformer(model_config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=config.lr, betas=config.adam_betas,
                                 eps=config.adam_eps, weight_decay=config.weight_decay)
    if saved is not None:
        model.load_state_dict(saved["model"])
        optimizer.load_state_dict(saved["optimizer"])
        torch.set_rng_state(saved["rng"])
    step_fn = torch.compile(model) if config.compile else model

    info = ModelInfo(model_config, prep.get("src_lang"), prep.get("tgt_lang"), provenance={
        "data_fingerprint": prep["fingerprint"], "seed": config.seed})
    if saved is None:
        output.mkdir(parents=True, exist_ok=True)
        (output / METRICS_FILE).unlink(missing_ok=True)
        save_model_dir(output, model, tokenizer, info)
        atomic_write_bytes(output / TRAIN_CONFIG_FILE,
                           (json.dumps(asdict(config), indent=2) + "\n").encode())

    n_params = count_parameters(model)
    batches_per_epoch = len(make_batches(train_split.src_lengths, train_split.tgt_lengths,
                                         config.max_tokens, config.seed, 0))
    reporter.start({
        "parameters": n_params, "device": str(device), "precision": precision_name(amp_dtype),
        "train_pairs": len(train_split), "valid_pairs": len(valid_split) if valid_split else 0,
        "batches_per_epoch": batches_per_epoch, "resumed_step": run.step if resume else None,
        "max_steps": config.max_steps or None, "max_epochs": config.max_epochs or None,
        "max_time": config.max_time or None,
    })
    metrics_file = (output / METRICS_FILE).open("a", encoding="utf-8")
    start_time = time.monotonic()

    def elapsed() -> float:
        return run.elapsed + time.monotonic() - start_time

    def save(final: bool = False) -> None:
        run.elapsed = elapsed()
        weights = weights_to_bytes(model, {"format": "pt", "step": str(run.step)})
        atomic_write_bytes(output / "last.safetensors", weights)
        if valid_split is None or run.best_step is None:
            atomic_write_bytes(output / "model.safetensors", weights)
        numbered = output / "checkpoints" / f"step_{run.step:08d}.safetensors"
        if config.keep_last > 0 and run.step not in run.saved_steps:
            atomic_write_bytes(numbered, weights)
            run.saved_steps.append(run.step)
            while len(run.saved_steps) > config.keep_last:
                old = run.saved_steps.pop(0)
                (output / "checkpoints" / f"step_{old:08d}.safetensors").unlink(missing_ok=True)
        save_train_state(state_path, {
            "model": model.state_dict(),
            "optimizer": optimizer.state_dict(),
            "rng": torch.get_rng_state(),
            "model_config": asdict(model_config),
            "run": asdict(run),
        })

    def validate() -> None:
        metrics = _validate(model, valid_split, tokenizer, config, device, amp_dtype)
        metrics.update(step=run.step, epoch=run.epoch, kind="valid")
        improved = metrics.get("bleu") is not None and (
            run.best_bleu is None or metrics["bleu"] > run.best_bleu)
        if improved:
            run.best_bleu, run.best_step, run.bad_validations = metrics["bleu"], run.step, 0
            weights = weights_to_bytes(model, {"format": "pt", "step": str(run.step)})
            atomic_write_bytes(output / "model.safetensors", weights)
            info.provenance.update(best_step=run.step, valid_bleu=metrics["bleu"],
                                   valid_bleu_signature=metrics["bleu_signature"])
            save_model_dir_config(output, info)
        else:
            run.bad_validations += 1
        metrics["best_bleu"] = run.best_bleu
        metrics_file.write(json.dumps(metrics) + "\n")
        metrics_file.flush()
        reporter.validation(metrics)

    stopped = ""
    window = {"loss": 0.0, "nll": 0.0, "tokens": 0, "src_tokens": 0, "steps": 0,
              "time": time.monotonic()}
    model.train()
    with _StopSignal() as stop:
        while not stopped:
            batches = make_batches(train_split.src_lengths, train_split.tgt_lengths,
                                   config.max_tokens, config.seed, run.epoch)
            updates = [batches[i:i + config.update_freq]
                       for i in range(0, len(batches), config.update_freq)]
            while run.batch_in_epoch < len(updates):
                group = [collate(train_split, b).to(device)
                         for b in updates[run.batch_in_epoch]]
                loss, nll, n_tokens = _update(step_fn, optimizer, group, config, amp_dtype,
                                              run.step + 1)
                if not math.isfinite(loss):
                    reporter.end()
                    raise TrainingDiverged(
                        f"the loss became {loss} at step {run.step + 1}; the last good "
                        f"checkpoint (step {run.saved_steps[-1] if run.saved_steps else 0}) "
                        "is kept. Lower --lr, raise --warmup or use --precision fp32")
                run.step += 1
                run.batch_in_epoch += 1
                window["loss"] += loss
                window["nll"] += nll
                window["tokens"] += n_tokens
                window["src_tokens"] += sum(b.n_src_tokens for b in group)
                window["steps"] += 1
                if run.step % config.log_every == 0 or run.step == 1:
                    _log_window(window, run, optimizer, metrics_file, reporter, elapsed())
                if stop.received:
                    stopped = f"interrupted by {stop.received}"
                elif config.max_steps and run.step >= config.max_steps:
                    stopped = f"reached --max-steps {config.max_steps}"
                elif config.max_time and elapsed() >= config.max_time * 60:
                    stopped = f"reached --max-time {config.max_time:g} min"
                at_epoch_end = run.batch_in_epoch == len(updates)
                if valid_split is not None and not stop.received and (
                        run.step % config.valid_every == 0 or at_epoch_end or stopped):
                    model.eval()
                    validate()
                    model.train()
                    if config.patience and run.bad_validations >= config.patience:
                        stopped = stopped or f"no better BLEU in {config.patience} validations"
                if at_epoch_end:
                    run.epoch += 1
                    run.batch_in_epoch = 0
                    if config.max_epochs and run.epoch >= config.max_epochs and not stopped:
                        stopped = f"reached --max-epochs {config.max_epochs}"
                if stopped or run.step % config.save_every == 0:
                    save()
                if stopped:
                    break
    metrics_file.close()
    reporter.end()
    return TrainResult(str(output), run.step, run.epoch, stopped, run.best_bleu, run.best_step,
                       n_params, elapsed())


def _remove_run(output: Path) -> None:
    """Delete the files a training run writes in ``output`` (and nothing else)."""
    import shutil

    for name in (STATE_FILE, TRAIN_CONFIG_FILE, METRICS_FILE, "last.safetensors",
                 "model.safetensors", "config.json", "tokenizer.json"):
        (output / name).unlink(missing_ok=True)
    shutil.rmtree(output / "checkpoints", ignore_errors=True)


def save_model_dir_config(output: Path, info: ModelInfo) -> None:
    atomic_write_bytes(output / "config.json",
                       (json.dumps(info.to_json(), indent=2, ensure_ascii=False) + "\n").encode())


def _update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, group: list[Batch],
            config: TrainConfig, amp_dtype: torch.dtype | None, step: int
            ) -> tuple[float, float, int]:
    """One optimizer step over ``group`` (``update_freq`` batches), the loss normalised by the
    number of target tokens in the whole group. Returns summed loss, summed NLL, tokens."""
    n_tokens = sum(b.n_tgt_tokens for b in group)
    lr = learning_rate(step, config.lr, config.warmup_steps)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    total_loss = total_nll = 0.0
    device = group[0].src.device
    for batch in group:
        with autocast(device, amp_dtype):
            logits = model(batch.src, batch.tgt_in, batch.tgt_mask)  # (N, V), real positions
        loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                        config.label_smoothing)
        (loss / n_tokens).backward()
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


def _log_window(window: dict[str, Any], run: _RunState, optimizer: torch.optim.Optimizer,
                metrics_file: Any, reporter: TrainReporter, elapsed: float) -> None:
    now = time.monotonic()
    seconds = max(now - window["time"], 1e-9)
    tokens = max(window["tokens"], 1)
    metrics = {
        "kind": "train", "step": run.step, "epoch": run.epoch,
        "loss": window["loss"] / tokens, "nll": window["nll"] / tokens,
        "ppl": math.exp(min(window["nll"] / tokens, 50.0)),
        "lr": optimizer.param_groups[0]["lr"],
        "tokens_per_s": (window["tokens"] + window["src_tokens"]) / seconds,
        "elapsed": elapsed,
    }
    metrics_file.write(json.dumps(metrics) + "\n")
    metrics_file.flush()
    reporter.step(metrics)
    window.update(loss=0.0, nll=0.0, tokens=0, src_tokens=0, steps=0, time=now)


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
