"""Training commands: ``tfm train``, ``tfm average`` and ``tfm plot-curve``."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.cli.app import app, err
from tfm.errors import EXIT_INTERRUPTED, UsageError


@app.command()
def train(
    data: Annotated[Path, typer.Option(
        "--data", "-d", help="Prepared dataset directory from `tfm prepare`.")] = Path(
        "data-bin"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Model directory to write (config, tokenizer, weights, "
        "training state, metrics).")] = Path("model"),
    preset: Annotated[str, typer.Option(
        "--preset", help="Model size: base (the paper's), big, small (Multi30k-sized), tiny.")
    ] = "small",
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --output where it stopped.")] = False,
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
    dropout: Annotated[Optional[float], typer.Option(help="Override: dropout.")] = None,
    norm_first: Annotated[Optional[bool], typer.Option(
        "--pre-norm/--post-norm", help="LayerNorm before each sub-layer (pre-norm) or after "
        "the residual add (post-norm, as in the paper). Default: the preset's (post-norm).")
    ] = None,
    max_tokens: Annotated[Optional[int], typer.Option(
        help="Batch size in padded token positions.  \\[default: 4096]")] = None,
    update_freq: Annotated[Optional[int], typer.Option(
        help="Batches per optimizer step (gradient accumulation).  \\[default: 1]")] = None,
    lr: Annotated[Optional[float], typer.Option(
        help="Peak learning rate, reached after warmup.  \\[default: 7e-4]")] = None,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Linear warmup steps, then the --lr-schedule decay.  \\[default: 4000]")
    ] = None,
    lr_schedule: Annotated[Optional[str], typer.Option(
        "--lr-schedule", help="After warmup: inverse-sqrt (the paper's), or linear / cosine "
        "decay to 0 at the end of the budget (--max-steps, --max-epochs or --max-time, "
        "whichever runs out first).  \\[default: inverse-sqrt]")] = None,
    label_smoothing: Annotated[Optional[float], typer.Option(
        help="Label smoothing epsilon.  \\[default: 0.1]")] = None,
    clip_norm: Annotated[Optional[float], typer.Option(
        help="Clip the gradient norm to this; 0 disables.  \\[default: 1.0]")] = None,
    max_steps: Annotated[Optional[int], typer.Option(
        help="Stop after this many optimizer steps (0: no limit).")] = None,
    max_epochs: Annotated[Optional[int], typer.Option(
        help="Stop after this many epochs (0: no limit).")] = None,
    max_time: Annotated[Optional[float], typer.Option(
        help="Stop after this many minutes of training (0: no limit).")] = None,
    valid_every: Annotated[Optional[int], typer.Option(
        help="Validate every N steps (and at each epoch end).  \\[default: 1000]")] = None,
    patience: Annotated[Optional[int], typer.Option(
        help="Stop after N validations without a better BLEU (0: never).")] = None,
    save_every: Annotated[Optional[int], typer.Option(
        help="Save the training state every N steps.  \\[default: 1000]")] = None,
    keep_last: Annotated[Optional[int], typer.Option(
        help="Numbered checkpoints to keep.  \\[default: 5]")] = None,
    log_every: Annotated[Optional[int], typer.Option(
        help="Log training metrics every N steps.  \\[default: 50]")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed.  \\[default: 1]")] = None,
    device: Annotated[Optional[str], typer.Option(
        help="auto (CUDA if available, else CPU), cpu or cuda.  \\[default: auto]")] = None,
    precision: Annotated[Optional[str], typer.Option(
        help="auto, fp32, bf16 or fp16. auto: bf16 autocast on CUDA (fp16 where bf16 is not "
        "supported), fp32 on CPUs (bf16 autocast is not reliably faster there: --precision "
        "bf16 to try it).  \\[default: auto]")] = None,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="CPU threads for torch (0: torch's default).")] = None,
    compile_model: Annotated[Optional[bool], typer.Option(
        "--compile/--no-compile", help="Compile the model with torch.compile (slower start, "
        "often faster steps on GPUs).  \\[default: no-compile]")] = None,
    tensorboard: Annotated[Optional[Path], typer.Option(
        "--tensorboard", help="Also log train/valid scalars as TensorBoard events in this "
        "directory (needs `pip install tensorboard`).")] = None,
) -> None:
    """Train an encoder-decoder Transformer on a prepared dataset.

    Under torchrun (`torchrun --nproc_per_node=N -m tfm train ...`) the N processes train
    together with DistributedDataParallel: gloo on CPU, NCCL on CUDA (one GPU per process).
    """
    from tfm.config import TrainConfig, model_config_from_preset
    from tfm.training.loop import train as run_train

    given = {
        "max_tokens": max_tokens, "update_freq": update_freq, "lr": lr,
        "warmup_steps": warmup, "lr_schedule": lr_schedule,
        "label_smoothing": label_smoothing, "clip_norm": clip_norm,
        "max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time,
        "valid_every": valid_every, "patience": patience, "save_every": save_every,
        "keep_last": keep_last, "log_every": log_every, "seed": seed, "device": device,
        "precision": precision, "num_threads": threads, "compile": compile_model,
    }
    explicit = {k for k, v in given.items() if v is not None}
    config = TrainConfig(**{k: v for k, v in given.items() if v is not None})
    model_config = None
    if not resume:
        model_config = model_config_from_preset(
            preset, d_model=d_model, n_heads=n_heads, encoder_layers=encoder_layers,
            decoder_layers=decoder_layers, d_ff=d_ff, dropout=dropout, norm_first=norm_first)
    from tfm.training.reporting import RichTrainReporter

    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; give one")
    result = run_train(data, output, model_config, config, resume, explicit,
                       RichTrainReporter(err), overwrite, tensorboard)
    if not result.is_main:  # another process of a torchrun job: rank 0 reports
        if result.stopped.startswith("interrupted"):
            raise typer.Exit(EXIT_INTERRUPTED)
        return
    best = f", best valid BLEU {result.best_bleu:.2f} at step {result.best_step}" \
        if result.best_bleu is not None else ""
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
) -> None:
    """Draw MODEL/learning_curve.png from MODEL/metrics.jsonl.

    Training draws it when it ends; this redraws it, e.g. while a run goes on.
    """
    from tfm.layout import ModelDir
    from tfm.plotting import plot_learning_curve

    files = ModelDir(model)
    plot_learning_curve(files.metrics, files.curve)
    err.print(f"[green]Wrote[/] {files.curve}", highlight=False)
