"""The bodies of ``POST /v1/translate``: the request, checked by pydantic, and the answer.

A request's decoding options are SearchOptions fields (tfm.config), derived from them as the
command line's options are (tfm.cli.fields): the same name, type, help and minimum; unset (None)
is the server's default (GET /v1/info's ``decoding``). Only what the server adds to a search is
declared here: which texts, ``max_length`` (a limit in tokens, where the command line has
--max-len-a and --max-len-b), the constraints, the prefix, the glossary and the language.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from tfm.config import SearchOptions
from tfm.data.text import replace_surrogates
from tfm.documents.formats import FORMATS

BINARY_FORMATS = ("docx",)  # not text: sent to /v1/document, never inside JSON
# The SearchOptions fields a request may set, under the field's own name.
REQUEST_OPTIONS = ("beam", "n_best", "length_penalty")
# What a field's help leaves unsaid for a client of the server, after it.
_NOTES = {"n_best": "At most the beam; more than 1 adds them under 'sentences'."}


def option_field(name: str) -> tuple[Any, Any]:
    """SearchOptions field ``name`` as a request field: its type or None (the server's
    default), its help as the description, its ``min`` as ``ge``; a float must be finite."""
    (f,) = [f for f in dataclasses.fields(SearchOptions) if f.name == name]
    kind = typing.get_type_hints(SearchOptions)[name]
    checks: dict[str, Any] = {"ge": f.metadata["min"]} if "min" in f.metadata else {}
    if kind is float:
        checks["allow_inf_nan"] = False  # Python's json reads NaN and Infinity
    help_text = f.metadata["help"].replace("\\[", "[")  # rich markup's escape: not for JSON
    description = f"{help_text} {_NOTES[name]}" if name in _NOTES else help_text
    return Optional[kind], Field(None, description=description, **checks)


class RequestBase(BaseModel):
    """What a request holds besides its search options: declared here, where they are the
    server's own; TranslateRequest adds the search options, derived."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: Union[str, list[str]] = Field(
        description="A text, or a list of texts, each translated on its own. A text of "
        "several sentences or lines is split into sentences and put back together with its "
        "line breaks.")
    max_length: int | None = Field(None, ge=1, description="Most tokens of each sentence's "
                                   "translation, its end-of-sentence token included (instead "
                                   "of the model's a * source length + b).")
    scores: bool = Field(False, description="Add each sentence's record under 'sentences' "
                         "(translation, score, n-best list, ...: the line `tfm translate "
                         "--format jsonl` writes for it).")
    split: bool = Field(True, description="Split texts into sentences; false: translate "
                        "each text as one sentence, as `tfm translate --no-split` does each "
                        "line.")
    format: str = Field("text", description="What each text is: text, or a document format "
                        "whose markup is kept and words translated: html, xml, markdown, srt, "
                        "vtt, po, xliff (docx: POST the file to /v1/document).")
    constraints: Optional[list[Any]] = Field(
        None, description="Phrases the translation must contain (beam search): a list of "
        "strings for a text, or one such list per text for a list of texts. A text with "
        "constraints or a prefix is translated as one sentence.")
    prefix: Union[str, list[Optional[str]], None] = Field(
        None, description="Text the translation must start with: a string for a text, or one "
        "(or null) per text for a list of texts.")
    glossary: bool = Field(True, description="Apply the server's glossary (tfm serve "
                           "--glossary), if it has one: the target term of each of its source "
                           "terms found in a sentence becomes a constraint.")
    target_lang: Optional[str] = Field(None, description="For a model of several target "
                                       "languages (GET /v1/info's target_languages, e.g. fr): "
                                       "the language to translate into; needed unless each "
                                       "text starts with its own >>xx<< tag.")
    source_lang: Optional[str] = Field(None, description="For an NLLB-200 or M2M100 model "
                                       "(GET /v1/info's source_languages, e.g. eng_Latn): the "
                                       "language of the texts; needed with target_lang.")

    @field_validator("format")
    @classmethod
    def _text_format(cls, value: str) -> str:
        names = [f.name for f in FORMATS if f.name not in BINARY_FORMATS]
        if value not in names:
            raise ValueError(f"{value!r} is not one of {', '.join(names)}")
        return value

    @field_validator("constraints", mode="before")
    @classmethod
    def _phrases(cls, value: Any) -> Any:
        if value is None:
            return value
        if not isinstance(value, list):
            raise ValueError("give a list of phrases, or one list of phrases per text")
        if all(isinstance(v, str) for v in value):
            return [replace_surrogates(v) for v in value]
        if all(isinstance(v, list) and all(isinstance(p, str) for p in v) for v in value):
            return [[replace_surrogates(p) for p in v] for v in value]
        raise ValueError("give a list of phrases (strings), or one such list per text")

    @field_validator("text", mode="before")
    @classmethod
    def _one_text_or_some(cls, value: Any) -> Any:
        if isinstance(value, list):
            if not value:
                raise ValueError("the list is empty: give at least one text")
            if not all(isinstance(v, str) for v in value):
                raise ValueError("every text of the list must be a string")
            return [replace_surrogates(v) for v in value]
        if not isinstance(value, str):
            raise ValueError("give a string or a list of strings")
        # JSON's "\ud800" escapes can smuggle in lone surrogates, which no tokenizer takes
        # and no UTF-8 answer can echo: they become U+FFFD, as undecodable bytes do.
        return replace_surrogates(value)


TranslateRequest = create_model(
    "TranslateRequest", __base__=RequestBase, __module__=__name__,
    __doc__="What to translate and how. Unset options take the server's defaults (GET "
    "/v1/info).", **{name: option_field(name) for name in REQUEST_OPTIONS})


def given_options(request: Any) -> dict[str, Any]:
    """The request's SearchOptions fields, by name (None: not given)."""
    return {name: getattr(request, name) for name in REQUEST_OPTIONS}


class ScoredTranslation(BaseModel):
    translation: str
    score: float
    constraints_met: bool | None = Field(None, description="With constraints: this "
                                         "hypothesis contains every phrase.")


class ConstraintResult(BaseModel):
    phrase: str
    met: bool = Field(description="The translation contains the phrase.")
    source_term: str | None = Field(None, description="The glossary's source term that "
                                    "asked for it.")


class SentenceResult(BaseModel):
    """A sentence's record, the one `tfm translate --format jsonl` writes for it
    (tfm.decoding.requests.translation_record)."""

    source: str = Field(description="The sentence as the model read it (with its >>xx<< "
                        "tag).")
    translation: str
    score: float
    truncated: bool
    n_best: list[ScoredTranslation] = Field(description="The hypotheses kept (n_best), best "
                                            "first: the translation first.")
    constraints: list[ConstraintResult] | None = None
    constraints_met: bool | None = None


class TextResult(BaseModel):
    text: str
    truncated: bool = Field(description="A sentence was longer than the model accepts and "
                            "was cut.")
    constraints: list[ConstraintResult] | None = Field(None, description="With constraints "
                                                       "(given or from the glossary): each "
                                                       "phrase and whether it is met.")
    constraints_met: bool | None = Field(None, description="Every phrase is met (false: some "
                                         "did not fit the length limit).")
    sentences: list[SentenceResult] | None = None


class TranslateResponse(BaseModel):
    translations: list[TextResult]
    source_lang: str | None = Field(None, description="The source language translated from "
                                    "(null: unknown).")
    source_lang_by: str = Field(description="How it is known: request (source_lang), "
                                "identified (among the model's source languages), model (its "
                                "one, or the one it records) or unknown.")
