"""Import commands: ``tfm import`` reads a model of another toolkit as a tfm model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.cli.app import app, err, writing_into


@app.command("import")
def import_(
    checkpoint: Annotated[Path, typer.Argument(
        help="A Hugging Face directory, as `huggingface-cli download` or save_pretrained "
        "leaves it (or a hub cache's models--org--name): MarianMT (OPUS-MT; also `tfm export "
        "--to marian`), or M2M100 / NLLB-200 (config.json with model_type m2m_100).",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The tfm model directory to write; it appears whole or not at "
        "all.", show_default=False)],
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Import a MarianMT (OPUS-MT), NLLB-200 or M2M100 model.

    Translate, serve, fine-tune and export it as any tfm model. Nothing is fetched and no code
    in it is run (docs/IMPORT.md)."""
    from tfm.interop.checkpoints import import_checkpoint

    with writing_into(output, "tfm import"):
        written, kind = import_checkpoint(checkpoint, output, overwrite)
    languages = " --source-lang CODE --target-lang CODE" if kind == "m2m_100" else ""
    err.print(f"[green]Imported[/] {checkpoint} to {written}: translate with `tfm translate "
              f"--model {written}{languages}`, fine-tune with `tfm prepare --tokenizer "
              f"{written}/tokenizer.json` and `tfm train --init-from {written}`",
              highlight=False)


@app.command("trim")
def trim_(
    model: Annotated[Path, typer.Argument(
        help="An NLLB-200 or M2M100 model directory (from `tfm import`, fine-tuned or not).",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The trimmed model directory to write; it appears whole or not "
        "at all.", show_default=False)],
    corpus: Annotated[Optional[list[Path]], typer.Option(
        "--corpus", help="A text file (one sentence a line, .gz too) whose entries are kept; "
        "named by its language (train.eng_Latn), that code is kept too. Required: the corpus "
        "decides the rows kept. Repeat for more.",
        show_default=False)] = None,
    languages: Annotated[Optional[str], typer.Option(
        "--languages", help="The model's codes to keep, comma-separated (e.g. "
        "eng_Latn,deu_Latn,fra_Latn); default: those the --corpus files are named by. Not "
        "an alternative to --corpus: codes alone keep no words, and are refused.",
        show_default=False)] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Trim an NLLB-200 or M2M100 model's vocabulary to a corpus.

    The embedding and output layer keep only the rows the corpus and languages use: the same
    translations of such text, faster and in less memory (docs/NLLB.md)."""
    from tfm.interop.trim import trim

    codes = [c.strip() for c in (languages or "").split(",") if c.strip()]
    with writing_into(output, "tfm trim"):
        rows = trim(model, output, corpus or [], codes, overwrite)
    err.print(f"[green]Trimmed[/] {model} to {output}: {rows['rows_kept']:,} of "
              f"{rows['rows_before']:,} vocabulary rows kept", highlight=False)


@app.command("add-language")
def add_language_(
    model: Annotated[Path, typer.Argument(
        help="An NLLB-200 or M2M100 model directory (from `tfm import`, trimmed or not).",
        show_default=False)],
    code: Annotated[str, typer.Argument(
        help="The new language's code, as the model spells its others (e.g. xho_Latn).",
        show_default=False)],
    like: Annotated[str, typer.Option(
        "--like", help="The code whose embedding the new one starts from (a related "
        "language, e.g. zul_Latn).", show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The model directory to write; it appears whole or not at all.",
        show_default=False)],
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Add a language code to an NLLB-200 or M2M100 model.

    The new code's embedding starts as --like's; then `tfm prepare` and `tfm train
    --init-from` on corpora in it (docs/NLLB.md)."""
    from tfm.interop.trim import add_language

    with writing_into(output, "tfm add-language"):
        ident = add_language(model, output, code, like, overwrite)
    err.print(f"[green]Added[/] {code} (id {ident}, started from {like}) to {model} in "
              f"{output}: fine-tune on it with `tfm prepare` and `tfm train --init-from "
              f"{output}`", highlight=False)
