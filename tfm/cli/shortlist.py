"""``tfm shortlist``: build a model's vocabulary shortlist (tfm.data.shortlist)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from tfm.cli.app import app, err, writing_into
from tfm.cli.fields import Fields, derive
from tfm.config import ShortlistConfig


@app.command()
@derive(settings=Fields(ShortlistConfig))
def shortlist(
    data: Annotated[Path, typer.Option(
        "--data", help="The prepared dataset (`tfm prepare`) the model was trained on.",
        show_default=False, rich_help_panel="Input and output")],
    settings: ShortlistConfig,
    model: Annotated[Path, typer.Option(
        "--model", "-m", help="The model directory to write the shortlist into.",
        rich_help_panel="Input and output")
    ] = Path("model"),
) -> None:
    """Build a model's vocabulary shortlist, for --shortlist.

    For each source token, the target tokens it is likely to be translated into, learnt from
    the training data, plus the most frequent target tokens: `tfm translate --shortlist`
    decodes with them. Written into the model directory (shortlist.safetensors), and by `tfm
    export --to ctranslate2` as CTranslate2's vmap.txt."""
    from tfm.decoding.shortlist import make_shortlist

    start = time.monotonic()
    bar = Progress(TextColumn("Building the shortlist"), MofNCompleteColumn(),
                   BarColumn(bar_width=24), TimeElapsedColumn(), console=err, transient=True,
                   disable=not err.is_terminal)
    task = bar.add_task("shortlist", total=None)
    with writing_into(model, "tfm shortlist"), bar:
        built = make_shortlist(data, model, settings.per_token, settings.frequent,
                               settings.iterations,
                               lambda done, steps: bar.update(task, completed=done,
                                                              total=steps))
    listed = int((built.per_source >= 0).any(axis=1).sum())
    err.print(f"[green]Wrote[/] the shortlist of {model} ({listed:,} source tokens with up to "
              f"{settings.per_token} translations each, {len(built.frequent):,} frequent target "
              f"tokens) in {time.monotonic() - start:.1f} s; decode with `tfm translate "
              f"--model {model} --shortlist`", highlight=False)
