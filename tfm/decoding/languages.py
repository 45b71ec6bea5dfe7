"""Target-language tokens of multilingual MarianMT models (OPUS-MT's ``>>fr<<``): a source
sentence that starts with one asks for a translation into that language."""

from __future__ import annotations

from tfm.data.sentencepiece import is_language_token
from tfm.data.tokenizer import Vocabularies
from tfm.errors import UsageError


def language_tokens(vocabs: Vocabularies) -> list[str]:
    """The ``>>xx<<`` tokens of the source vocabulary, sorted; empty for most models."""
    return sorted(t for t in vocabs.src.get_vocab() if is_language_token(t))


def language_token(vocabs: Vocabularies, lang: str, what: str = "--target-lang") -> str:
    """``>>lang<<`` (``lang`` may be given with or without the brackets), refused in one line
    (naming the option ``what``) when the model has no such token."""
    token = lang if is_language_token(lang) else f">>{lang}<<"
    known = language_tokens(vocabs)
    if token not in known:
        if not known:
            raise UsageError(f"{what} {lang}: this model has no target-language tokens "
                             "(it translates into one language)")
        raise UsageError(f"{what} {lang}: the model has no {token} token; it has "
                         f"{', '.join(t[2:-2] for t in known)}")
    return token


def with_language(sentences: list[str], token: str | None) -> list[str]:
    """``token`` before each non-empty sentence (an empty line stays empty)."""
    if token is None:
        return sentences
    return [f"{token} {s}" if s.strip() else s for s in sentences]
