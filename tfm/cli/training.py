"""Training commands: ``tfm train``, ``tfm average`` and ``tfm plot-curve``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tfm.cli.app import app, err, writing_into
from tfm.cli.fields import Fields, default_note, derive
from tfm.cli.run_config import with_config
from tfm.config import ModelConfig, TrainConfig
from tfm.errors import EXIT_INTERRUPTED, UsageError

RUN = "Data and output"  # --help's panel of the run's own options (the others: their fields')


@app.command()
@with_config()
@derive(model=Fields(ModelConfig, given_only=True, metavars={
            **dict.fromkeys(("dropout", "attention_dropout", "activation_dropout"), "<p>"),
            "drop_residual_layer": "<n>"}),
        options=Fields(TrainConfig, given_only=True, metavars={
            "sampling_temperature": "<T>", "language_loss": "<w>", "online_bt_from": "<k>",
            "online_bt_share": "<F>", "guided_alignment_weight": "<w>"}))
def train(
    data: Annotated[Path, typer.Option(
        "--data", "-d", help="Prepared dataset directory from `tfm prepare`.",
        rich_help_panel=RUN)] = Path("data-bin"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Model directory to write.", rich_help_panel=RUN)
    ] = Path("model"),
    preset: Annotated[Optional[str], typer.Option(
        "--preset", help="Model size: base (the paper's), big, small, tiny; students to "
        "distil into (shallow decoder): student-3-1, student-3-2, student-6-1, student-12-1, "
        "student-tiny."
        + default_note("small"), rich_help_panel="Model")] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --output where it stopped.",
        rich_help_panel=RUN)] = False,
    init_from: Annotated[Optional[Path], typer.Option(
        "--init-from", help="Start from this trained model's weights (fine-tuning), at step 0.",
        rich_help_panel=RUN)] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Start afresh, deleting the run already in --output.",
        rich_help_panel=RUN)] = False,
    *,
    model: dict[str, Any],  # ModelConfig's options, those given
    options: dict[str, Any],  # TrainConfig's options, those given
    tensorboard: Annotated[Optional[Path], typer.Option(
        "--tensorboard", help="Also log TensorBoard events into this directory.",
        rich_help_panel=RUN)] = None,
) -> None:
    """Train an encoder-decoder Transformer on a prepared dataset.

    Under torchrun (`torchrun --nproc_per_node=N -m tfm train ...`) the N processes train
    together with DistributedDataParallel: gloo on CPU, NCCL on CUDA (one GPU per process).
    Options in detail: docs/CLI.md#tfm-train.
    """
    from contextlib import nullcontext

    from tfm.config import model_config_from_preset
    from tfm.training.distributed import launched_by_torchrun
    from tfm.training.loop import resume as run_resume
    from tfm.training.loop import train as run_train
    from tfm.training.reporting import RichTrainReporter
    from tfm.training.state import Overrides

    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; give one")
    if resume and init_from is not None:
        raise UsageError("--init-from starts a new run from a trained model and --resume "
                         "continues the run in --output; give one")
    # A new run takes the options given over TrainConfig's defaults; a resumed run compares
    # them, and what they say of the model, with its own (tfm.training.state.Overrides).
    config = None if resume else TrainConfig(**options)
    # From --init-from, the architecture's options must be the model's.
    if init_from is not None:
        from tfm.training.state import INIT_FROM_CHANGES, initial_model_config

        model_config = initial_model_config(
            init_from, preset, {k: v for k, v in model.items() if k not in INIT_FROM_CHANGES},
            **{k: v for k, v in model.items() if k in INIT_FROM_CHANGES})
    else:  # with --resume: the model of a run that has no checkpoint yet (never started)
        model_config = model_config_from_preset(preset or "small", **model)
    # One process writes --output (rank 0 of a torchrun job): it alone holds its lock.
    ranks = launched_by_torchrun()
    reporter = RichTrainReporter(err)
    with writing_into(output, "tfm train") if ranks is None or ranks[0] == 0 else nullcontext():
        if config is None:
            result = run_resume(data, output, Overrides(options, model, preset),
                                model_config=model_config, reporter=reporter,
                                tensorboard=tensorboard)
        else:
            result = run_train(data, output, model_config, config, reporter=reporter,
                               overwrite=overwrite, tensorboard=tensorboard,
                               init_from=init_from, run_config=_resolved(
                                   data, output, preset, init_from, tensorboard, model_config,
                                   config))
    _report(result, data, output)


def _report(result, data: Path, output: Path) -> None:
    """The line that ends `tfm train`: how the run stopped, its best score, where the model
    is, or how to continue an interrupted run (exit 130)."""
    if not result.is_main:  # another process of a torchrun job: rank 0 reports
        if result.stopped.startswith("interrupted"):
            raise typer.Exit(EXIT_INTERRUPTED)
        return
    best = ""
    if result.best_bleu is not None:
        best = f", best valid BLEU {result.best_bleu:.2f} at step {result.best_step}"
    elif result.best_loss is not None:
        best = f", best valid loss {result.best_loss:.3f} at step {result.best_step}"
    if result.stopped.startswith("interrupted"):
        launcher = f"torchrun --nproc_per_node={result.processes} -m tfm" \
            if result.processes > 1 else "tfm"
        err.print(f"[yellow]Stopped[/]: {result.stopped} at step {result.step}; checkpoint "
                  f"saved. Continue with: {launcher} train --data {data} --output {output} "
                  "--resume")
        raise typer.Exit(EXIT_INTERRUPTED)
    err.print(f"[green]Done[/]: {result.stopped} at step {result.step} "
              f"({result.elapsed / 60:.1f} min){best}. Model: {result.output}")


def _resolved(data: Path, output: Path, preset: str | None, init_from: Path | None,
              tensorboard: Path | None, model_config: ModelConfig, config: TrainConfig) -> str:
    """The run as a run config: every option of `tfm train` with the value it took (the
    preset's sizes spelt out), so that `tfm train --config run.yaml` starts the same run."""
    from tfm.cli.run_config import dump_config

    values: dict[str, Any] = {"data": data, "output": output, "preset": preset or "small"}
    if init_from is not None:
        values["init_from"] = init_from
    if tensorboard is not None:
        values["tensorboard"] = tensorboard
    for group, source in ((Fields(ModelConfig), model_config), (Fields(TrainConfig), config)):
        for f in group.fields():
            values[f.name] = getattr(source, f.name)
    return "# tfm train's options for this run: `tfm train --config run.yaml` repeats it\n" \
        + dump_config(values)


@app.command()
def average(
    model: Annotated[Path, typer.Option(
        "--model", "-m", help="Model directory of a training run (with checkpoints/).")
    ] = Path("model"),
    last: Annotated[int, typer.Option(
        "--last", "-n", help="Average this many of the latest numbered checkpoints.", min=1)
    ] = 5,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Model directory to write (default: MODEL/averaged).",
        show_default=False)] = None,
) -> None:
    """Average the last N checkpoints of a run into a new model.

    The average of the last few checkpoints of a run usually translates a little better than
    any one of them. Train with --keep-last N (default 5) to keep N checkpoints.
    """
    from tfm.layout import ModelDir
    from tfm.training.average import average_checkpoints

    with writing_into(output if output is not None else ModelDir(model).averaged,
                      "tfm average"):
        result = average_checkpoints(model, last, output)
    steps = ", ".join(str(s) for s in result.steps)
    err.print(f"[green]Averaged[/] {len(result.steps)} checkpoints (steps {steps}) into "
              f"{result.output}", highlight=False)


@app.command("plot-curve")
def plot_curve(
    model: Annotated[Path, typer.Argument(
        help="Model directory of a training run (with metrics.jsonl).")] = Path("model"),
    time: Annotated[bool, typer.Option(
        "--time", help="Draw against minutes of training instead of steps, to "
        "MODEL/learning_curve_time.png.")] = False,
) -> None:
    """Draw MODEL/learning_curve.png from MODEL/metrics.jsonl.

    Training draws it when it ends; this redraws it, e.g. while a run goes on.
    """
    from tfm.layout import ModelDir
    from tfm.plotting import plot_learning_curve

    files = ModelDir(model)
    png = files.curve.with_name(files.curve.stem + "_time.png") if time else files.curve
    plot_learning_curve(files.metrics, png, "time" if time else "step")
    err.print(f"[green]Wrote[/] {png}", highlight=False)
