"""The training loop, as the paper trains: batches of about --max-tokens tokens, the
label-smoothed cross-entropy (tfm.training.objective), Adam with a warmup schedule
(tfm.training.schedule), validation with BLEU (tfm.training.validation) every --valid-every
steps and at the end of the run, atomic checkpoints and exact resume of a single process
(tfm.training.state), a clean stop on Ctrl-C / SIGTERM.

fp16 autocast (where a GPU lacks bf16) goes with loss scaling (torch.amp.GradScaler): the loss
is multiplied before backward so that small gradients do not vanish in fp16, the gradients are
divided back before clipping, and an update whose gradients overflowed is skipped with a
lower scale. The scale is part of the training state. bf16 on a CPU is no autocast: a bf16
copy of the model runs the steps and the fp32 model keeps the master weights
(tfm.training.bf16); what is saved and resumed is the fp32 run's.

The files a run writes are those of tfm.layout.ModelDir. ``train_state.pt`` is one file written
atomically, so a run killed at any moment resumes from its last complete save.

Under torchrun each process trains on its own shard of the batches with DistributedDataParallel
(tfm.training.distributed); an update is the same as one process accumulating the same batches
with ``--update-freq``. Rank 0 writes every file.
"""

from __future__ import annotations

import json
import math
import signal
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tfm.atomic import AppendLog, atomic_write_bytes, remove_stale_temporaries
from tfm.checkpoint import (
    load_weights,
    save_model_dir,
    save_model_info,
    save_recorded,
    train_state_bytes,
    weights_to_bytes,
)
from tfm.config import ModelConfig, TrainConfig
from tfm.data.batching import Batch, collate, make_batches, shard
from tfm.data.dataset import PrepareInfo, TokenizedSplit, load_split, read_prepare_info
from tfm.data.directions import Direction
from tfm.data.language_marks import ModelLanguages
from tfm.data.lexical_alignment import LEXICON_FILE
from tfm.data.sampling import direction_probabilities, epoch_rows
from tfm.data.tokenizer import Vocabularies, load_vocabularies
from tfm.data.word_alignment import alignment_path, load_token_alignments
from tfm.device import (
    autocast,
    cpu_bf16_support,
    precision_name,
    resolve_device,
    resolve_precision,
)
from tfm.errors import ResourceError, TfmError, UsageError, WriteError
from tfm.layout import TOKENIZER_FILE, ModelDir
from tfm.model import Transformer, count_parameters
from tfm.model_info import ModelInfo
from tfm.training import distributed
from tfm.training.bf16 import BATCH_WIDTH_MULTIPLE, Bf16Copy
from tfm.training.multilingual import BackTranslator, LanguageLoss
from tfm.training.objective import guided_alignment_loss, label_smoothed_loss
from tfm.training.reporting import Reporters, TrainReporter
from tfm.training.schedule import budget_progress, learning_rate
from tfm.training.state import (
    Overrides,
    RunStart,
    StopSignal,
    recorded_init_from,
    remove_run,
    start_new,
    start_resumed,
)
from tfm.training.validation import validate


class TrainingDiverged(TfmError):
    exit_code = 6


# Below this fp16 loss scale every update overflows: the run has diverged (fairseq's limit).
MIN_LOSS_SCALE = 1e-4
# Where training's Adam is torch's fused kernel (_build_optimizer); elsewhere its default.
FUSED_ADAM_DEVICES = ("cpu", "cuda")


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
    best_loss: float | None = None  # validation loss of the best model


def train(
    data_dir: Path,
    output: Path,
    model_config: ModelConfig,
    config: TrainConfig,
    *,
    reporter: TrainReporter | None = None,
    overwrite: bool = False,
    tensorboard: Path | None = None,
    init_from: Path | None = None,
    run_config: str | None = None,
) -> TrainResult:
    """Train a new model of architecture ``model_config`` on a prepared dataset into the model
    directory ``output``, with the settings ``config`` (``resume`` continues a run).

    ``overwrite``: delete a run already in ``output`` first (else it is refused).
    ``tensorboard``: also log the metrics there (needs the tensorboard package).
    ``init_from``: a trained model directory whose weights the new run starts from (its
    architecture is ``model_config``'s, see tfm.training.state.initial_model_config); the
    optimizer and the learning-rate schedule start afresh at step 0.
    ``run_config``: the command's options as a YAML run config, kept as ``run.yaml``.

    Started by torchrun, each process trains on its shard of every epoch's batches with
    DistributedDataParallel (see tfm.distributed); rank 0 alone writes files and reports.
    """
    if not isinstance(config, TrainConfig):
        raise TypeError("a new run takes a whole TrainConfig; resume() takes Overrides")
    output = Path(output)
    if init_from is not None and Path(init_from).resolve() == output.resolve():
        raise UsageError(f"--init-from and --output are the same directory ({output}): write "
                         "the new run to another --output")
    _require_tensorboard(tensorboard)
    start = start_new(output, model_config, config, overwrite)
    return _run(Path(data_dir), output, start, reporter or TrainReporter(), tensorboard,
                init_from, run_config)


def resume(
    data_dir: Path,
    output: Path,
    overrides: Overrides,
    *,
    model_config: ModelConfig | None = None,
    reporter: TrainReporter | None = None,
    tensorboard: Path | None = None,
) -> TrainResult:
    """Continue the run in the model directory ``output`` on its prepared dataset, from its
    newest intact checkpoint (tfm.training.state.start_resumed).

    ``overrides``: what is asked anew of the run (tfm.training.state.Overrides: the fields
    given, of the run and of its model, each compared with the run's). ``model_config``: the
    model of a run that never started; a run that did has its own. A run stopped before its
    first checkpoint starts again at step 0, from the weights it started from. The run keeps
    the run.yaml it started with. ``tensorboard``: as for ``train``.
    """
    if not isinstance(overrides, Overrides):
        raise TypeError("resume() takes the Overrides asked anew; train() starts a new run")
    output, reporter = Path(output), reporter or TrainReporter()
    _require_tensorboard(tensorboard)
    ranks = distributed.launched_by_torchrun()
    say = reporter.message if ranks is None or ranks[0] == 0 else (lambda _: None)
    start = start_resumed(output, model_config, overrides, say)
    # Started again from step 0: from the weights it started from (--init-from's, if any).
    init_from = recorded_init_from(output) if start.saved is None else None
    return _run(Path(data_dir), output, start, reporter, tensorboard, init_from, None)


def _require_tensorboard(tensorboard: Path | None) -> None:
    """Refuses --tensorboard without its package, before any work, in every process."""
    if tensorboard is not None:
        from tfm.training.reporting import require_tensorboard

        require_tensorboard()


def _run(data_dir: Path, output: Path, start: RunStart, reporter: TrainReporter,
         tensorboard: Path | None, init_from: Path | None, run_config: str | None
         ) -> TrainResult:
    """Train the run that ``start`` describes, in each process of a torchrun job."""
    config, run = start.config, start.run
    if config.patience and "valid" not in read_prepare_info(data_dir).splits:
        raise UsageError(f"--patience counts validations, but {data_dir} has no validation "
                         "split: prepare it with --valid, or stop with --max-steps, "
                         "--max-epochs or --max-time")
    with distributed.process_group(resolve_device(config.device)) as (dist, device):
        if not dist.is_main:
            reporter = TrainReporter()
        elif tensorboard is not None:
            from tfm.training.reporting import TensorBoardReporter

            reporter = Reporters([reporter, TensorBoardReporter(Path(tensorboard))])
        if dist.is_main and start.remove_old:
            remove_run(output)
        if dist.is_main and output.is_dir():
            remove_stale_temporaries(output)  # left by a process killed mid-write
        trainer = _Trainer(data_dir, output, start, dist, device, reporter, init_from,
                           run_config)
        stopped = trainer.train()
        distributed.barrier(dist)
    return TrainResult(str(output), run.step, run.epoch, stopped, run.best_bleu, run.best_step,
                       trainer.n_params, trainer.elapsed(), dist.world_size, dist.is_main,
                       run.best_loss)


def _refuse_other_vocabularies(init_from: Path, vocabs: Vocabularies, data_dir: Path) -> None:
    """--init-from needs the data tokenized as the model was: the same token ids."""
    theirs = load_vocabularies(ModelDir(init_from).tokenizer)
    if (theirs.joint, theirs.src.to_str(), theirs.tgt.to_str()) != (
            vocabs.joint, vocabs.src.to_str(), vocabs.tgt.to_str()):
        raise UsageError(f"{data_dir} was prepared with another tokenizer than the model in "
                         f"{init_from}: prepare it with `tfm prepare --tokenizer "
                         f"{ModelDir(init_from).tokenizer}`")


@dataclass(frozen=True)
class _Precision:
    """How the training steps compute, as --precision resolved on the device."""

    amp_dtype: torch.dtype | None  # autocast's (fp16 goes with loss scaling); None: bf16 copy
    bf16_copy: bool  # bf16 on a CPU: a bf16 copy of the model runs the steps (tfm.training.bf16)
    name: str  # as the run's report names it


@dataclass(frozen=True)
class _Models:
    """The run's model in each of its roles. Without bf16 on a CPU, processes or --compile,
    the three are one model."""

    # The fp32 weights: what Adam updates, validation decodes, checkpoints save, resume loads.
    master: Transformer
    # What computes the steps' forward and backward: the bf16 copy of ``master`` (bf16 on a
    # CPU, tfm.training.bf16), else ``master`` itself.
    compute: torch.nn.Module
    # ``compute`` as a step calls it: wrapped in DistributedDataParallel across processes
    # (which all-reduces the gradients), compiled with --compile.
    step: torch.nn.Module


class _Trainer:
    """One process's share of a training run: data, model, optimizer, and (rank 0 only) the
    files of the output directory and the reports."""

    def __init__(self, data_dir: Path, output: Path, start: RunStart,
                 dist: distributed.Distributed, device: torch.device,
                 reporter: TrainReporter, init_from: Path | None = None,
                 run_config: str | None = None) -> None:
        self.output, self.files, self.data_dir = output, ModelDir(output), data_dir
        self.config, self.run, self.resumed = start.config, start.run, start.saved is not None
        self.dist, self.device, self.reporter = dist, device, reporter
        self.precision = self._pick_precision()
        self._seed_initial_weights()
        prep = read_prepare_info(data_dir)
        self.vocabs = load_vocabularies(data_dir / TOKENIZER_FILE)
        self.model_config = guided_model_config(
            self._fit_to_vocabularies(start.model_config), self.config)
        self._read_data(data_dir, prep)
        master = self._build_model(data_dir, init_from)
        self._build_optimizer(master)
        if start.saved is not None:
            self._restore(master, start.saved)
        self._seed_dropout()
        self.models = self._wrap(master)
        self._place_in_epoch()
        self.info = self._describe(prep, init_from)
        if not self.resumed and dist.is_main:
            self._start_files(run_config)
        elif dist.is_main:
            self._record_config()
        self._open_books()

    def _pick_precision(self) -> _Precision:
        """How the steps compute: autocast, or a bf16 copy (bf16 on a CPU, warned if emulated)."""
        dtype = resolve_precision(self.config.precision, self.device)
        # bf16 on a CPU: a bf16 copy of the model runs the steps, the fp32 model keeps the
        # master weights (tfm.training.bf16); on a GPU, autocast (with loss scaling in fp16).
        if not (dtype == torch.bfloat16 and self.device.type == "cpu"):
            return _Precision(dtype, False, precision_name(dtype))
        native = cpu_bf16_support()
        if native is None and self.dist.is_main:
            self.reporter.message("warning: this CPU has no native bf16 (no AVX-512 BF16 or "
                                  "AMX): bf16 is emulated and trains many times slower than "
                                  "fp32; --precision auto or fp32 is faster here")
        name = precision_name(dtype) + ": bf16 model, fp32 master weights"
        return _Precision(None, True, name + (f"; native bf16 ({native})" if native else ""))

    def _seed_initial_weights(self) -> None:
        """The CPU threads asked for, and the seed of the initial weights (every process's)."""
        if self.config.num_threads:
            torch.set_num_threads(self.config.num_threads)
        torch.manual_seed(self.config.seed)

    def _fit_to_vocabularies(self, model_config: ModelConfig) -> ModelConfig:
        """Rewrites the model config to fit the vocabularies: their sizes, and shared embeddings."""
        # One embedding can serve both sides only where one vocabulary does.
        sizes = {"src_vocab_size": self.vocabs.src.get_vocab_size(),
                 "tgt_vocab_size": self.vocabs.tgt.get_vocab_size(),
                 "share_embeddings": model_config.share_embeddings and self.vocabs.joint}
        if all(getattr(model_config, k) == v for k, v in sizes.items()):
            return model_config
        return ModelConfig(**{**asdict(model_config), **sizes})

    def _read_data(self, data_dir: Path, prep: PrepareInfo) -> None:
        """The splits, their directions and how they are drawn, what the best model is judged by."""
        self.train_split = load_split(data_dir, "train")
        self.train_alignments = load_token_alignments(
            alignment_path(data_dir, "train"), len(self.train_split)) \
            if self.config.guided_alignment_weight else None
        self.valid_split = load_split(data_dir, "valid") if "valid" in prep.splits else None
        self.directions = prep.direction_names
        # A model of language codes: each direction's forced decoder start (tfm prepare)
        self.starts = prep.decoder_starts
        self.marking = prep.language_marking
        self.probabilities, self.sampling = _sampling(prep, self.directions,
                                                      self.train_split, self.config)
        c = self.config
        directions = [Direction.from_name(d) for d in self.directions]
        languages = ModelLanguages.of(self.vocabs, self.marking)  # each lever marks by it
        self.language_loss = LanguageLoss(c.language_loss, languages, directions) \
            if c.language_loss else None
        self.back_translator = BackTranslator(
            languages, directions, c.seed,
            "--online-bt-from" if c.online_bt_from else "--online-bt-share") \
            if _back_translation_asked(c) else None
        self.back_translating = False  # in the phase of online back-translation
        if self.model_config.drop_residual_layer and len({d.tgt for d in directions}) < 2:
            raise UsageError("--drop-residual-layer needs several target languages (a "
                             "multilingual run); this data has one "
                             f"({', '.join(self.directions)})")
        # The best model has the highest BLEU, or the lowest validation loss without BLEU.
        self.scores_bleu = bool(self.config.valid_bleu and self.valid_split is not None
                                and self.valid_split.tgt_text is not None)

    def _build_model(self, data_dir: Path, init_from: Path | None) -> Transformer:
        """The fp32 model on the device: seeded, or a new run's loaded from ``init_from``."""
        model = Transformer(self.model_config).to(self.device)
        if init_from is not None and not self.resumed:
            _refuse_other_vocabularies(Path(init_from), self.vocabs, data_dir)
            load_weights(model, ModelDir(init_from).weights)
        return model

    def _build_optimizer(self, master: Transformer) -> None:
        """Adam over the master weights, and the loss scaler (enabled in fp16 only).

        Adam is torch's fused kernel on a CPU and on CUDA: one pass over each tensor in place
        of a dozen small ops per parameter, the same update to rounding (docs/BENCHMARKS.md,
        "Fused Adam"). A run resumed from a checkpoint of the unfused Adam goes on unfused:
        the saved parameter groups say how their updates were made."""
        c = self.config
        fused = True if self.device.type in FUSED_ADAM_DEVICES else None  # None: torch's choice
        self.optimizer = torch.optim.Adam(master.parameters(), lr=c.lr, betas=c.adam_betas,
                                          eps=c.adam_eps, weight_decay=c.weight_decay,
                                          fused=fused)
        # Loss scaling for fp16; disabled (a no-op) in fp32 and bf16, which need none.
        self.scaler = torch.amp.GradScaler(self.device.type,
                                           enabled=self.precision.amp_dtype == torch.float16)

    def _restore(self, master: Transformer, saved: dict[str, Any]) -> None:
        """A resumed run's weights, optimizer state, loss scale and (rank 0) random state."""
        master.load_state_dict(saved["model"])
        self.optimizer.load_state_dict(saved["optimizer"])
        if self.scaler.is_enabled() and saved.get("scaler"):  # absent: fp32/bf16 before
            self.scaler.load_state_dict(saved["scaler"])
        if self.dist.is_main:
            torch.set_rng_state(saved["rng"])
            if self.device.type == "cuda" and "cuda_rng" in saved:  # dropout draws on the GPU
                torch.cuda.set_rng_state(saved["cuda_rng"], self.device)

    def _seed_dropout(self) -> None:
        """Dropout in each process but rank 0: a random stream of its own."""
        if not self.dist.is_main:
            torch.manual_seed(distributed.dropout_seed(self.config.seed, self.dist.rank,
                                                       self.run.step))

    def _wrap(self, master: Transformer) -> _Models:
        """What runs the steps: the bf16 copy or ``master``, DDP-wrapped, compiled if asked."""
        # Made from the fp32 weights as loaded: initial, --init-from's or resumed.
        self.bf16 = Bf16Copy(master) if self.precision.bf16_copy else None
        compute = self.bf16.model if self.bf16 is not None else master
        wrapped = distributed.wrap_model(compute, self.dist)
        self.no_sync = distributed.no_sync(wrapped)
        step = torch.compile(wrapped) if self.config.compile else wrapped
        return _Models(master, compute, step)

    def _place_in_epoch(self) -> None:
        """A resumed run's place in its epoch, on this job's number of processes."""
        run, dist = self.run, self.dist
        # Resumed by another number of processes: from the same place in the epoch.
        if self.resumed and run.world_size != dist.world_size:
            position = distributed.resume_position(run.batch_in_epoch, run.world_size,
                                                   dist.world_size)
            run.batch_in_epoch = min(position, len(self.epoch_updates(run.epoch)) - 1)
        run.world_size = dist.world_size

    def _describe(self, prep: PrepareInfo, init_from: Path | None) -> ModelInfo:
        """The model's config.json: architecture, languages, directions and provenance."""
        provenance: dict[str, Any] = {"data_fingerprint": prep.fingerprint,
                                      "seed": self.config.seed}
        if init_from is None and self.resumed:  # a resumed run keeps where it started from
            init_from = recorded_init_from(self.output)
        if init_from is not None:
            provenance["init_from"] = str(init_from)
        return ModelInfo(model=self.model_config, src_lang=prep.src_lang,
                         tgt_lang=prep.tgt_lang, provenance=provenance,
                         directions=self.directions if len(self.directions) > 1 else [],
                         language_marking=self.marking, inline_tags=list(prep.inline_tags))

    def _start_files(self, run_config: str | None) -> None:
        """A new run's files (rank 0): train_config.json, run.yaml and the model directory."""
        self.output.mkdir(parents=True, exist_ok=True)
        self.files.metrics.unlink(missing_ok=True)
        # train_config.json first: a run that has it started here, and --resume starts it
        # again from step 0 with these settings until it has a checkpoint.
        atomic_write_bytes(self.files.train_config,
                           (json.dumps(asdict(self.config), indent=2) + "\n").encode())
        if run_config is not None:
            atomic_write_bytes(self.files.run_config, run_config.encode())
        save_model_dir(self.output, self.models.master, self.vocabs, self.info)
        lexicon = self.data_dir / LEXICON_FILE  # from `tfm align`: it places documents' tags
        if lexicon.is_file():
            atomic_write_bytes(self.output / LEXICON_FILE, lexicon.read_bytes())

    def _record_config(self) -> None:
        """A resumed run's settings in train_config.json where the resume changed them (a
        longer budget, a back-translation phase added): the next resume starts from them."""
        text = json.dumps(asdict(self.config), indent=2) + "\n"
        path = self.files.train_config
        if not path.exists() or path.read_text() != text:
            atomic_write_bytes(path, text.encode())

    def _open_books(self) -> None:
        """The parameter count, metrics.jsonl (rank 0) and the clocks."""
        self.n_params = count_parameters(self.models.master)
        self.metrics_file = AppendLog(self.files.metrics) if self.dist.is_main else None
        # The step of the newest complete checkpoint, for the line a write failure ends with.
        self.checkpoint_step: int | None = self.run.step if self.resumed else None
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
        rows = epoch_rows(self.train_split.directions, self.probabilities, c.seed, epoch)
        batches = make_batches(self.train_split.src_lengths, self.train_split.tgt_lengths,
                               c.max_tokens, c.seed, epoch, rows=rows)
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
            "precision": self.precision.name, "train_pairs": len(self.train_split),
            "valid_pairs": len(self.valid_split) if self.valid_split else 0,
            "batches_per_epoch": len(make_batches(
                self.train_split.src_lengths, self.train_split.tgt_lengths, config.max_tokens,
                config.seed, 0)),
            "steps_per_epoch": len(self.epoch_updates(0)),
            "resumed_step": run.step if self.resumed else None,
            "max_steps": config.max_steps or None, "max_epochs": config.max_epochs or None,
            "max_time": config.max_time or None, "processes": self.dist.world_size,
            "sampling": self.sampling,
        })
        if len(self.directions) > 1 and not self.resumed:
            self.record({"kind": "sampling", **self.sampling})
        if self.dist.enabled:
            self.reporter.message(f"{self.dist.world_size} processes ({self.dist.backend})")
        self.start_time = time.monotonic()
        self.window = _Window()
        stopped = ""
        self.models.compute.train()
        with StopSignal() as signals:
            try:
                while not stopped:
                    epoch = run.epoch
                    updates = self.epoch_updates(epoch)
                    while run.epoch == epoch and not stopped:  # step() moves on at epoch end
                        stopped = self.step(updates, signals)
            except WriteError as e:  # a full disk: stop as an interruption stops
                self.finish()
                kept = (f"its last complete checkpoint is step {self.checkpoint_step}"
                        if self.checkpoint_step is not None else "it has no checkpoint yet")
                raise WriteError(f"{e} Training stopped at step {run.step}; {kept}: make "
                                 "room, then continue with --resume") from e
        self.finish()
        return stopped

    def step(self, updates: list[list[np.ndarray]], signals: StopSignal) -> str:
        """One optimizer step, then what follows it: logging, validation, the end of an epoch,
        saving. Returns why the run stops here, or ""."""
        run, config = self.run, self.config
        # bf16 on a CPU pads batches to a few widths: a few compiled kernels (tfm.training.bf16).
        width = BATCH_WIDTH_MULTIPLE if self.bf16 is not None else 1
        # The schedule's progress through the budget, from the time all processes agreed on.
        progress = budget_progress(config, run.step,
                                   run.epoch + run.batch_in_epoch / len(updates),
                                   self.agreed_seconds)
        group = self._update_batches(updates[run.batch_in_epoch], width, progress)
        loss, nll, n_tokens = self._apply_update(group, progress)
        signum, over_time = self._agree_to_go_on(signals, loss)
        run.step += 1
        run.batch_in_epoch += 1
        self.window.add(loss, nll, n_tokens, sum(b.n_src_tokens for b in group))
        if run.step % config.log_every == 0 or run.step == 1:
            self.log_window()
        at_epoch_end = run.batch_in_epoch == len(updates)
        stopped = self._stop_reason(signum, over_time, at_epoch_end)
        # Validate when asked, and once more at the end (not after an interruption: a
        # resumed run goes on from there).
        if self.valid_split is not None and not signum and (
                run.step % config.valid_every == 0 or stopped):
            stopped = self._validate_and_check_patience(stopped)
        if at_epoch_end:
            run.epoch += 1
            run.batch_in_epoch = 0
        if stopped or run.step % config.save_every == 0:
            self.save()
        return stopped

    def _apply_update(self, group: list[Batch], progress: float) -> tuple[float, float, int]:
        """The optimizer update on ``group``: its loss, NLL and target tokens. Running out of
        memory, or an fp16 loss scale that keeps falling, ends the run in one line."""
        run, config = self.run, self.config
        try:
            loss, nll, n_tokens = _update(
                self.models.step, self.optimizer, group, config, self.precision.amp_dtype,
                run.step + 1, self.dist, self.scaler, no_sync=self.no_sync, progress=progress,
                bf16=self.bf16, language_loss=self.language_loss)
        except (torch.OutOfMemoryError, MemoryError) as e:
            self.finish()
            raise _out_of_memory(group, config, self.device) from e
        if self.scaler.is_enabled() and self.scaler.get_scale() < MIN_LOSS_SCALE:
            self.finish()  # the same in every process: their gradients are all-reduced
            raise TrainingDiverged(
                f"the fp16 loss scale fell below {MIN_LOSS_SCALE:g} at step {run.step + 1}: "
                "the gradients overflow at every step; the last good checkpoint (step "
                f"{run.saved_steps[-1] if run.saved_steps else 0}) is kept. Lower --lr, raise "
                "--warmup or use --precision fp32")
        return loss, nll, n_tokens

    def _agree_to_go_on(self, signals: StopSignal, loss: float) -> tuple[float, bool]:
        """Every process must stop at the same step: agree on signals, time and divergence
        (a non-finite loss ends the run in one line). Returns the signal (0: none) and
        whether --max-time is reached."""
        run, config = self.run, self.config
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
        return signum, over_time

    def _stop_reason(self, signum: float, over_time: bool, at_epoch_end: bool) -> str:
        """Why the run stops after this step (a signal, --max-steps, --max-time,
        --max-epochs), or ""."""
        run, config = self.run, self.config
        stopped = ""
        if signum:
            stopped = f"interrupted by {signal.Signals(int(signum)).name}"
        elif config.max_steps and run.step >= config.max_steps:
            stopped = f"reached --max-steps {config.max_steps}"
        elif over_time:
            stopped = f"reached --max-time {config.max_time:g} min"
        if at_epoch_end and config.max_epochs and run.epoch + 1 >= config.max_epochs \
                and not stopped:
            stopped = f"reached --max-epochs {config.max_epochs}"
        return stopped

    def _validate_and_check_patience(self, stopped: str) -> str:
        """Validate; returns why the run stops: ``stopped``, else --patience used up."""
        config = self.config
        self.validate()
        if config.patience and self.run.bad_validations >= config.patience:
            better = "better BLEU" if self.scores_bleu else "lower validation loss"
            stopped = stopped or f"no {better} in {config.patience} validations"
        return stopped

    def _update_batches(self, batches: list[np.ndarray], width: int,
                        progress: float) -> list[Batch]:
        """An update's batches on the device; in the phase of online back-translation
        (_in_phase), followed by their back-translated pairs, made by the weights being
        trained as the steps compute with them: the bf16 copy in a bf16 run on a CPU (rounded
        from the masters after every update), else the fp32 masters."""
        group = [collate(self.train_split, b, width, self.starts,
                         self.train_alignments).to(self.device) for b in batches]
        bt = self.back_translator
        if bt is None or not self._in_phase(progress):
            return group
        made = [bt.batch(self.models.compute, self.train_split, b, self.run.step, self.device,
                         width) for b in batches]
        return group + [b for b in made if b is not None]

    def _in_phase(self, progress: float) -> bool:
        """Whether the next update is in the phase of online back-translation: from step
        --online-bt-from, or once ``progress`` through the budget leaves --online-bt-share of
        it; said once, when it begins (or resumes within it)."""
        c = self.config
        inside = self.run.step >= c.online_bt_from if c.online_bt_from else \
            progress >= 1.0 - c.online_bt_share
        if inside and not self.back_translating:
            self.back_translating = True
            self.reporter.message(f"step {self.run.step + 1}: online back-translation "
                                  "(each batch's pairs also back-translated into a third "
                                  "language)")
        return inside

    def record(self, metrics: dict[str, Any]) -> None:
        """Append one line to metrics.jsonl (rank 0)."""
        if self.metrics_file is not None:
            self.metrics_file.write_line(json.dumps(metrics))

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
        if self.scaler.is_enabled():
            metrics["loss_scale"] = self.scaler.get_scale()
        self.record(metrics)
        self.reporter.step(metrics)
        self.window = _Window(start=now)

    def validate(self) -> None:
        """Rank 0 validates and keeps the best weights (the highest BLEU, or without BLEU the
        lowest validation loss); the others wait, then take its verdict, so that all processes
        agree on the best step and on patience."""
        run = self.run
        if self.dist.is_main:
            elapsed = self.elapsed()  # the time it took to train the model validated
            # The weights saved are validated: with bf16 on a CPU the fp32 masters, not their
            # bf16 copy. Decoding the copy there also slowed the training steps after each
            # validation (docs/BENCHMARKS.md, "Training in bf16 on a CPU with AMX").
            master = self.models.master
            master.eval()
            metrics = validate(master, self.valid_split, self.vocabs.tgt, self.config,
                               self.device, self.precision.amp_dtype, self.directions,
                               self.starts)
            master.train()
            metrics.update(step=run.step, epoch=run.epoch, kind="valid", elapsed=elapsed)
            if self.scores_bleu:
                improved = run.best_bleu is None or metrics["bleu"] > run.best_bleu
            else:
                improved = run.best_loss is None or metrics["loss"] < run.best_loss
            if improved:
                run.best_step, run.bad_validations = run.step, 0
                run.best_bleu, run.best_loss = metrics.get("bleu"), metrics["loss"]
                weights = weights_to_bytes(master, {"format": "pt", "step": str(run.step)})
                save_recorded(self.output, {self.files.weights: weights})
                self.info.provenance.update(best_step=run.step, valid_loss=metrics["loss"])
                if self.scores_bleu:
                    self.info.provenance.update(valid_bleu=metrics["bleu"],
                                                valid_bleu_signature=metrics["bleu_signature"])
                save_model_info(self.files, self.info)
            else:
                run.bad_validations += 1
            metrics.update(best_bleu=run.best_bleu, best_loss=run.best_loss)
            self.record(metrics)
            self.reporter.validation(metrics)
        run.best_bleu, run.best_loss, run.best_step, run.bad_validations = distributed.broadcast(
            (run.best_bleu, run.best_loss, run.best_step, run.bad_validations), self.dist)

    def save(self) -> None:
        """Checkpoint: the latest weights, a numbered copy (keeping ``keep_last``) and the
        training state. Every process keeps the books; rank 0 writes the files."""
        run, config = self.run, self.config
        run.elapsed = self.elapsed()
        numbered = config.keep_last > 0 and run.step not in run.saved_steps
        dropped = []
        if numbered:
            run.saved_steps.append(run.step)
            while len(run.saved_steps) > config.keep_last:
                dropped.append(run.saved_steps.pop(0))
        if not self.dist.is_main:
            return
        master = self.models.master
        weights = weights_to_bytes(master, {"format": "pt", "step": str(run.step)})
        files = {self.files.last_weights: weights}
        if self.valid_split is None or run.best_step is None:
            files[self.files.weights] = weights
        if numbered:
            files[self.files.checkpoint(run.step)] = weights
        # The training state last: a checkpoint is complete when it is written. The state of
        # the save before stays beside it (resume falls back to it if this one is damaged);
        # numbered checkpoints beyond --keep-last go only once this one is complete.
        files[self.files.train_state] = train_state_bytes({
            "model": master.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scaler": self.scaler.state_dict(),  # empty unless fp16
            "rng": torch.get_rng_state(),  # rank 0's: exact resume is for one process
            # On a GPU dropout draws from the device's generator: without it a resumed run
            # would drop other units than the run that was never stopped.
            **({"cuda_rng": torch.cuda.get_rng_state(self.device)}
               if self.device.type == "cuda" else {}),
            "model_config": asdict(self.model_config),
            "run": asdict(run),
        })
        save_recorded(self.output, files, drop=[self.files.checkpoint(old) for old in dropped],
                      keep_previous={self.files.train_state: self.files.previous_train_state})
        self.checkpoint_step = run.step

    def finish(self) -> None:
        """Close the metrics, draw the learning curve (rank 0) and end the reports."""
        if self.metrics_file is not None:
            self.metrics_file.close()
            self.metrics_file = None
            _draw_learning_curve(self.files, self.reporter)
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


def guided_model_config(model: ModelConfig, config: TrainConfig) -> ModelConfig:
    """The model of a run with --guided-alignment records the layer whose first
    cross-attention head it trains (the penultimate, as Garg et al. 2019), for decoding to read
    alignments from; without it the model's config is unchanged."""
    if not config.guided_alignment_weight:
        return model
    return replace(model, alignment_layer=max(model.decoder_layers - 2, 0))


def _sampling(prep: PrepareInfo, directions: list[str], split: TokenizedSplit,
              config: TrainConfig) -> tuple[np.ndarray, dict[str, Any]]:
    """How the run draws its directions (tfm.data.sampling): their probabilities, and as the
    run reports them: each direction's pairs and probability, and by what (the temperature,
    or the corpora's weights)."""
    sizes = np.bincount(split.directions, minlength=len(directions))
    weights = prep.weights
    if weights is not None and config.sampling_temperature != 1.0:
        raise UsageError("--sampling-temperature: the corpora of this dataset give weights, "
                         "which decide the sampling; give one or the other")
    p = direction_probabilities(sizes.tolist(), config.sampling_temperature, weights)
    return p, {"directions": list(directions), "pairs": sizes.tolist(),
               "probabilities": [round(float(x), 6) for x in p],
               "by": "weights" if weights is not None else
               f"temperature {config.sampling_temperature:g}"}


def _back_translation_asked(config: TrainConfig) -> bool:
    """Whether the run has a phase of online back-translation; refuses both spellings of it
    at once, and a share of a budget it does not have."""
    if config.online_bt_from and config.online_bt_share:
        raise UsageError("--online-bt-from and --online-bt-share both say where the phase "
                         "begins; give one")
    if config.online_bt_share > 1:
        raise UsageError(f"--online-bt-share {config.online_bt_share:g}: a share of the "
                         "budget, from 0 to 1")
    if config.online_bt_share and not (config.max_steps or config.max_epochs
                                       or config.max_time):
        raise UsageError("--online-bt-share is a share of the budget: give --max-steps, "
                         "--max-epochs or --max-time")
    return bool(config.online_bt_from or config.online_bt_share)


def _draw_learning_curve(files: ModelDir, reporter: TrainReporter) -> None:
    """learning_curve.png from metrics.jsonl; a failure costs a warning, never the run."""
    try:
        from tfm.plotting import plot_learning_curve

        plot_learning_curve(files.metrics, files.curve)
    except Exception as e:  # a picture is never worth a failed run
        detail = (str(e).strip().splitlines() or [type(e).__name__])[0]
        reporter.message(f"warning: could not draw {files.curve.name}: {detail}")


def _out_of_memory(group: list[Batch], config: TrainConfig, device: torch.device
                   ) -> ResourceError:
    """Which batch did not fit, and what to do about it."""
    shapes = ", ".join(f"{b.src.size(0)} sentences x {max(b.src.size(1), b.tgt_in.size(1))} "
                       "positions" for b in group)
    return ResourceError(
        f"out of {'GPU memory' if device.type == 'cuda' else 'memory'} at a batch of {shapes} "
        f"(--max-tokens {config.max_tokens}); lower --max-tokens and raise --update-freq to "
        "keep the same batch size per update. Resume with --resume.")


def _update(model: torch.nn.Module, optimizer: torch.optim.Optimizer, group: list[Batch],
            config: TrainConfig, amp_dtype: torch.dtype | None, step: int,
            dist: distributed.Distributed, scaler: torch.amp.GradScaler, *,
            no_sync: Callable[[], AbstractContextManager] = nullcontext,
            progress: float = 0.0, bf16: Bf16Copy | None = None,
            language_loss: LanguageLoss | None = None) -> tuple[float, float, int]:
    """One optimizer step over ``group`` (``update_freq`` batches) in every process, the loss
    normalised by the number of target tokens of the whole update. Returns this process's
    summed loss, summed NLL and target tokens; a NaN loss when the update was refused for a
    non-finite gradient.

    A disabled ``scaler`` (fp32, bf16) scales nothing. With an enabled one (fp16) the
    backward pass runs on the scaled loss, and an update whose gradients overflowed is skipped
    (the weights and the optimizer stay as they were) while the scaler lowers its scale: that
    is fp16's normal course, not a divergence, so the loss is returned as it was. A skipped
    update still counts as a step.

    With ``bf16`` (bf16 on a CPU), ``model`` is its bf16 copy: the gradients go to the fp32
    master weights, which are clipped and updated, and the copy is rounded from them after.
    ``language_loss`` (--language-loss) adds its term to each batch's loss before the
    backward pass; the loss returned is the translation loss alone.

    Across processes the update must equal one process's over all their batches: the gradient
    of (every process's summed loss) / (all their target tokens). So each process divides its
    loss by the total token count, and multiplies it by the world size because DDP averages
    the gradients over the processes (divides their sum by the world size).
    """
    n_tokens = sum(b.n_tgt_tokens for b in group)
    (total_tokens,) = distributed.all_reduce([n_tokens], dist)
    lr = learning_rate(step, config.lr, config.warmup_steps, config.lr_schedule, progress)
    for g in optimizer.param_groups:
        g["lr"] = lr
    optimizer.zero_grad(set_to_none=True)
    if bf16 is not None:
        bf16.zero_grad()
    total_loss = total_nll = 0.0
    for i, batch in enumerate(group):
        # Accumulate locally; gradients are all-reduced once, in the update's last backward.
        with no_sync() if i < len(group) - 1 else nullcontext():
            objective, loss, nll = _batch_loss(model, batch, config, amp_dtype, language_loss)
            scaler.scale(objective * dist.world_size / total_tokens).backward()
        total_loss += loss.item()
        total_nll += nll.item()
    if not math.isfinite(total_loss):
        return total_loss, total_nll, n_tokens
    if bf16 is not None:
        bf16.gradients_to_master()
    scaler.unscale_(optimizer)  # the true gradients, for the norm and its clipping
    # The gradient norm, clipped when asked; a non-finite one must never reach the weights.
    params = bf16.master.parameters() if bf16 is not None else model.parameters()
    norm = torch.nn.utils.clip_grad_norm_(params,
                                          config.clip_norm if config.clip_norm > 0 else math.inf)
    if not torch.isfinite(norm) and not scaler.is_enabled():
        return math.nan, total_nll, n_tokens
    scaler.step(optimizer)  # skipped when the scaled gradients overflowed
    scaler.update()  # lowered after an overflow, raised after a long run without one
    if bf16 is not None:
        bf16.weights_from_master()
    return total_loss, total_nll, n_tokens


def _batch_loss(model: torch.nn.Module, batch: Batch, config: TrainConfig,
                amp_dtype: torch.dtype | None, language_loss: LanguageLoss | None
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """One batch's objective (the translation loss, plus --language-loss's and
    --guided-alignment's terms), its summed label-smoothed loss and its summed NLL."""
    guided = config.guided_alignment_weight > 0 and batch.alignment is not None
    with autocast(batch.src.device, amp_dtype):  # (N, V) at real positions; (B, T, S)
        logits, weights = model(batch.src, batch.tgt_in, batch.tgt_mask, alignment=True) \
            if guided else (model(batch.src, batch.tgt_in, batch.tgt_mask), None)
    loss, nll = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask],
                                    config.label_smoothing)
    objective = loss if language_loss is None else loss + language_loss(logits, batch)
    if weights is not None:  # --guided-alignment: the guided head's term
        objective = objective + config.guided_alignment_weight * guided_alignment_loss(
            weights, batch.alignment)
    return objective, loss, nll
