"""Target-language tokens (OPUS-MT's ``>>fr<<``) of multilingual models, trained by tfm
(tfm.data.directions) or imported from MarianMT: a source sentence that starts with one asks
for a translation into that language. ``tagged_sources`` is the one place where a request's
sentences get theirs: ``tfm translate``, ``tfm eval`` and ``tfm serve`` all call it."""

from __future__ import annotations

from tfm.data.directions import vocabulary_tags
from tfm.data.language_marks import find_tag, is_tag, tag, tag_language, tagged
from tfm.data.tokenizer import Vocabularies
from tfm.errors import UsageError


def language_tokens(vocabs: Vocabularies) -> list[str]:
    """The ``>>xx<<`` tokens of the source vocabulary, sorted; empty for a model of one target
    language."""
    return vocabulary_tags(vocabs.src)


def language_token(vocabs: Vocabularies, lang: str, what: str = "--target-lang",
                   known: list[str] | None = None) -> str:
    """``>>lang<<`` (``lang`` may be given with or without the brackets), refused in one line
    (naming the option ``what``) when the model has no such token; ``known``: the model's
    tokens, where the caller has them already."""
    token = lang if is_tag(lang) else tag(lang)
    known = language_tokens(vocabs) if known is None else known
    if token not in known:
        if not known:
            raise UsageError(f"{what} {lang}: this model has no target-language tokens "
                             "(it translates into one language)")
        raise UsageError(f"{what} {lang}: the model has no {token} token; it has "
                         f"{', '.join(tag_language(t) for t in known)}")
    return token


def tagged_sources(vocabs: Vocabularies, sentences: list[str], target_lang: str | None,
                   what: str = "--target-lang", first: int = 0) -> list[str]:
    """The sentences of one request as the model reads them: each starting with the tag of
    ``target_lang``. A model of several target languages needs one: ``target_lang``, or each
    sentence's own tag at its start; refused in one line where a sentence has neither, or
    writes a tag anywhere else (the tokenizer would read it as a tag). ``first``: the number
    of the request's first sentence, for the messages (a stream's line)."""
    known = language_tokens(vocabs)  # once a request: the vocabulary is read whole
    token = language_token(vocabs, target_lang, what, known) if target_lang is not None \
        else None
    if len(known) < 2 and token is None:  # one target language: nothing to choose or check
        return sentences
    for n, sentence in enumerate(sentences, first + 1):
        text = sentence.lstrip()
        own = find_tag(text)
        if own is None:
            if token is None and text:
                raise UsageError(
                    f"{what} is needed: this model translates into "
                    f"{', '.join(tag_language(t) for t in known)}; give {what} (e.g. {what} "
                    f"{tag_language(known[0])}), or start each sentence with its >>xx<< tag "
                    f"(sentence {n} has none)")
            continue
        if token is not None or not text.startswith(own) or find_tag(text[len(own):]):
            raise UsageError(f"sentence {n}: it writes the target-language tag {own} "
                             + ("while " + what + " gives one" if token is not None and
                                text.startswith(own) else "inside the sentence")
                             + "; the tag goes before the sentence, once")
        if own not in known:
            language_token(vocabs, own, "the tag", known)  # refused, naming the known ones
    return [tagged(s, token) for s in sentences]
