"""A training run's state between processes: what resume restores (from the newest intact
checkpoint, or from step 0 where the run has none yet), which options a resumed run may change,
and the stop signals (Ctrl-C, SIGTERM) turned into a clean stop."""

from __future__ import annotations

import json
import shutil
import signal
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from tfm.atomic import link_over
from tfm.checkpoint import load_train_state
from tfm.config import (
    PRESETS,
    ModelConfig,
    TrainConfig,
    model_config_from_preset,
    option_name,
    option_spelling,
    train_config_from_dict,
)
from tfm.errors import ModelError, UsageError
from tfm.integrity import Manifest
from tfm.layout import ModelDir
from tfm.model_info import read_model_info
from tfm.training.distributed import launched_by_torchrun
from tfm.training.schedule import SCHEDULES

# Options that may change when a run is resumed: how long it goes on, and where and how it
# computes (a run may move from CPU to GPU), but not what it computes.
RESUMABLE_CHANGES = {"max_steps", "max_epochs", "max_time", "patience", "valid_every",
                     "save_every", "keep_last", "log_every", "device", "num_threads", "compile",
                     "precision"}


@dataclass(frozen=True)
class Overrides:
    """The options given for a run being resumed, field by field (a field not here stays as
    the run has it): ``train``, TrainConfig fields, of which only RESUMABLE_CHANGES may differ
    from the run's; ``model``, ModelConfig fields, and ``preset``, a preset whose sizes count
    for the fields not given there, which may only repeat the run's own (a run's model cannot
    change once it has weights). A run resumed before its first checkpoint, or never started,
    takes ``train`` as its whole TrainConfig (the defaults for the rest)."""

    train: Mapping[str, Any] = field(default_factory=dict)
    model: Mapping[str, Any] = field(default_factory=dict)
    preset: str | None = None

    @staticmethod
    def of(config: TrainConfig, *names: str, model: Mapping[str, Any] | None = None,
           preset: str | None = None) -> Overrides:
        """The fields ``names`` of ``config`` given (every field where none is named), with
        ``model`` and ``preset``."""
        values = asdict(config)
        return Overrides({n: values[n] for n in names or values}, dict(model or {}), preset)


@dataclass
class RunState:
    """What resume restores besides weights and optimizer."""

    step: int = 0
    epoch: int = 0
    batch_in_epoch: int = 0
    best_bleu: float | None = None
    best_step: int | None = None
    best_loss: float | None = None  # validation loss of the best step
    bad_validations: int = 0  # validations in a row without a better model
    elapsed: float = 0.0  # seconds of training before this process
    saved_steps: list[int] = field(default_factory=list)
    world_size: int = 1  # processes that trained up to ``step``


class StopSignal:
    """Turns the first SIGINT/SIGTERM into a flag checked between steps; a second one
    interrupts at once. (torchrun passes a signal it receives on to every process once.)"""

    def __init__(self) -> None:
        self.signum = 0  # the signal received, 0 while none
        self._previous: dict[int, Any] = {}

    def __enter__(self) -> StopSignal:
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


@dataclass
class RunStart:
    """Where a run starts: its settings, its model's, its state and, for a run that goes on
    from a checkpoint, the training state saved there."""

    config: TrainConfig
    model_config: ModelConfig
    run: RunState = field(default_factory=RunState)
    saved: dict[str, Any] | None = None  # None: the run starts at step 0
    remove_old: bool = False  # --overwrite: the run already in the output is deleted first


def start_new(output: Path, model_config: ModelConfig | None, config: TrainConfig,
              overwrite: bool) -> RunStart:
    """A new run in ``output``, with these settings; refuses to replace a run already there
    unless ``overwrite``, and settings that cannot run."""
    exists = ModelDir(output).train_state.exists()
    if exists and not overwrite:
        raise UsageError(f"{output} already holds a training run; continue it with --resume, "
                         "start again with --overwrite, or choose another --output")
    model_config = _required(model_config)
    return _startable(output, RunStart(config, model_config, remove_old=exists))


def start_resumed(output: Path, model_config: ModelConfig | None, overrides: Overrides,
                  say: Callable[[str], None] = lambda _: None) -> RunStart:
    """The run in ``output`` as it goes on from its newest intact checkpoint, with the
    ``overrides`` asked anew; refuses what cannot be done. A run with no checkpoint yet starts
    again from step 0 (its saved state None), with the settings it recorded when it started,
    if it did (else with ``overrides.train`` and ``model_config``). ``say`` gets the one line
    that tells which checkpoint it goes on from, where that is not simply the latest."""
    saved, note = newest_intact_state(output)
    if note:
        say(note)
    if saved is None:
        config, restarted_model = _restart(output, model_config, overrides, say)
        return _startable(output, RunStart(config, _required(restarted_model)))
    config = _resumed_config(output, overrides.train, saved["run"]["step"])
    model_config = ModelConfig(**saved["model_config"])
    _check_resumed_model(output, model_config, overrides.preset, dict(overrides.model))
    return _startable(output, RunStart(config, model_config, RunState(**saved["run"]), saved))


def _required(model_config: ModelConfig | None) -> ModelConfig:
    """The model configuration, where one is known; refused where none is."""
    if model_config is None:
        raise UsageError("no model configuration given")
    return model_config


def _startable(output: Path, start: RunStart) -> RunStart:
    """``start``, once its settings are known to run: a stopping rule, a known schedule that
    has a budget to decay over, and something left to do."""
    config, run = start.config, start.run
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
    if config.max_time and run.elapsed >= config.max_time * 60:
        raise UsageError(f"nothing left to do: the run in {output} trained "
                         f"{run.elapsed / 60:.1f} of {config.max_time:g} minutes; raise "
                         "--max-time to train on")
    return start


def newest_intact_state(output: Path) -> tuple[dict[str, Any] | None, str | None]:
    """The training state to resume the run in ``output`` from: train_state.pt, or where it is
    damaged (its checksum in manifest.json differs, or it does not load) the state of the save
    before (train_state.prev.pt). Returns (state, the line saying which was taken where it was
    not the latest), (None, None) where the run has no checkpoint; refuses where every one is
    damaged."""
    files = ModelDir(output)
    manifest = Manifest.read(output, strict=False)  # unreadable: the states load unchecked
    problems = []
    for path in (files.train_state, files.previous_train_state):
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            continue
        problem = manifest.damage(path, data)
        if problem is None:
            try:
                state = load_train_state(path, data)
                if not isinstance(state, dict) or not {"run", "model_config"} <= state.keys():
                    problem = "not a training state"
            except ModelError as e:
                problem = f"unreadable: {str(e.__cause__ or e)[:120]}"
        if problem is None:
            if path == files.train_state:
                return state, None
            latest = problems[0] if problems else f"{files.train_state.name} is missing"
            ranks = launched_by_torchrun()
            if ranks is None or ranks[0] == 0:  # (the process that writes the files)
                # The intact state takes the damaged one's place, so that the next save keeps
                # it as the state before, not the damaged one.
                link_over(path, files.train_state)
                manifest.forget([files.train_state])
                if manifest.name(path) in manifest.files:
                    manifest.files[manifest.name(files.train_state)] = \
                        manifest.files[manifest.name(path)]
                manifest.save()
            return state, (f"{latest}; resuming from the checkpoint before it, step "
                           f"{state['run']['step']} ({path.name})")
        problems.append(f"{path.name} is damaged ({problem})")
    if problems:
        raise ModelError(f"{output}: {'; '.join(problems)}; no intact checkpoint to resume "
                         "from: restore one from a copy, or start afresh with --overwrite")
    return None, None


def _restart(output: Path, model_config: ModelConfig | None, given: Overrides,
             say: Callable[[str], None]) -> tuple[TrainConfig, ModelConfig | None]:
    """The configuration of a resumed run that has no checkpoint yet, started again from step
    0: the settings it recorded when it started (train_config.json, config.json's model),
    checked as a resume checks them; a run that never started takes the command line's."""
    files = ModelDir(output)
    config = TrainConfig(**given.train)
    if files.train_config.exists():
        config = _resumed_config(output, given.train, 0)
        if files.config.exists():
            model_config = read_model_info(output).model
            _check_resumed_model(output, model_config, given.preset, dict(given.model))
        say(f"{output} has no checkpoint yet (the run stopped before its first save): training "
            f"it from step 0 with its recorded settings ({files.train_config.name})")
    elif files.config.exists():
        raise UsageError(f"{output} holds a model but no training run (no "
                         f"{files.train_config.name}): --resume has nothing to continue; "
                         "choose another --output")
    else:
        say(f"{output} holds no training run yet: starting one from step 0")
    return config, model_config


def recorded_init_from(output: Path) -> Path | None:
    """The model directory the run in ``output`` started from (--init-from), as its
    config.json records it; None for a run from fresh weights."""
    try:
        source = read_model_info(output).provenance.get("init_from")
    except ModelError:
        return None
    return Path(source) if source else None


# What --init-from may change in the trained model's configuration: regularisation only, which
# changes no weight's shape.
INIT_FROM_CHANGES = ("dropout", "attention_dropout", "activation_dropout")
# The model options of `tfm train` (the ModelConfig fields that have one), as the command line
# spells them: the dropout rates, and the architecture's (all the others).
MODEL_OPTIONS = {f.name: option_spelling(ModelConfig, f.name) for f in fields(ModelConfig)
                 if option_spelling(ModelConfig, f.name) is not None}
ARCHITECTURE_OPTIONS = {k: v for k, v in MODEL_OPTIONS.items() if k not in INIT_FROM_CHANGES}


def initial_model_config(init_from: Path, preset: str | None = None,
                         architecture: dict[str, Any] | None = None,
                         **changes: float | None) -> ModelConfig:
    """The configuration of the trained model in ``init_from`` (a model directory), for a new
    run that starts from its weights. ``preset`` and ``architecture`` (ARCHITECTURE_OPTIONS'
    fields; None: not given) may only repeat the model's own; ``changes`` (None: keep the
    model's own) are the dropout rates of INIT_FROM_CHANGES."""
    unknown = set(changes) - set(INIT_FROM_CHANGES)
    assert not unknown, unknown
    model = read_model_info(init_from).model
    other = _asked_otherwise(model, preset, architecture or {}, ARCHITECTURE_OPTIONS)
    if other is not None:
        asked, has = other
        raise UsageError(f"{asked} contradicts the model in {init_from} ({has}), whose "
                         "architecture --init-from takes (only the dropout options may change)")
    return replace(model, **{k: v for k, v in changes.items() if v is not None})


def _check_resumed_model(output: Path, model: ModelConfig, preset: str | None,
                         options: dict[str, Any]) -> None:
    """Refuses a model option given with --resume that differs from the run's model, which
    cannot change once it has weights (silently ignored, `--resume --dropout 0.3` would train
    on with the old rate); the same values pass, so a script may resume with the command
    line that started the run."""
    other = _asked_otherwise(model, preset, options, MODEL_OPTIONS)
    if other is not None:
        asked, has = other
        raise UsageError(f"{asked} contradicts the run being resumed in {output} ({has}): a "
                         "run's model cannot change; resume with the same options, or start a "
                         "new --output from its weights with --init-from")


def _asked_otherwise(model: ModelConfig, preset: str | None, given: dict[str, Any],
                     options: dict[str, str]) -> tuple[str, str] | None:
    """What a command line asks of ``model`` that it is not, among the fields of ``options``
    (field -> option name): the option as its user wrote it ("--d-model 64", "--preset base")
    and what the model has instead ("256", "d_model 256, not 512"; a preset's value counts for
    the fields not given on their own); None where all agree. ``given`` maps fields to values
    (None: not given)."""
    given = {k: v for k, v in given.items() if v is not None and k in options}
    for name, value in given.items():
        if getattr(model, name) != value:
            return f"{options[name]} {value}", f"{getattr(model, name)}"
    if preset is not None:
        of_preset = model_config_from_preset(preset)  # refuses an unknown one
        for name in PRESETS[preset]:
            if name in options and name not in given \
                    and getattr(model, name) != getattr(of_preset, name):
                return (f"--preset {preset}",
                        f"{name} {getattr(model, name)}, not {getattr(of_preset, name)}")
    return None


def _resumed_config(output: Path, given: Mapping[str, Any], step: int) -> TrainConfig:
    """The saved run's TrainConfig, at optimizer step ``step``, with the fields given now;
    refuses changes other than how long the run goes on, where and how it computes, and an
    online back-translation phase that has not begun (_check_phase_change)."""
    path = ModelDir(output).train_config
    try:
        saved = train_config_from_dict(json.loads(path.read_text()))
    except FileNotFoundError as e:
        raise UsageError(f"{output}: no {path.name}; nothing to resume") from e
    values = asdict(saved)
    for name in sorted(given):
        new = given[name]
        if name == "online_bt_from" and new != values[name]:
            _check_phase_change(values[name], new, step)
        elif name not in RESUMABLE_CHANGES and new != values[name]:
            option = option_name(name) or f"TrainConfig.{name}"  # as the user spelled it
            raise UsageError(
                f"{option} {new} contradicts the run being resumed ({values[name]}); resume "
                "with the same options or start a new --output")
        values[name] = new
    return TrainConfig(**values)


def _check_phase_change(saved: int, new: int, step: int) -> None:
    """A resumed run may add, move or drop its --online-bt-from phase (0: none) while the
    phase has not begun: its steps before it are those of a run without it, since the
    phase draws nothing from the run's random state. Refused once it has begun, or to begin
    at a step already trained."""
    if saved and saved <= step:
        raise UsageError(f"--online-bt-from {new} contradicts the run being resumed: its phase "
                         f"began at step {saved} and the run is at step {step}; resume with "
                         f"--online-bt-from {saved}")
    if new and new < step:
        raise UsageError(f"--online-bt-from {new}: the run being resumed is at step {step}; "
                         f"the phase can begin at step {step} or later, not in the steps "
                         "already trained")


def remove_run(output: Path) -> None:
    """Delete the files a training run writes in ``output`` (and nothing else)."""
    files = ModelDir(output)
    for path in files.run_files():
        path.unlink(missing_ok=True)
    shutil.rmtree(files.checkpoints, ignore_errors=True)
