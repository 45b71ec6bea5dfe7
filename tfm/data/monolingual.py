"""Monolingual corpus entries of a run config: text of one language that ``tfm prepare``
back-translates into synthetic pairs before it reads them (tfm.decoding.backtranslation's
``backtranslate_corpora``, the same work as ``tfm backtranslate``).

An entry of the run's target language names the text, its language and the reverse model,
and under ``backtranslate:`` any option of ``tfm backtranslate`` by its own name::

    corpora:
      - {train: real, valid: val, src_lang: en, tgt_lang: de, upsample: 2}
      - train: mono.de                  # tfm backtranslate's --input
        tgt_lang: de                    # its --lang
        reverse_model: runs/bt/reverse  # its --reverse-model
        backtranslate: {beam: 1, sampling_topk: 10, max_ratio: 3}   # its other options

Why this shape: the entry's own keys say what every corpus says (``train``, its language,
``weight``, ``upsample``), the back-translation's options sit apart under the command's name,
spelt as its options are (``sampling_topk`` or ``sampling-topk``): moving from the command to
the config is a copy, and ``max_ratio`` under ``backtranslate:`` (pairs dropped by their
length ratio in words, after back-translation) is never taken for ``tfm prepare``'s own
``max_ratio`` (in tokens, when every corpus is cleaned). The language translated into
(``--into``) is the source language of the run's corpora into the text's language, or
``into:`` under ``backtranslate:`` where that is not one language.

This module parses and checks an entry (before any work); the back-translation itself is on
the decoding floor, which may load models.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass, field
from difflib import get_close_matches
from pathlib import Path
from typing import Any

from tfm.config import (
    BACKTRANSLATE_ENGINE_EXCLUDED,
    BACKTRANSLATE_SEARCH_EXCLUDED,
    BacktranslateConfig,
    EngineOptions,
    SearchOptions,
    option_spelling,
)
from tfm.errors import OptionError, UsageError

__all__ = ["Backtranslation", "backtranslate_keys", "parse_backtranslation"]

# What a monolingual entry's keys are to ``tfm backtranslate``, for the one line that points
# from the entry to the command (and for the docs).
ENTRY_KEYS = {"train": "--input", "tgt_lang": "--lang", "reverse_model": "--reverse-model"}
_GROUPS = ((SearchOptions, BACKTRANSLATE_SEARCH_EXCLUDED),
           (EngineOptions, BACKTRANSLATE_ENGINE_EXCLUDED), (BacktranslateConfig, ()))


@dataclass(frozen=True)
class Backtranslation:
    """How ``tfm prepare`` back-translates one monolingual entry of a run config: entry
    number ``entry`` (for the lines that name it), the ``text`` file in ``lang``, the
    ``reverse_model``, translated into ``into`` (None: the run's source language, resolved
    when the corpora are read), with the search options given (``search``, a dict as
    ``tfm backtranslate`` takes them: the model's defaults fill the rest), ``engine`` and
    ``config``."""

    entry: int
    text: str
    lang: str
    reverse_model: Path
    into: str | None = None
    search: dict[str, Any] = field(default_factory=dict)
    engine: EngineOptions = field(default_factory=EngineOptions)
    config: BacktranslateConfig = field(default_factory=BacktranslateConfig)

    @property
    def where(self) -> str:
        return f"corpora, entry {self.entry}"


def backtranslate_keys() -> dict[str, type]:
    """The keys of an entry's ``backtranslate:``, each a field of the class that owns it:
    ``tfm backtranslate``'s options but its input, languages, output and models (the entry
    names those), and ``into``."""
    keys: dict[str, type] = {}
    for cls, excluded in _GROUPS:
        for f in dataclasses.fields(cls):
            if f.name not in excluded and option_spelling(cls, f.name) is not None:
                keys[f.name] = cls
    return keys


def parse_backtranslation(entry: dict, number: int, lang: str) -> Backtranslation:
    """The back-translation of monolingual entry ``number`` (``tgt_lang: lang`` only), each
    mistake one line naming the entry and the key: a missing ``reverse_model``, an unknown
    key of ``backtranslate:`` (with the nearest), a value of the wrong type or range."""
    where = f"corpora, entry {number}"
    model = entry.get("reverse_model")
    if not model:
        raise UsageError(f"{where}: text of one language (tgt_lang: {lang} only) is back-"
                         f"translated by tfm prepare: give reverse_model: (a model of {lang} "
                         "into the run's source language), or src_lang: for parallel text "
                         "(docs/BACKTRANSLATION.md)")
    if not isinstance(model, str):
        raise UsageError(f"{where}, reverse_model {model!r}: give a model directory")
    given = entry.get("backtranslate") or {}
    if not isinstance(given, dict):
        raise UsageError(f"{where}, backtranslate: give a mapping of tfm backtranslate's "
                         "options, e.g. {beam: 1, sampling_topk: 10}")
    values = _values(given, f"{where}, backtranslate")
    into = values.pop("into", None)
    if into is not None and (not isinstance(into, str) or into == lang):
        raise UsageError(f"{where}, backtranslate, into {into!r}: give the language to "
                         f"translate the {lang} text into, another than {lang}")
    keys = backtranslate_keys()
    parts = {cls: {k: v for k, v in values.items() if keys[k] is cls} for cls, _ in _GROUPS}
    try:
        engine = EngineOptions(**parts[EngineOptions])
        config = BacktranslateConfig(**parts[BacktranslateConfig])
        _check_search(parts[SearchOptions])
    except OptionError as e:
        raise UsageError(f"{where}, backtranslate: {e.for_request()}") from None
    except UsageError as e:
        raise UsageError(f"{where}, backtranslate: {e}") from None
    return Backtranslation(number, str(entry["train"]), lang, Path(model), into,
                           parts[SearchOptions], engine, config)


def _check_search(given: dict[str, Any]) -> None:
    """The search options' own ranges (``min``); how they go together is checked with the
    reverse model's defaults filling the rest (``Translator.default_options``), as the
    command checks them, when the model is loaded, before any work."""
    for f in dataclasses.fields(SearchOptions):
        low = f.metadata.get("min")
        if f.name in given and low is not None and given[f.name] < low:
            raise OptionError(f.name, f"{given[f.name]}: give {low} or more")


def _values(given: dict, where: str) -> dict[str, Any]:
    """``given`` by field name (``sampling-topk`` read as ``sampling_topk``), each value of
    its field's type; one line for an unknown key or a value of another type."""
    keys = {**backtranslate_keys(), "into": str}
    hints = {name: typing.get_type_hints(cls)[name] for name, cls in keys.items()
             if name != "into"}
    hints["into"] = str
    values: dict[str, Any] = {}
    for key, value in given.items():
        name = str(key).replace("-", "_")
        if name not in keys:
            near = get_close_matches(name, keys, n=1)
            hint = f" (did you mean {near[0]}?)" if near else \
                " (it takes tfm backtranslate's options: beam, sampling_topk, noise, ...)"
            raise UsageError(f"{where}: unknown key {key!r}{hint}")
        values[name] = _typed(value, hints[name], f"{where}, {key}")
    return values


def _typed(value: Any, hint: Any, where: str) -> Any:
    """``value`` as a field of type ``hint`` takes it (an int where a float is wanted, a
    path from text), or one line saying what to give."""
    kinds = [k for k in typing.get_args(hint) if k is not type(None)] or [hint]
    if value is None and type(None) in typing.get_args(hint):
        return None
    kind = kinds[0]
    if kind is bool and isinstance(value, bool):
        return value
    if kind is int and isinstance(value, int) and not isinstance(value, bool):
        return value
    if kind is float and isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    if kind in (str, Path) and isinstance(value, str) and value:
        return kind(value)
    wanted = {bool: "true or false", int: "a whole number", float: "a number",
              str: "a word", Path: "a path"}.get(kind, str(kind))
    raise UsageError(f"{where} {value!r}: give {wanted}")
