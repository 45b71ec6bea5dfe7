"""Which engine decodes a model directory: the one function commands and the server call."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from tfm.decoding import ctranslate2_engine
from tfm.decoding.translator import Translator
from tfm.errors import UsageError
from tfm.layout import WEIGHTS_FILE


def load_translator(model: Path, device: str = "auto", precision: str = "fp32",
                    weights_file: str = WEIGHTS_FILE, ensemble: Sequence[Path] = (),
                    workers: int | None = None, shortlist: bool = False,
                    exact_search: bool = False, cuda_graphs: bool = True) -> Translator:
    """The translator for ``model``: a tfm model directory decodes with tfm's own search, a
    CTranslate2 export (``tfm export --to ctranslate2``) with CTranslate2. ``ensemble``: more
    tfm model directories decoded together with ``model`` (tfm's search only). ``workers``:
    batches of one call decoded at once by tfm's search, each by a thread of its own (None:
    tfm.decoding.workers.default_count, as the command line's default); an export's batches go
    to CTranslate2 from one thread unless more are asked for. ``shortlist``: tfm's search
    over the directory's vocabulary shortlist (tfm.decoding.shortlist). ``exact_search``: a
    CTranslate2 export finds what tfm's search finds (tfm.decoding.ctranslate2_engine), in
    more passes. ``cuda_graphs``: on CUDA, tfm's search of short batches replays CUDA graphs
    (tfm.decoding.graphs)."""
    if ctranslate2_engine.is_export(Path(model)) or any(
            ctranslate2_engine.is_export(Path(d)) for d in ensemble):
        if ensemble:
            raise UsageError("--ensemble decodes tfm model directories with tfm's own search, "
                             "not CTranslate2 exports")
        if shortlist:
            raise UsageError("--shortlist decodes tfm model directories with tfm's own search, "
                             "not CTranslate2 exports")
        return ctranslate2_engine.CTranslate2Translator(Path(model), device, precision,
                                                         exact=exact_search, workers=workers)
    from tfm.decoding.torch_engine import TorchTranslator  # imports torch: only when needed

    return TorchTranslator(Path(model), device, precision=precision, weights_file=weights_file,
                           ensemble=ensemble, workers=workers, shortlist=shortlist,
                           cuda_graphs=cuda_graphs)
