"""What a model directory's config.json says (``ModelInfo``), apart from the weights: read by
every engine, so it imports no torch (tfm.checkpoint reads and writes it with the weights)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfm import __version__
from tfm.config import GenerationDefaults, ModelConfig

# Model fields that a format-1 config.json does not have, with the values format 1 implies.
FORMAT_2_FIELDS = {"activation": "relu", "output_bias": False}


@dataclass
class ModelInfo:
    """The contents of config.json."""

    model: ModelConfig
    src_lang: str | None = None
    tgt_lang: str | None = None
    generation: GenerationDefaults = field(default_factory=GenerationDefaults)
    provenance: dict[str, Any] = field(default_factory=dict)
    # A multilingual model's directions ("en-de", ...; tfm.data.directions); empty for a model
    # of one direction, whose languages are src_lang and tgt_lang.
    directions: list[str] = field(default_factory=list)

    @property
    def direction_names(self) -> list[str]:
        """The directions the model translates: its ``directions``, else its one pair
        (``?`` for a language it does not record)."""
        if self.directions:
            return list(self.directions)
        return [f"{self.src_lang or '?'}-{self.tgt_lang or '?'}"]

    def to_json(self) -> dict[str, Any]:
        from dataclasses import asdict

        model = asdict(self.model)
        version = 1
        if any(model[k] != v for k, v in FORMAT_2_FIELDS.items()):
            version = 2
        else:
            for k in FORMAT_2_FIELDS:
                del model[k]
        return {
            "format_version": version,
            "tfm_version": __version__,
            "model": model,
            "src_lang": self.src_lang,
            "tgt_lang": self.tgt_lang,
            "generation": asdict(self.generation),
            "provenance": self.provenance,
            **({"directions": self.directions} if self.directions else {}),
        }
