"""``tfm distill``: a teacher and its corpus to a small, fast student (tfm.training.distill)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from tfm.cli.app import app, err, out, writing_into
from tfm.cli.fields import Fields, derive
from tfm.cli.options import SrcLangOpt, TgtLangOpt
from tfm.cli.run_config import with_config
from tfm.config import DistillConfig, ModelConfig, TrainConfig
from tfm.errors import EXIT_INTERRUPTED, UsageError

RUN = "Teacher, corpus and output"  # --help's panel of the run's own options
# A student of one direction: the training options of several are not its (nor guided
# alignment, whose alignments `tfm align` makes of a prepared dataset, not of distilled pairs).
MULTILINGUAL = ("sampling_temperature", "language_loss", "online_bt_from", "online_bt_share")
NOT_A_STUDENT_S = (*MULTILINGUAL, "guided_alignment_weight")  # TrainConfig fields distill lacks


@app.command()
@with_config()
@derive(distill=Fields(DistillConfig),
        model=Fields(ModelConfig, given_only=True, exclude=("drop_residual_layer",),
                     metavars=dict.fromkeys(("dropout", "attention_dropout",
                                             "activation_dropout"), "<p>")),
        options=Fields(TrainConfig, given_only=True, exclude=NOT_A_STUDENT_S))
def distill(
    teacher: Annotated[Path, typer.Option(
        "--teacher", help="The teacher's model directory.", show_default=False,
        rich_help_panel=RUN)],
    train: Annotated[str, typer.Option(
        "--train", help="The teacher's training corpus, whose sources it translates (any form "
        "`tfm prepare` reads).", show_default=False, rich_help_panel=RUN)],
    valid: Annotated[str, typer.Option(
        "--valid", help="Validation corpus: the student's validation and the report's.",
        show_default=False, rich_help_panel=RUN)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The run directory (several students of one teacher share "
        "it).", show_default=False, rich_help_panel=RUN)],
    test: Annotated[Optional[str], typer.Option(
        "--test", help="A test corpus the report scores too.", rich_help_panel=RUN)] = None,
    data: Annotated[Optional[Path], typer.Option(
        "--data", help="The teacher's prepared dataset, checked to be the teacher's "
        "tokenizer's.", rich_help_panel=RUN)] = None,
    src_lang: SrcLangOpt = None,
    tgt_lang: TgtLangOpt = None,
    *,
    distill: DistillConfig,
    model: dict[str, Any],  # the student's ModelConfig options, those given
    options: dict[str, Any],  # the student's TrainConfig options, those given
) -> None:
    """Distil a teacher into a small, fast student, resumably.

    The teacher translates its corpus's sources (beam; kept for every student of --output),
    the pairs are filtered, the student trains on them, its last checkpoints are averaged
    (kept where they score higher on val), its shortlist is built, and a report
    compares teacher and student on val (and --test): BLEU, chrF, sentences/s, memory.
    Stopped, the same command goes on where it stopped. In detail: docs/CLI.md#tfm-distill."""
    from tfm.data.corpus import CorpusSpec
    from tfm.training.distill import Corpora
    from tfm.training.distill import distill as run_distill
    from tfm.training.reporting import RichTrainReporter

    src_lang, tgt_lang = _languages(teacher, src_lang, tgt_lang)
    corpora = Corpora(CorpusSpec((train,), src_lang, tgt_lang),
                      CorpusSpec((valid,), src_lang, tgt_lang),
                      CorpusSpec((test,), src_lang, tgt_lang) if test else None)
    with writing_into(output, "tfm distill"), _Progress() as progress:
        result = run_distill(teacher, corpora, output, distill, model, options, prepared=data,
                             reporter=RichTrainReporter(err), say=progress.say,
                             progress=progress.advance)
    if result.interrupted:
        err.print(f"[yellow]Stopped[/]: {result.stopped}; the translations and the last "
                  "checkpoint are kept. Run the same command again to go on.")
        raise typer.Exit(EXIT_INTERRUPTED)
    _print_report(result.report)
    err.print(f"[green]Done[/]: the student {result.deployed}; the report "
              f"{output}/report-{result.student.name}.json", highlight=False)


def _languages(teacher: Path, src: str | None, tgt: str | None) -> tuple[str, str]:
    """The corpus's languages: as given, else the teacher's (a corpus in files named by
    language is read with them)."""
    from tfm.model_info import read_model_info

    info = read_model_info(teacher)
    src, tgt = src or info.src_lang, tgt or info.tgt_lang
    if not src or not tgt:
        raise UsageError(f"--teacher {teacher} records no languages: give --src-lang and "
                         "--tgt-lang")
    return src, tgt


class _Progress:
    """The run's step lines, and the teacher's translation as a bar on a terminal (a line per
    tenth elsewhere)."""

    def __enter__(self) -> _Progress:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn

        self.bar = Progress(TextColumn("Teacher translating"), MofNCompleteColumn(),
                            BarColumn(bar_width=24), console=err, transient=True,
                            disable=not err.is_terminal)
        self.task = None
        self.tenths = 0  # of the translation said, where there is no bar
        self.bar.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.bar.__exit__(*exc)

    def say(self, line: str) -> None:
        err.print(line, highlight=False)

    def advance(self, what: str, done: int, total: int) -> None:
        if self.task is None:
            self.task = self.bar.add_task(what, total=total)
        self.bar.update(self.task, completed=done)
        tenths = 10 * done // max(total, 1)
        if not err.is_terminal and tenths > self.tenths:
            self.tenths = tenths
            err.print(f"   {done:,} of {total:,} translated", highlight=False)


def _print_report(report: dict[str, Any]) -> None:
    """The report as a table on stdout."""
    from tfm.training.distill_report import table_rows

    table = Table(title="teacher and student", title_justify="left")
    for column in ("set", "model", "engine", "search", "BLEU", "lc-tok", "chrF", "sent/s",
                   "peak", "disk"):
        table.add_column(column, justify="left" if column in ("set", "model", "engine",
                                                              "search") else "right")
    for row in table_rows(report):
        table.add_row(*row)
    # Into a file or a pipe (a recipe's log) at its natural width, not squeezed into 80 columns.
    (out if out.is_terminal else Console(file=out.file, width=132)).print(table)
