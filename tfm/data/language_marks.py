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
- ``source_and_decoder``: both of the above (`tfm prepare --language-token both`).
- ``language_codes``: the model's own language codes (NLLB-200's ``eng_Latn``, M2M100's
  ``en``, spelled in its vocabulary as ``LanguageMarking.spelling`` says: ``__en__``): the
  source language's token before the source (``[eng_Latn] X </s>``; ``X </s> [eng_Latn]``
  with ``source_code`` "suffix", NLLB's ``legacy_behaviour``), and the decoder starting from
  ``</s>`` with the target language's token forced after it, as fairseq trained them. Both
  languages are needed.

``mark`` applies a model's marking to one direction; every path that reads or writes a
direction calls it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass
from difflib import get_close_matches
from typing import Any

from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID, EOS_ID

TAG_OPEN, TAG_CLOSE = ">>", "<<"
_TAG = re.compile(r">>[A-Za-z][A-Za-z0-9_]{0,15}<<")  # >>de<<, >>pt_BR<<, >>zho_Hans<<

WHERE = ("none", "source_tag", "decoder_token", "source_and_decoder", "language_codes")
# How `tfm prepare --language-token` names the placements of a tfm multilingual model's tag.
LANGUAGE_TOKEN = {"source": "source_tag", "decoder": "decoder_token",
                  "both": "source_and_decoder"}
SOURCE_CODE = ("prefix", "suffix")


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
    ``language_marking`` (absent: inferred from the vocabulary, ``infer``). A model of
    ``language_codes`` also records its ``codes``, how its vocabulary spells one
    (``spelling``, ``{}`` standing for the code) and where the source's goes
    (``source_code``)."""

    where: str = "none"
    codes: tuple[str, ...] = ()
    spelling: str = "{}"
    source_code: str = "prefix"

    def __post_init__(self) -> None:
        if self.where not in WHERE:
            raise UsageError(f"language_marking {self.where!r}: choose {', '.join(WHERE)}")
        if self.source_code not in SOURCE_CODE:
            raise UsageError(f"language_marking source_code {self.source_code!r}: choose "
                             f"{', '.join(SOURCE_CODE)}")
        if "{}" not in self.spelling:
            raise UsageError(f"language_marking spelling {self.spelling!r} has no {{}}")
        if self.where == "language_codes" and not self.codes:
            raise UsageError("language_marking language_codes: the model's codes are missing")

    @property
    def in_source(self) -> bool:
        """Whether the target language's ``>>xx<<`` tag goes before the source text."""
        return self.where in ("source_tag", "source_and_decoder")

    @property
    def in_decoder(self) -> bool:
        """Whether the target language's ``>>xx<<`` tag is the decoder's forced first token."""
        return self.where in ("decoder_token", "source_and_decoder")

    def token(self, code: str) -> str:
        """How the vocabulary spells language ``code`` (``__en__`` for M2M100's ``en``)."""
        return self.spelling.format(code)

    def code(self, lang: str, what: str) -> str:
        """``lang``, given as a code (``deu_Latn``, ``de``) or as its token (``__de__``), as
        one of the model's codes; refused in one line naming ``what`` and the nearest codes
        the model has."""
        if lang in self.codes:
            return lang
        prefix, _, suffix = self.spelling.partition("{}")
        bare = lang[len(prefix):len(lang) - len(suffix)] if (
            len(lang) > len(prefix) + len(suffix) and lang.startswith(prefix)
            and lang.endswith(suffix)) else lang
        if bare in self.codes:
            return bare
        near = get_close_matches(bare, self.codes, n=5, cutoff=0.5) or [
            c for c in self.codes if c.lower().startswith(bare[:2].lower())][:5]
        hint = f"nearest: {', '.join(near)}" if near else f"it has {len(self.codes)}, e.g. " \
            + ", ".join(self.codes[:5])
        raise UsageError(f"{what} {lang}: not a language code of this model ({hint})")

    def to_json(self) -> dict[str, Any]:
        if self.where != "language_codes":
            return {"where": self.where}
        data = asdict(self)
        data["codes"] = list(self.codes)
        return data

    @classmethod
    def from_json(cls, data: Any) -> LanguageMarking:
        if not isinstance(data, dict):
            raise UsageError(f"language_marking: an object, not {data!r}")
        data = dict(data)
        if "codes" in data:
            if not isinstance(data["codes"], list) or not all(isinstance(c, str)
                                                              for c in data["codes"]):
                raise UsageError("language_marking codes: a list of strings")
            data["codes"] = tuple(data["codes"])
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
    the token ids before each source's ids and after its ``</s>``, and the
    decoder's forced start tokens."""

    source_tag: str | None = None
    start: tuple[int, ...] = (BOS_ID,)
    source_prefix: tuple[int, ...] = ()
    source_suffix: tuple[int, ...] = ()


def mark(marking: LanguageMarking, target_lang: str | None,
         token_id: Callable[[str], int | None], source_lang: str | None = None) -> Marked:
    """What a model of ``marking`` reads for a translation into ``target_lang`` (None: the
    model's one target language, no mark): a source tag, or a forced decoder token whose id
    ``token_id`` gives (None where the vocabulary lacks it: refused in one line). A model of
    ``language_codes`` needs both languages, given as its codes (``LanguageMarking.code``)."""
    if marking.where == "language_codes":
        if target_lang is None or source_lang is None:
            raise UsageError("a model of language codes needs both the source and the target "
                             "language")
        src = _code_id(marking, source_lang, "source language", token_id)
        tgt = _code_id(marking, target_lang, "target language", token_id)
        before, after = ((src,), ()) if marking.source_code == "prefix" else ((), (src,))
        return Marked(start=(EOS_ID, tgt), source_prefix=before, source_suffix=after)
    if target_lang is None or marking.where == "none":
        return Marked()
    token = target_lang if is_tag(target_lang) else tag(target_lang)
    source_tag = token if marking.in_source else None
    if not marking.in_decoder:
        return Marked(source_tag=source_tag)
    ident = token_id(token)
    if ident is None:
        raise UsageError(f"target language {tag_language(token)}: the model has no {token} token")
    return Marked(source_tag=source_tag, start=(BOS_ID, ident))


def _code_id(marking: LanguageMarking, lang: str, what: str,
             token_id: Callable[[str], int | None]) -> int:
    token = marking.token(marking.code(lang, what))
    ident = token_id(token)
    if ident is None:
        raise UsageError(f"{what} {lang}: the model's vocabulary has no {token} token")
    return ident
