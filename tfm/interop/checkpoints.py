"""``tfm import``: which importer a Hugging Face checkpoint directory goes to, by its
config.json's ``model_type``, and one line for what tfm imports none of."""

from __future__ import annotations

from pathlib import Path

from tfm.errors import ModelError
from tfm.interop.common import read_json

# The model types tfm imports, and the names of some it does not, for the message.
IMPORTED = {"marian": "MarianMT (OPUS-MT)", "m2m_100": "NLLB-200 / M2M100"}
OTHERS = {"nllb-moe": "NLLB-MoE, a mixture of experts", "mbart": "mBART", "bart": "BART",
          "t5": "T5", "mt5": "mT5", "fsmt": "FSMT"}


def import_checkpoint(directory: Path, output: Path, overwrite: bool = False
                      ) -> tuple[Path, str]:
    """Import ``directory`` (or the hub cache snapshot it names) as the tfm model directory
    ``output``; returns ``output`` and the model type it was read as."""
    from tfm.interop.m2m100_import import import_m2m100, snapshot
    from tfm.interop.marian_import import import_marian

    directory = Path(directory)
    if not directory.is_dir():
        raise ModelError(f"{directory}: no such directory (give a Hugging Face checkpoint as "
                         "`huggingface-cli download` or save_pretrained leaves it)")
    config = read_json(snapshot(directory) / "config.json")
    kind = config.get("model_type") if isinstance(config, dict) else None
    if kind == "m2m_100":
        return import_m2m100(directory, output, overwrite), kind
    if kind == "marian" or (config is None and (directory / "source.spm").is_file()):
        return import_marian(directory, output, overwrite), "marian"
    what = "no config.json" if config is None else \
        f"config.json has model_type {kind!r}" + (f" ({OTHERS[kind]})" if kind in OTHERS else "")
    raise ModelError(f"{directory}: not a MarianMT checkpoint nor an NLLB-200 or M2M100 one "
                     f"({what}); tfm imports model_type " + " and ".join(
                         f"{k} ({v})" for k, v in IMPORTED.items()))
