"""``tfm backtranslate``: target-language text -> synthetic pairs, by a reverse model.

A command of its own rather than a mode of ``tfm translate``: its input is a corpus, not
sentences, and its output is a parallel corpus for ``tfm prepare`` (both sides, filtered and
noised, with a report), made resumably in chunks and sharded over torchrun's processes.
"""

from __future__ import annotations

import contextlib
from dataclasses import replace
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from tfm.cli.app import app, err, writing_into
from tfm.cli.decoding import _translating
from tfm.cli.fields import Fields, derive
from tfm.cli.run_config import with_config
from tfm.config import (
    BACKTRANSLATE_ENGINE_EXCLUDED,
    BACKTRANSLATE_SEARCH_EXCLUDED,
    BacktranslateConfig,
    EngineOptions,
    SearchOptions,
)
from tfm.errors import UsageError

IO = "Input and output"


@app.command()
@with_config()
@derive(search=Fields(SearchOptions, given_only=True, exclude=BACKTRANSLATE_SEARCH_EXCLUDED),
        engine=Fields(EngineOptions, exclude=BACKTRANSLATE_ENGINE_EXCLUDED),
        config=Fields(BacktranslateConfig))
def backtranslate(
    input: Annotated[Path, typer.Option(
        "--input", "-i", help="Monolingual text in the run's target language, a sentence a "
        "line.", show_default=False, rich_help_panel=IO)],
    reverse_model: Annotated[Path, typer.Option(
        "--reverse-model", help="A model of the other direction (target -> source).",
        show_default=False, rich_help_panel=IO)],
    lang: Annotated[str, typer.Option(
        "--lang", help="The language of --input (the run's target language).",
        show_default=False, rich_help_panel=IO)],
    into: Annotated[str, typer.Option(
        "--into", help="The language to translate into (the run's source language).",
        show_default=False, rich_help_panel=IO)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Output PREFIX: writes PREFIX.INTO, PREFIX.LANG, PREFIX.json.",
        show_default=False, rich_help_panel=IO)],
    tokenizer: Annotated[Optional[Path], typer.Option(
        "--tokenizer", help="The run's tokenizer: refused unless the reverse model's.",
        show_default=False, rich_help_panel=IO)] = None,
    *,
    search: dict[str, Any],  # SearchOptions' options, those given
    engine: EngineOptions,
    config: BacktranslateConfig,
) -> None:
    """Back-translate monolingual text into synthetic pairs.

    Translates --input (in --lang) with --reverse-model into --into and writes the pairs as
    the corpus PREFIX (PREFIX.INTO the synthetic sources, PREFIX.LANG the real targets):
    beam search, sampling (--beam 1 --sampling-topk 0), top-k sampling (--sampling-topk 10)
    or beam search with --noise. Resumable: run again after an interruption and the chunks
    done are kept. Under torchrun, each process translates its share. Details:
    docs/BACKTRANSLATION.md."""
    from tfm.decoding.backtranslation import backtranslate as run_backtranslate
    from tfm.decoding.backtranslation import open_backtranslation, output_paths, share

    if lang == into:
        raise UsageError(f"--lang and --into are both {lang}: back-translation translates the "
                         "text into the other language of the run")
    if not output.parent.is_dir():
        raise UsageError(f"--output {output}: the folder {output.parent} does not exist")
    with _ranks(engine.device) as (rank, world, barrier, device):
        # Under torchrun on CUDA each process decodes on its own GPU (cuda:LOCAL_RANK).
        ready = open_backtranslation(input, reverse_model, lang, into, search,
                                     replace(engine, device=device), tokenizer)
        lines, options = ready.lines, ready.options
        total = len(share(len(lines), rank, world))
        with _locked(output, rank), progress_bar(total, options, rank) as progress:
            report = run_backtranslate(
                ready.translator, lines, output, lang, into, options, config,
                identity=ready.identity, rank=rank, world=world, barrier=barrier,
                progress=progress)
    if rank == 0:
        dropped = ", ".join(f"{n:,} {why}" for why, n in report.dropped.items() if n)
        err.print(f"[green]Wrote[/] {report.written:,} pairs of {report.read:,} lines "
                  f"({report.reused:,} found done) to "
                  f"{', '.join(str(p) for p in output_paths(output, into, lang)[:2])}"
                  + (f"; dropped {dropped}" if dropped else ""), highlight=False)


@contextlib.contextmanager
def _ranks(device: str) -> Any:
    """(rank, world size, barrier, device) of this process: torchrun's (its process group
    joined; on CUDA its device ``cuda:LOCAL_RANK``), or (0, 1, None, ``device``) for a plain
    run."""
    from tfm.device import resolve_device
    from tfm.training.distributed import barrier, launched_by_torchrun, process_group

    if launched_by_torchrun() is None:
        yield 0, 1, None, device
        return
    with process_group(resolve_device(device)) as (d, mine):
        yield d.rank, d.world_size, (lambda: barrier(d)), (str(mine) if d.enabled else device)


@contextlib.contextmanager
def _locked(output: Path, rank: int) -> Any:
    """The output's lock, held by rank 0 (the one process that writes the corpus)."""
    if rank != 0:
        yield
        return
    with writing_into(output.with_name(f"{output.name}.work"), "tfm backtranslate"):
        yield


@contextlib.contextmanager
def progress_bar(total: int, options: SearchOptions, rank: int = 0) -> Any:
    """Rank 0's progress bar (rate, ETA) and summary line; the others' none."""
    if rank != 0:
        yield None
        return
    how = (f"sampling top-{options.sampling_topk}" if options.sampling_topk > 1 else
           "sampling" if options.sampling_topk == 0 else f"beam {options.beam}")
    with _translating(total, how) as progress:
        yield progress
