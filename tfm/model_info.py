"""What a model directory's config.json says (``ModelInfo``), apart from the weights: read by
every engine, so it imports no torch. It is the one owner of that metadata: ``to_json`` writes
it and ``from_json`` reads it, for tfm.checkpoint (config.json), the CTranslate2 engine and the
exports (tfm_export.json), with the one ``FORMAT_VERSION``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tfm import __version__
from tfm.config import GenerationDefaults, ModelConfig, model_config_from_dict
from tfm.data.language_marks import LanguageMarking
from tfm.errors import ModelError, TfmError

# 2: ModelConfig.activation and output_bias (models imported from MarianMT), and
# language_marking. A model that uses none of them is still written as format 1, which tfm
# versions before 2 read.
FORMAT_VERSION = 2
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
    # Where its language token goes (tfm.data.language_marks); None: not recorded, inferred
    # from the vocabulary (LanguageMarking.infer), as for every model saved before.
    language_marking: LanguageMarking | None = None

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
        if self.language_marking is not None or any(
                model[k] != v for k, v in FORMAT_2_FIELDS.items()):
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
            **({"language_marking": self.language_marking.to_json()}
               if self.language_marking is not None else {}),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ModelInfo:
        """A config.json's (or tfm_export.json's) contents as a ModelInfo, or one line naming
        ``where`` and what is wrong: not a model's, of a newer format, or invalid."""
        if not isinstance(data, dict) or "model" not in data:
            raise ModelError(f"{where}: not a tfm model config (no format_version/model)")
        version = data.get("format_version", 1)
        if not isinstance(version, int) or version > FORMAT_VERSION:
            raise ModelError(
                f"{where}: model format version {version} is newer than this tfm understands "
                f"({FORMAT_VERSION}); upgrade tfm")
        try:
            marking = data.get("language_marking")
            return cls(model=model_config_from_dict(data["model"]),
                       src_lang=data.get("src_lang"), tgt_lang=data.get("tgt_lang"),
                       generation=GenerationDefaults(**(data.get("generation") or {})),
                       provenance=data.get("provenance") or {},
                       directions=list(data.get("directions") or []),
                       language_marking=None if marking is None
                       else LanguageMarking.from_json(marking))
        except (TypeError, TfmError) as e:
            raise ModelError(f"{where}: invalid model config ({e})") from e
