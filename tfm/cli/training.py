"""Training commands: ``tfm train``, ``tfm average`` and ``tfm plot-curve``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.cli.app import app, err
from tfm.cli.options import default
from tfm.config import TrainConfig, option_name
from tfm.errors import EXIT_INTERRUPTED, UsageError


def _option(name: str, help: str) -> typer.models.OptionInfo:
    """The `tfm train` option of TrainConfig field ``name``: spelled as ``option_name`` says,
    its help ending with the field's default (the option itself defaults to None, so that a
    resumed run can tell what the user set)."""
    spelled = option_name(name)
    assert spelled is not None, name
    value = getattr(TrainConfig, name)
    if isinstance(value, bool):  # a flag: --compile/--no-compile
        flag = spelled.removeprefix("--")
        return typer.Option(f"--{flag}/--no-{flag}",
                            help=help + default(flag if value else f"no-{flag}"))
    return typer.Option(spelled, help=help + default(value))


@app.command()
def train(
    data: Annotated[Path, typer.Option(
        "--data", "-d", help="Prepared dataset directory from `tfm prepare`.")] = Path(
        "data-bin"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Model directory to write (config, tokenizer, weights, "
        "training state, metrics).")] = Path("model"),
    preset: Annotated[Optional[str], typer.Option(
        "--preset", help="Model size: base (the paper's), big, small (Multi30k-sized), tiny."
        + default("small"))] = None,
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --output where it stopped.")] = False,
    init_from: Annotated[Optional[Path], typer.Option(
        "--init-from", help="Start from the weights of this trained model directory "
        "(fine-tuning, or more training on other data): its architecture and vocabulary "
        "(prepare the data with its tokenizer.json), a fresh optimizer and learning-rate "
        "schedule from step 0. Architecture options may only repeat the model's; the dropout "
        "options may change.")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Start afresh, deleting the run already in --output.")] = False,
    d_model: Annotated[Optional[int], typer.Option(
        help="Override the preset's model width.")] = None,
    n_heads: Annotated[Optional[int], typer.Option(help="Override: attention heads.")] = None,
    encoder_layers: Annotated[Optional[int], typer.Option(
        help="Override: encoder layers.")] = None,
    decoder_layers: Annotated[Optional[int], typer.Option(
        help="Override: decoder layers.")] = None,
    d_ff: Annotated[Optional[int], typer.Option(help="Override: feed-forward width.")] = None,
    dropout: Annotated[Optional[float], typer.Option(
        help="Override: dropout on the embeddings and every sub-layer's output.")] = None,
    attention_dropout: Annotated[Optional[float], typer.Option(
        help="Override: dropout on the attention weights (default 0).")] = None,
    activation_dropout: Annotated[Optional[float], typer.Option(
        help="Override: dropout inside the FFN, after the ReLU (default 0).")] = None,
    norm_first: Annotated[Optional[bool], typer.Option(
        "--pre-norm/--post-norm", help="LayerNorm before each sub-layer (pre-norm) or after "
        "the residual add (post-norm, as in the paper). Default: the preset's (post-norm).")
    ] = None,
    max_tokens: Annotated[Optional[int], _option(
        "max_tokens", "Batch size in padded token positions.")] = None,
    update_freq: Annotated[Optional[int], _option(
        "update_freq", "Batches per optimizer step (gradient accumulation).")] = None,
    lr: Annotated[Optional[float], _option(
        "lr", "Peak learning rate, reached after warmup.")] = None,
    warmup_steps: Annotated[Optional[int], _option(
        "warmup_steps", "Linear warmup steps, then the --lr-schedule decay.")] = None,
    lr_schedule: Annotated[Optional[str], _option(
        "lr_schedule", "After warmup: inverse-sqrt (the paper's), or linear / cosine decay to 0 "
        "at the end of the budget (--max-steps, --max-epochs or --max-time, whichever runs out "
        "first).")] = None,
    label_smoothing: Annotated[Optional[float], _option(
        "label_smoothing", "Label smoothing epsilon.")] = None,
    weight_decay: Annotated[Optional[float], _option(
        "weight_decay", "L2 penalty on the weights, added to the gradient by Adam.")] = None,
    clip_norm: Annotated[Optional[float], _option(
        "clip_norm", "Clip the gradient norm to this; 0 disables.")] = None,
    max_steps: Annotated[Optional[int], _option(
        "max_steps", "Stop after this many optimizer steps (0: no limit).")] = None,
    max_epochs: Annotated[Optional[int], _option(
        "max_epochs", "Stop after this many epochs (0: no limit).")] = None,
    max_time: Annotated[Optional[float], _option(
        "max_time", "Stop after this many minutes of training (0: no limit).")] = None,
    valid_every: Annotated[Optional[int], _option(
        "valid_every", "Validate every N steps, and once more at the end of training.")] = None,
    patience: Annotated[Optional[int], _option(
        "patience", "Stop after N validations in a row without a better BLEU (0: never). "
        "Needs a validation split.")] = None,
    save_every: Annotated[Optional[int], _option(
        "save_every", "Save the training state every N steps.")] = None,
    keep_last: Annotated[Optional[int], _option(
        "keep_last", "Numbered checkpoints to keep.")] = None,
    log_every: Annotated[Optional[int], _option(
        "log_every", "Log training metrics every N steps.")] = None,
    seed: Annotated[Optional[int], _option("seed", "Random seed.")] = None,
    device: Annotated[Optional[str], _option(
        "device", "auto (CUDA if available, else CPU), cpu or cuda.")] = None,
    precision: Annotated[Optional[str], _option(
        "precision", "auto, fp32, bf16 or fp16. auto: bf16 autocast on CUDA (fp16 where bf16 "
        "is not supported), fp32 on CPUs (bf16 autocast is not reliably faster there: "
        "--precision bf16 to try it). fp16 scales the loss to keep small gradients (a "
        "step whose gradients overflow is skipped and the scale lowered).")] = None,
    num_threads: Annotated[Optional[int], _option(
        "num_threads", "CPU threads for torch (0: torch's default).")] = None,
    compile_model: Annotated[Optional[bool], _option(
        "compile", "Compile the model with torch.compile (slower start, often faster steps on "
        "GPUs).")] = None,
    tensorboard: Annotated[Optional[Path], typer.Option(
        "--tensorboard", help="Also log train/valid scalars as TensorBoard events in this "
        "directory (needs `pip install tensorboard`).")] = None,
) -> None:
    """Train an encoder-decoder Transformer on a prepared dataset.

    Under torchrun (`torchrun --nproc_per_node=N -m tfm train ...`) the N processes train
    together with DistributedDataParallel: gloo on CPU, NCCL on CUDA (one GPU per process).
    """
    from tfm.config import model_config_from_preset
    from tfm.training.loop import train as run_train

    given = {
        "max_tokens": max_tokens, "update_freq": update_freq, "lr": lr,
        "warmup_steps": warmup_steps, "lr_schedule": lr_schedule,
        "label_smoothing": label_smoothing, "weight_decay": weight_decay,
        "clip_norm": clip_norm,
        "max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time,
        "valid_every": valid_every, "patience": patience, "save_every": save_every,
        "keep_last": keep_last, "log_every": log_every, "seed": seed, "device": device,
        "precision": precision, "num_threads": num_threads, "compile": compile_model,
    }
    explicit = {k for k, v in given.items() if v is not None}
    config = TrainConfig(**{k: v for k, v in given.items() if v is not None})
    # What the command line says of the model (None: not given). On resume it may only
    # repeat the run's own; from --init-from, the architecture's must be the model's.
    model_options = {"d_model": d_model, "n_heads": n_heads, "encoder_layers": encoder_layers,
                     "decoder_layers": decoder_layers, "d_ff": d_ff, "norm_first": norm_first,
                     "dropout": dropout, "attention_dropout": attention_dropout,
                     "activation_dropout": activation_dropout}
    model_config = None
    if init_from is not None and not resume:  # (with --resume: refused by train)
        from tfm.training.state import INIT_FROM_CHANGES, initial_model_config

        model_config = initial_model_config(
            init_from, preset,
            {k: v for k, v in model_options.items() if k not in INIT_FROM_CHANGES},
            **{k: model_options[k] for k in INIT_FROM_CHANGES})
    elif not resume:
        model_config = model_config_from_preset(preset or "small", **model_options)
    from tfm.training.reporting import RichTrainReporter

    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; give one")
    result = run_train(data, output, model_config, config, resume, explicit,
                       RichTrainReporter(err), overwrite, tensorboard, init_from,
                       preset if resume else None, model_options if resume else None)
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
    """Average the weights of the last N numbered checkpoints into a new model directory.

    The average of the last few checkpoints of a run usually translates a little better than
    any one of them. Train with --keep-last N (default 5) to keep N checkpoints.
    """
    from tfm.training.average import average_checkpoints

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
