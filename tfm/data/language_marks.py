"""How a model is told which language to write: the ``>>xx<<`` spelling, stated once, and
``LanguageMarking``, the model metadata that says where a language's token goes.

A bilingual model needs no mark. A multilingual one marks the direction in one of these ways
(``LanguageMarking.where``):

- ``source_tag``: the target language's token before the source text (``>>de<< A dog.``), as
  tfm trains multilingual models and OPUS-MT's multi-target models do. It is text: the
  tokenizer keeps it whole, so prepare, training, validation and decoding add it the same way
  (``tagged``).
- ``decoder_token``: the target language's token as the decoder's first forced token, after
  ``<s>`` (tfm.decoding.search.decoder_start): fed, never scored, never output.

``mark`` applies a model's marking to one direction; every path that reads or writes a
direction calls it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID

TAG_OPEN, TAG_CLOSE = ">>", "<<"
_TAG = re.compile(r">>[A-Za-z][A-Za-z0-9_]{0,15}<<")  # >>de<<, >>pt_BR<<, >>zho_Hans<<

WHERE = ("none", "source_tag", "decoder_token")


def tag(lang: str) -> str:
    """The language token of ``lang`` as tfm and OPUS-MT spell it: ``>>de<<``."""
    return f"{TAG_OPEN}{lang}{TAG_CLOSE}"


def is_tag(token: str) -> bool:
    """Whether a vocabulary entry is a language token such as ``>>fr<<``."""
    return len(token) > 4 and token.startswith(TAG_OPEN) and token.endswith(TAG_CLOSE)


def tag_language(token: str) -> str:
    """``>>fr<<`` -> ``fr``; any other text as it is."""
    return token[len(TAG_OPEN):-len(TAG_CLOSE)] if is_tag(token) else token


def find_tag(text: str) -> str | None:
    """The first ``>>xx<<`` written anywhere in ``text``, or None."""
    match = _TAG.search(text)
    return match.group(0) if match else None


def split_leading_tag(text: str) -> tuple[str | None, str]:
    """MarianTokenizer's rule: a text that starts with ``>>`` and has a ``<<`` after it starts
    with a language token, up to and including that ``<<``, kept whole."""
    if text.startswith(TAG_OPEN):
        end = text.find(TAG_CLOSE)
        if end != -1:
            return text[:end + len(TAG_CLOSE)], text[end + len(TAG_CLOSE):]
    return None, text


def tagged(text: str, token: str | None) -> str:
    """``text`` as a model with source tags reads it: its tag, a space, the text. A text of
    nothing but spaces stays as it is (nothing to translate, or for the cleaning to drop)."""
    return f"{token} {text}" if token is not None and text.strip() else text


@dataclass(frozen=True)
class LanguageMarking:
    """Where a model's language token goes (``WHERE``), stored in its config.json as
    ``language_marking`` (absent: inferred from the vocabulary, ``infer``)."""

    where: str = "none"

    def __post_init__(self) -> None:
        if self.where not in WHERE:
            raise UsageError(f"language_marking {self.where!r}: choose {', '.join(WHERE)}")

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Any) -> LanguageMarking:
        if not isinstance(data, dict):
            raise UsageError(f"language_marking: an object, not {data!r}")
        return cls(**data)

    @classmethod
    def infer(cls, vocabulary_tags: list[str]) -> LanguageMarking:
        """A model saved without a marking: a source tag where its source vocabulary has
        language tokens (every tfm multilingual model and OPUS-MT multi-target model before
        the field existed), else none."""
        return cls("source_tag" if vocabulary_tags else "none")


@dataclass(frozen=True)
class Marked:
    """One direction as a model reads it: the token before each source text (None: none),
    and the decoder's forced start tokens."""

    source_tag: str | None = None
    start: tuple[int, ...] = (BOS_ID,)


def mark(marking: LanguageMarking, target_lang: str | None,
         token_id: Callable[[str], int | None]) -> Marked:
    """What a model of ``marking`` reads for a translation into ``target_lang`` (None: the
    model's one target language, no mark): a source tag, or a forced decoder token whose id
    ``token_id`` gives (None where the vocabulary lacks it: refused in one line)."""
    if target_lang is None or marking.where == "none":
        return Marked()
    token = target_lang if is_tag(target_lang) else tag(target_lang)
    if marking.where == "source_tag":
        return Marked(source_tag=token)
    ident = token_id(token)
    if ident is None:
        raise UsageError(f"target language {tag_language(token)}: the model has no {token} token")
    return Marked(start=(BOS_ID, ident))
