"""One request path: a request's sentences made ready for an engine, and its results made into
the JSON record that both ``tfm translate --format jsonl`` and ``tfm serve`` write.

::

    sentences as written ── glossary terms found, phrases and prefix asked ── ConstraintSpec
         │                                                                        │
         └── the languages (ResolvedLanguage) ──── Translator.prepare (its marking) ┘
                                                                  │ Sources (tokens)
                                        engine (translate_prepared, or the server's batcher)
                                                                  │ Translations
                                                  translation_record ── JSON, or the text

``tfm translate``, ``tfm eval`` and the server's ``/v1/translate`` call ``prepare_request``;
each words the errors it raises in its own terms (a file's line, a request's field).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tfm.config import SearchOptions
from tfm.data.language_marks import ResolvedLanguage, find_tag
from tfm.decoding.alignment import pharaoh
from tfm.decoding.constraints import ConstraintError, ConstraintSpec
from tfm.decoding.glossary import Glossary, sentence_constraints
from tfm.decoding.translator import Source, Translation, Translator
from tfm.errors import UsageError


def prepare_request(translator: Translator, sentences: Sequence[str], options: SearchOptions,
                    asks: Sequence[ConstraintSpec | None] | None = None,
                    glossary: Glossary | None = None,
                    language: ResolvedLanguage | None = None, first: int = 0) -> list[Source]:
    """The sentences of one request as the engine reads them. ``asks``: what each sentence's
    translation must have (its phrases and prefix; None: nothing); ``glossary``: whose terms
    found in a sentence (as written, before its tag) become phrases too; ``language``: the
    request's languages, resolved by the caller (``translator.languages.resolve``: the
    command line from its options, the server from the request's fields; None: none asked).
    ``first``: the number of the request's first sentence in a longer input (a stream's
    line). Raises LanguageError (tfm.data.language_marks) for a missing or misplaced tag,
    which the caller words with its option, and ConstraintError (whose ``sentence`` counts
    from ``first``) for a constraint that cannot be used; the caller says where."""
    specs = constraint_specs(sentences, asks, glossary)
    if language is None:  # none asked: each sentence checked for its own tag where needed
        language = translator.languages.resolve(None)
    try:
        return translator.prepare(list(sentences), specs, options, language, first)
    except ConstraintError as e:
        e.sentence = (e.sentence or 0) + first
        raise


REQUEST_KEYS = ("src", "constraints", "prefix")  # of a JSONL input line


def read_requests(path: Path) -> tuple[list[str], list[ConstraintSpec | None]]:
    """The sentences of a JSONL file of translation requests, one object a line:
    ``{"src": "...", "constraints": ["...", ...], "prefix": "..."}`` (only ``src`` needed),
    and what each asks of its translation. UsageError naming the line for anything else."""
    from tfm.data.corpus import read_text_lines

    sentences: list[str] = []
    specs: list[ConstraintSpec | None] = []
    for number, line in enumerate(read_text_lines(path, allow_empty=True), 1):
        where = f"{path}, line {number}"
        if not line.strip():
            raise UsageError(f'{where}: empty; each line is one request such as {{"src": '
                             '"..."} ({"src": ""} for an empty line)')
        try:
            record = json.loads(line)
        except json.JSONDecodeError as e:
            raise UsageError(f"{where}: not JSON ({e.msg}); each line is an object such as "
                             '{"src": "...", "constraints": ["..."]}') from None
        if not isinstance(record, dict):
            raise UsageError(f'{where}: not a JSON object such as {{"src": "..."}}')
        unknown = sorted(set(record) - set(REQUEST_KEYS))
        if unknown:
            raise UsageError(f"{where}: unknown key {unknown[0]!r} (a line may have "
                             f"{', '.join(REQUEST_KEYS)})")
        src = record.get("src")
        if not isinstance(src, str):
            raise UsageError(f'{where}: "src" must be the sentence to translate, a string')
        phrases = record.get("constraints", [])
        if not isinstance(phrases, list) or not all(isinstance(p, str) for p in phrases):
            raise UsageError(f'{where}: "constraints" must be a list of strings')
        prefix = record.get("prefix")
        if prefix is not None and not isinstance(prefix, str):
            raise UsageError(f'{where}: "prefix" must be a string')
        sentences.append(src)
        spec = ConstraintSpec(phrases, prefix)
        specs.append(spec if spec else None)
    return sentences, specs


def constraint_specs(sentences: Sequence[str], asks: Sequence[ConstraintSpec | None] | None,
                     glossary: Glossary | None) -> list[ConstraintSpec | None] | None:
    """What each sentence's translation must have: the phrases and prefix it asks for, and the
    target terms of the glossary terms found in it; None when no sentence has anything."""
    if asks is None and glossary is None:
        return None
    asks = asks if asks is not None else [None] * len(sentences)
    if len(asks) != len(sentences):
        raise ValueError(f"{len(asks)} constraint specs for {len(sentences)} sentences")
    specs = [sentence_constraints(untagged(s), a.phrases if a else None,
                                  a.prefix if a else None, glossary)
             for s, a in zip(sentences, asks)]
    return specs if any(specs) else None


def untagged(sentence: str) -> str:
    """A sentence without the target-language tag it starts with, if any: glossary terms are
    looked for in the sentence as written, never in its tag."""
    text = sentence.lstrip()
    own = find_tag(text)
    return text[len(own):].lstrip() if own is not None and text.startswith(own) else sentence


def translation_record(result: Translation, alignment: bool = False) -> dict[str, Any]:
    """One sentence's translation as JSON, the same for the command line's ``--format jsonl``
    and the server's ``sentences``: ``source`` (as the model read it, with its tag),
    ``translation``, ``score``, ``truncated``, ``n_best`` (every hypothesis kept, best first:
    the translation first); with constraint phrases, ``constraints`` (each phrase, ``met``,
    and the glossary's ``source_term`` that asked for it), ``constraints_met``, and each
    hypothesis's ``constraints_met``; with ``alignment``, the word alignment
    (``i-j``, source word i to target word j) where the engine gave one."""
    record: dict[str, Any] = {
        "source": result.source, "translation": result.text, "score": result.hypotheses[0][1],
        "truncated": result.truncated,
        "n_best": [{"translation": t, "score": s} for t, s in result.hypotheses]}
    if result.constraints is not None:
        record["constraints"] = [constraint_record(c) for c in result.constraints]
        record["constraints_met"] = result.constraints_met
        for entry, met in zip(record["n_best"], result.hypotheses_met or []):
            entry["constraints_met"] = met
    if alignment and result.alignment is not None:
        record["alignment"] = pharaoh(result.alignment)
    return record


def constraint_record(report: tuple[str, bool, str | None]) -> dict[str, Any]:
    """A constraint phrase's report: the phrase, whether the translation contains it, and the
    glossary's source term that asked for it (only for a glossary term)."""
    phrase, met, term = report
    return {"phrase": phrase, "met": met, **({"source_term": term} if term else {})}
