"""Import commands: ``tfm import`` reads a model of another toolkit as a tfm model directory."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tfm.cli.app import app, err, writing_into


@app.command("import")
def import_(
    marian_dir: Annotated[Path, typer.Argument(
        help="A Hugging Face MarianMT directory (an OPUS-MT model as `huggingface-cli "
        "download` or save_pretrained leaves it, or a `tfm export --to marian`): config.json, "
        "model.safetensors or pytorch_model.bin, source.spm, target.spm, vocab.json.",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="The tfm model directory to write; it appears whole or not at "
        "all.", show_default=False)],
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Import a MarianMT (OPUS-MT) model as a tfm model directory.

    Translate, serve, fine-tune and export it as any tfm model. Nothing is fetched and no code
    in it is run (docs/IMPORT.md)."""
    from tfm.interop.marian_import import import_marian

    with writing_into(output, "tfm import"):
        written = import_marian(marian_dir, output, overwrite)
    err.print(f"[green]Imported[/] {marian_dir} to {written}: translate with `tfm translate "
              f"--model {written}`, fine-tune with `tfm prepare --tokenizer "
              f"{written}/tokenizer.json` and `tfm train --init-from {written}`",
              highlight=False)
