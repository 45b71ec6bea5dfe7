"""Export commands: ``tfm export`` writes a model for another runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.cli.app import app, err, writing_into
from tfm.errors import UsageError

FORMATS = ("ctranslate2", "marian")


@app.command()
def export(
    model: Annotated[Path, typer.Argument(
        help="The tfm model directory to export (from `tfm train` or `tfm average`).",
        show_default=False)],
    to: Annotated[str, typer.Option(
        "--to", help="ctranslate2 (decoded by tfm with --model OUT) or marian (for "
        "transformers).", show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Directory to write; it appears whole or not at all.",
        show_default=False)],
    quantization: Annotated[Optional[str], typer.Option(
        "--quantization", help="ctranslate2: the weights as int8, int8_float32, int8_float16, "
        "int8_bfloat16, int16, float16, bfloat16 or float32.  \\[default: float32]")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Export a model to CTranslate2 or Hugging Face MarianMT.

    CTranslate2 for fast inference; MarianMT for transformers. In detail:
    docs/CLI.md#tfm-export."""
    if to not in FORMATS:
        raise UsageError(f"--to {to}: choose one of {', '.join(FORMATS)}")
    if to == "ctranslate2":
        from tfm.interop.ctranslate2 import export_ctranslate2

        with writing_into(output, "tfm export"):
            written = export_ctranslate2(model, output, quantization, overwrite)
        weights = quantization or "float32"
        err.print(f"[green]Exported[/] {model} to {written}: a CTranslate2 model ({weights} "
                  "weights), its tokenizer and tfm_export.json; decode it with `tfm translate "
                  f"--model {written}`", highlight=False)
        return
    if quantization is not None:
        raise UsageError("--quantization is for --to ctranslate2; a MarianMT export keeps "
                         "the model's float32 weights")
    from tfm.interop.marian import export_marian

    with writing_into(output, "tfm export"):
        written = export_marian(model, output, overwrite)
    err.print(f"[green]Exported[/] {model} to {written}: a Hugging Face MarianMT model "
              "(config, weights, tokenizer) and tfm_export.json; load it with transformers",
              highlight=False)
