"""Which engine decodes a model directory: the one function commands and the server call."""

from __future__ import annotations

from pathlib import Path

from tfm.decoding import ctranslate2_engine
from tfm.decoding.translator import Translator
from tfm.layout import WEIGHTS_FILE


def load_translator(model: Path, device: str = "auto", precision: str = "fp32",
                    weights_file: str = WEIGHTS_FILE) -> Translator:
    """The translator for ``model``: a tfm model directory decodes with tfm's own search, a
    CTranslate2 export (``tfm export --to ctranslate2``) with CTranslate2."""
    if ctranslate2_engine.is_export(Path(model)):
        return ctranslate2_engine.CTranslate2Translator(Path(model), device, precision)
    from tfm.decoding.torch_engine import TorchTranslator  # imports torch: only when needed

    return TorchTranslator(Path(model), device, precision=precision, weights_file=weights_file)
