"""What a model directory's config.json says (``ModelInfo``), apart from the weights: read by
every engine, so it imports no torch. It is the one owner of that metadata: ``to_json`` writes
it and ``from_json`` reads it, for tfm.checkpoint (config.json), the CTranslate2 engine and the
exports (tfm_export.json), with the one ``FORMAT_VERSION`` and its one check;
``read_model_info`` is the one reader of a model directory's config.json (tfm.checkpoint,
training, the shortlist, and tfm prepare's tokenizer of an imported model). It sits on the
data floor (it needs only tfm.config and the language marking) so that tfm.data may read it."""

from __future__ import annotations

import json
from dataclasses import KW_ONLY, dataclass, field
from pathlib import Path
from typing import Any

from tfm import __version__
from tfm.config import GenerationDefaults, ModelConfig, model_config_from_dict
from tfm.data.language_marks import MARKING_FORMAT, LanguageMarking
from tfm.errors import ModelError, TfmError
from tfm.layout import CONFIG_FILE

# 2: ModelConfig.activation and output_bias (models imported from MarianMT), and
# language_marking. 3: ModelConfig.positions, and the marking by language codes (models imported
# from NLLB-200 and M2M100). A model is written in the oldest format that holds it, which the
# tfm versions of that format read: one that uses nothing of format 2 is format 1.
# 4: ModelConfig.drop_residual_layer, and the source_and_decoder marking (the levers of
# zero-shot multilingual models, docs/multi30k.md). 5: ModelConfig.decoder_self_attention (an
# SSRU decoder, for students). 6: ModelConfig.alignment_layer (guided alignment).
# 7: inline_tags (a model trained on tag-augmented data copies inline-tag tokens).
FORMAT_VERSION = 7
INLINE_TAGS_FORMAT = 7
# Model fields that older formats do not have, by the format that added them, with the values
# the older formats imply.
NEW_FIELDS = {2: {"activation": "relu", "output_bias": False}, 3: {"positions": "paper"},
              4: {"drop_residual_layer": 0}, 5: {"decoder_self_attention": "attention"},
              6: {"alignment_layer": None}}


@dataclass
class ModelInfo:
    """The contents of config.json. Every field but ``model`` is given by its name (seven
    fields in a row are read wrong as easily as written)."""

    model: ModelConfig
    _: KW_ONLY
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
    # The inline-tag tokens the model was trained to copy (`tfm align --tag-augment`,
    # tfm.data.tag_augment.TAG_TOKENS); empty: none, documents' tags are placed by alignment.
    inline_tags: list[str] = field(default_factory=list)

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
        if self.language_marking is not None:
            version = MARKING_FORMAT.get(self.language_marking.where, 2)
        for added, defaults in NEW_FIELDS.items():
            if any(model[k] != v for k, v in defaults.items()):
                version = max(version, added)
        if self.inline_tags:
            version = max(version, INLINE_TAGS_FORMAT)
        for added, defaults in NEW_FIELDS.items():
            if added > version:
                for k in defaults:
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
            **({"inline_tags": list(self.inline_tags)} if self.inline_tags else {}),
        }

    @classmethod
    def from_json(cls, data: Any, where: str) -> ModelInfo:
        """A config.json's (or tfm_export.json's) contents as a ModelInfo, or one line naming
        ``where`` and what is wrong: not a model's, of a newer format, or invalid."""
        if not isinstance(data, dict) or "model" not in data or "format_version" not in data:
            raise ModelError(f"{where}: not a tfm model config (no format_version/model)")
        version = data["format_version"]
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
                       else LanguageMarking.from_json(marking),
                       inline_tags=_inline_tags(data.get("inline_tags")))
        except (TypeError, TfmError) as e:
            raise ModelError(f"{where}: invalid model config ({e})") from e


def _inline_tags(value: Any) -> list[str]:
    """config.json's inline_tags: a list of strings (absent: none)."""
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(t, str) for t in value):
        raise TypeError("inline_tags must be a list of token strings")
    return list(value)


def read_model_info(directory: Path) -> ModelInfo:
    """The ModelInfo of the model directory ``directory`` (its config.json), or one line
    naming the directory or file: missing, not JSON, not a tfm model's, of a newer format."""
    path = Path(directory) / CONFIG_FILE
    if not Path(directory).is_dir():
        raise ModelError(f"{directory}: no such model directory (train one with `tfm train`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise ModelError(f"{directory}: not a tfm model directory (no {CONFIG_FILE})") from e
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ModelError(f"{path}: not valid JSON ({e})") from e
    return ModelInfo.from_json(data, str(path))
