"""Export commands: ``tfm export`` writes a model for another runtime."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.cli.app import app, err, writing_into
from tfm.errors import UsageError

FORMATS = ("ctranslate2", "marian", "m2m100")


@app.command()
def export(
    model: Annotated[Path, typer.Argument(
        help="The tfm model directory to export (from `tfm train` or `tfm average`).",
        show_default=False)],
    to: Annotated[str, typer.Option(
        "--to", help="ctranslate2 (decoded by tfm with --model OUT), marian (for "
        "transformers), or m2m100 (an imported NLLB-200/M2M100 model, for transformers).",
        show_default=False)],
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Directory to write; it appears whole or not at all.",
        show_default=False)],
    quantization: Annotated[Optional[str], typer.Option(
        "--quantization", help="ctranslate2: the weights as int8, int8_float32, int8_float16, "
        "int8_bfloat16, int16, float16, bfloat16 or float32.  \\[default: float32]")] = None,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Replace --output if it exists.")] = False,
) -> None:
    """Export a model to CTranslate2, MarianMT or M2M100.

    CTranslate2 for fast inference; MarianMT and M2M100 (NLLB-200) for transformers. In
    detail: docs/CLI.md#tfm-export."""
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
        raise UsageError(f"--quantization is for --to ctranslate2; a {to} export keeps "
                         "the model's float32 weights")
    if to == "m2m100":
        from tfm.interop.m2m100 import export_m2m100 as export_hf
        kind = "M2M100"
    else:
        from tfm.interop.marian import export_marian as export_hf
        kind = "MarianMT"

    with writing_into(output, "tfm export"):
        written = export_hf(model, output, overwrite)
    err.print(f"[green]Exported[/] {model} to {written}: a Hugging Face {kind} model "
              "(config, weights, tokenizer) and tfm_export.json; load it with transformers",
              highlight=False)
