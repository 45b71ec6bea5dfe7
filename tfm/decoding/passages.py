"""Lines and texts translated sentence by sentence, and put back together.

A model translates one sentence at a time, but ``tfm translate`` reads lines that may hold
several (a line of a text file is often a paragraph): each text is cut into its sentences
(tfm.data.sentences), all of them are translated together, and each text's translation is its
sentences' translations with the whitespace that was between them. A text whose sentences are
known to be one (``--no-split``: a corpus one sentence a line; a request with constraints or a
prefix, which belong to the text as a whole) is a passage of one sentence.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from typing import Any

from tfm.data.language_marks import split_leading_tag
from tfm.data.sentences import Passage, split_sentences
from tfm.decoding.requests import translation_record
from tfm.decoding.translator import Translation


def cut(texts: Sequence[str], split: bool, language: str | None = None) -> list[Passage]:
    """Each text as the sentences to translate: split (by ``language``'s rules), or whole."""
    return [_split(t, language) if split else Passage.whole(t) for t in texts]


def _split(text: str, language: str | None) -> Passage:
    """A text cut into sentences; one that starts with its target-language tag (``>>de<<``)
    gives it to each of its sentences, and the translation starts where the tag stood."""
    body = text.lstrip()
    tag, rest = split_leading_tag(body)
    if tag is None:
        return split_sentences(text, language)
    passage = split_sentences(rest.lstrip(), language)
    gaps = [text[:len(text) - len(body)] + passage.gaps[0], *passage.gaps[1:]]
    return Passage([f"{tag} {s}" for s in passage.sentences], gaps)


def sentences(passages: Sequence[Passage]) -> list[str]:
    """Every passage's sentences, in order: what goes to the model."""
    return [s for p in passages for s in p.sentences]


def rejoined(passages: Sequence[Passage], results: Sequence[Translation]
             ) -> list[tuple[Translation, list[Translation]]]:
    """Each passage's translation (``joined``) with its sentences' own, from the translations
    of ``sentences(passages)`` in order."""
    found = sum(len(p.sentences) for p in passages)
    if found != len(results):
        raise ValueError(f"{len(results)} translations for {found} sentences")
    out, position = [], 0
    for passage in passages:
        mine = list(results[position: position + len(passage.sentences)])
        position += len(passage.sentences)
        out.append((joined(passage, mine), mine))
    return out


def joined(passage: Passage, parts: list[Translation]) -> Translation:
    """A passage's translation: its sentences' translations with the whitespace between them
    kept. A text of one sentence keeps that sentence's record (its n-best, attention and
    alignment); a text of several has the sum of their scores (the log-probability of the
    whole); a text of whitespace only is an empty line."""
    if not passage.sentences:
        return Translation("", [("", 0.0)])
    if len(parts) == 1:
        return replace(parts[0], hypotheses=[(passage.join([t]), s)
                                             for t, s in parts[0].hypotheses])
    reports = [c for p in parts for c in p.constraints or []]
    return Translation(
        passage.join(passage.sentences), [(passage.join([p.text for p in parts]),
                                           sum(p.hypotheses[0][1] for p in parts))],
        any(p.truncated for p in parts), target_tokens=sum(p.target_tokens for p in parts),
        constraints=reports if any(p.constraints is not None for p in parts) else None)


def passage_record(line: Translation, parts: list[Translation], alignment: bool = False
                   ) -> dict[str, Any]:
    """A text's JSON record (``--format jsonl``): that of its one sentence, as before; for a
    text of several, the text's source, translation, summed score and ``truncated``, with each
    sentence's own record under ``sentences``."""
    if len(parts) <= 1:
        return translation_record(line, alignment)
    return {"source": line.source, "translation": line.text, "score": line.hypotheses[0][1],
            "truncated": line.truncated,
            "sentences": [translation_record(p, alignment) for p in parts]}
