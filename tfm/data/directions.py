"""Translation directions: which corpora a run reads, in which direction each, and the
target-language tags that tell a model of several target languages which one to write.

A run translates one direction (``en-de``) or several (a multilingual model). Its corpora are
listed once, with their languages and an optional sampling weight: on the command line as
one corpus (``--train``, ``--src-lang``, ``--tgt-lang``), or in a run config (``--config
run.yaml``) as a list, the shape OpenNMT-py users know::

    corpora:
      - train: data/multi30k/train        # a prefix, two files, TSV, JSONL, a dataset ...
        valid: data/multi30k/val          # optional: validated per direction
        directions: [en-de, de-en, en-fr, fr-en]   # a multi-way corpus gives any pair
      - train: [extra.en, extra.de]
        src_lang: en
        tgt_lang: de
        weight: 2                         # optional: sampling weight of its direction
        upsample: 2                       # optional: its pairs written twice (real pairs
                                          # beside synthetic ones: --upsample-primary)
      - train: runs/bt/synthetic          # tfm backtranslate's output
        src_lang: en
        tgt_lang: de
        synthetic: true                   # never validated on; tagged by synthetic_tag
      - train: mono.de                    # text of one language: tfm prepare back-
        tgt_lang: de                      # translates it (tfm.data.monolingual), its
        reverse_model: runs/bt/reverse    # pairs synthetic
        backtranslate: {beam: 1, sampling_topk: 10}

Where the directions have more than one target language, each source sentence starts with the
tag of its target language, ``>>de<<`` (OPUS-MT's convention, so that CTranslate2 and MarianMT
exports and imported OPUS-MT models need nothing new): one token of the tokenizer, which the
BPE never splits, put before the text by the same function when data is prepared and when a
sentence is translated (``tagged``).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from tfm.data.corpus import CorpusSpec
from tfm.data.language_marks import tag  # the one spelling of >>xx<<
from tfm.data.language_marks import vocabulary_tags as vocabulary_tags  # its callers' name
from tfm.data.monolingual import Backtranslation, parse_backtranslation
from tfm.errors import UsageError

_LANG = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,15}$")  # en, pt_BR, zh_Hant, ...


def check_language(lang: str, what: str) -> str:
    """``lang`` if it can name a language in a tag (letters, digits, ``_``), else one line."""
    if not _LANG.match(lang):
        raise UsageError(f"{what} {lang!r}: a language code is letters, digits and _ "
                         "(e.g. de, pt_BR)")
    return lang


@dataclass(frozen=True, order=True)
class Direction:
    """A translation direction, ``src`` -> ``tgt``; written ``en-de``."""

    src: str | None  # None: not known (a bilingual corpus without language names)
    tgt: str | None

    @property
    def name(self) -> str:
        return f"{self.src or '?'}-{self.tgt or '?'}"

    def __str__(self) -> str:
        return self.name

    @classmethod
    def parse(cls, text: str, what: str = "direction") -> Direction:
        """``en-de`` -> Direction("en", "de"), or one line saying what is wrong."""
        parts = str(text).split("-")
        if len(parts) != 2 or not all(parts):
            raise UsageError(f"{what} {text!r}: write a direction as SRC-TGT, e.g. en-de")
        src, tgt = (check_language(p, what) for p in parts)
        if src == tgt:
            raise UsageError(f"{what} {text}: the source and target languages are the same")
        return cls(src, tgt)

    @classmethod
    def from_name(cls, name: str) -> Direction:
        """A direction as tfm wrote its name (prepare.json, config.json): ``en-de``, or
        ``?-?`` for languages not known."""
        src, _, tgt = name.partition("-")
        return cls(None if src in ("", "?") else src, None if tgt in ("", "?") else tgt)

    def reversed(self) -> Direction:
        """The other way: ``de-en`` for ``en-de``."""
        return Direction(self.tgt, self.src)


def tags_for(directions: Iterable[Direction]) -> list[str]:
    """The tags a set of directions needs: one per target language where there are several,
    none where all translate into one language (a bilingual run, or many sources into one).
    A tokenizer trained for the directions has them (``tfm train-tokenizer``)."""
    targets = sorted({d.tgt for d in directions if d.tgt})
    return [tag(t) for t in targets] if len(targets) > 1 else []


def source_tag(tags: Sequence[str], direction: Direction, where: str) -> str | None:
    """The tag that sources of ``direction`` start with, for a tokenizer with ``tags``
    (None: it has none); one line where it lacks the direction's."""
    if not tags:
        return None
    wanted = tag(direction.tgt or "?")
    if wanted not in tags:
        raise UsageError(f"{where}: the tokenizer has no {wanted} tag for direction "
                         f"{direction} (it has {', '.join(tags)}); train it with "
                         "`tfm train-tokenizer` on the same corpora")
    return wanted


@dataclass(frozen=True)
class Corpus:
    """One corpus of a run, read in one direction: its training and (optional) validation
    data, and the sampling weight of its direction (None: the temperature decides)."""

    direction: Direction
    train: CorpusSpec
    valid: CorpusSpec | None = None
    weight: float | None = None
    # Synthetic pairs (tfm backtranslate's): never validated on, their sources tagged where
    # the run asks (tfm prepare's synthetic_tag).
    synthetic: bool = False
    # Its pairs written this many times (fairseq's --upsample-primary for the real pairs).
    upsample: int = 1
    # A monolingual entry: ``train`` is text of the target language, back-translated by tfm
    # prepare into the synthetic pairs it reads (tfm.decoding.backtranslation's
    # backtranslate_corpora); None: a corpus of pairs.
    backtranslation: Backtranslation | None = field(default=None, compare=False)


@dataclass(frozen=True)
class Corpora:
    """The corpora of a run, in the order given, and the directions they make."""

    items: tuple[Corpus, ...]
    directions: tuple[Direction, ...] = field(init=False)

    def __post_init__(self) -> None:
        seen: dict[Direction, None] = {}
        for c in self.items:
            seen.setdefault(c.direction)
        object.__setattr__(self, "directions", tuple(seen))

    @property
    def monolingual(self) -> list[Corpus]:
        """The corpora of text to back-translate (their pairs not made yet)."""
        return [c for c in self.items if c.backtranslation is not None]

    @property
    def tags(self) -> list[str]:
        """The tags a tokenizer for these corpora needs (``tags_for``)."""
        return tags_for(self.directions)

    def weights(self) -> list[float] | None:
        """Each direction's sampling weight, or None where no corpus gives one. A direction
        given by several corpora takes their one weight (refused where they differ)."""
        given: dict[Direction, float] = {}
        for c in self.items:
            if c.weight is not None:
                given.setdefault(c.direction, c.weight)
        if not given:
            return None
        missing = [d.name for d in self.directions if d not in given]
        if missing:
            raise UsageError(f"corpora: weights are given for some directions but not for "
                             f"{', '.join(missing)}: give every direction a weight, or none")
        for c in self.items:
            if c.weight is not None and c.weight != given[c.direction]:
                raise UsageError(f"corpora: direction {c.direction} is given weights "
                                 f"{given[c.direction]:g} and {c.weight:g}; give it one")
        return [float(given[d]) for d in self.directions]


def single_corpus(train: CorpusSpec, valid: CorpusSpec | None, src_lang: str | None,
                  tgt_lang: str | None) -> Corpora:
    """The one corpus of the command line (``--train``, ``--valid``, ``-s``, ``-t``); its
    languages may come from the file names (resolved here)."""
    from tfm.data.corpus import resolve_corpus

    resolved = resolve_corpus(train)
    direction = Direction(src_lang or resolved.src_lang, tgt_lang or resolved.tgt_lang)
    return Corpora((Corpus(direction, train, valid),))


_ENTRY_KEYS = ("train", "valid", "src_lang", "tgt_lang", "directions", "weight", "synthetic",
               "upsample", "reverse_model", "backtranslate")


def corpora_from_config(entries: Any, split: str = "train", hf_config: str | None = None
                        ) -> Corpora:
    """The ``corpora`` list of a run config (see the module's docstring) as Corpora; each
    mistake is one line naming the entry and the key."""
    if not isinstance(entries, list) or not entries:
        raise UsageError("corpora: give a list of corpora, each with train: and its languages "
                         "(src_lang: and tgt_lang:, or directions:)")
    items: list[Corpus] = []
    for n, entry in enumerate(entries, 1):
        items += _entry_corpora(entry, n, split, hf_config)
    items = _into_languages(items)
    seen: set[tuple] = set()
    for c in items:
        key = (c.direction, c.train)
        if key in seen:
            raise UsageError(f"corpora: {' '.join(c.train.paths)} is listed twice for "
                             f"{c.direction}")
        seen.add(key)
    corpora = Corpora(tuple(items))
    corpora.weights()  # checked now: a mistake is found before any work
    return corpora


def _entry_corpora(entry: Any, n: int, split: str, hf_config: str | None) -> list[Corpus]:
    """Entry ``n`` of a run config's corpora: a corpus per direction it is read in (a
    monolingual entry's source language not known yet: ``_into_languages``)."""
    where = f"corpora, entry {n}"
    if not isinstance(entry, dict):
        raise UsageError(f"{where}: give a mapping (train:, src_lang:, tgt_lang:, ...)")
    unknown = [k for k in entry if k not in _ENTRY_KEYS]
    if unknown:
        from difflib import get_close_matches

        near = get_close_matches(str(unknown[0]), _ENTRY_KEYS, n=1)
        hint = f" (did you mean {near[0]}?)" if near else \
            f" (a corpus has {', '.join(_ENTRY_KEYS)})"
        raise UsageError(f"{where}: unknown key {unknown[0]!r}{hint}")
    train = _paths(entry.get("train"), f"{where}, train")
    valid = _paths(entry["valid"], f"{where}, valid") if entry.get("valid") else None
    weight = entry.get("weight")
    if weight is not None and (isinstance(weight, bool)
                               or not isinstance(weight, (int, float)) or weight <= 0):
        raise UsageError(f"{where}, weight {weight!r}: give a number above 0")
    weight = None if weight is None else float(weight)
    synthetic, upsample = _synthetic(entry, where)
    bt = _monolingual(entry, n, train)
    if bt is not None:
        direction = Direction.parse(f"{bt.into}-{bt.lang}", f"{where}, backtranslate, into") \
            if bt.into else Direction(None, bt.lang)  # (None: _into_languages finds it)
        spec = CorpusSpec(train, direction.src, bt.lang, split, hf_config)
        return [Corpus(direction, spec, None, weight, True, upsample, bt)]
    if "directions" in entry:
        if "src_lang" in entry or "tgt_lang" in entry:
            raise UsageError(f"{where}: give directions: or src_lang:/tgt_lang:, not both")
        names = entry["directions"]
        if isinstance(names, str):
            names = [names]
        if not isinstance(names, list) or not names:
            raise UsageError(f"{where}, directions: give a list such as [en-de, de-en]")
        directions = [Direction.parse(d, f"{where}, directions:") for d in names]
    else:
        if not entry.get("src_lang") or not entry.get("tgt_lang"):
            raise UsageError(f"{where}: give its languages (src_lang: and tgt_lang:, or "
                             "directions: [en-de, ...])")
        directions = [Direction.parse(f"{entry['src_lang']}-{entry['tgt_lang']}", where)]
    return [Corpus(d, CorpusSpec(train, d.src, d.tgt, split, hf_config),
                   CorpusSpec(valid, d.src, d.tgt, _valid_split(split), hf_config)
                   if valid else None, weight, synthetic, upsample) for d in directions]


def _synthetic(entry: dict, where: str) -> tuple[bool, int]:
    """A corpus entry's ``synthetic:`` (true for back-translated pairs, which are never
    validated on) and ``upsample:`` (its pairs written N times), each mistake one line."""
    synthetic, upsample = entry.get("synthetic", False), entry.get("upsample", 1)
    if not isinstance(synthetic, bool):
        raise UsageError(f"{where}, synthetic {synthetic!r}: give true or false")
    if isinstance(upsample, bool) or not isinstance(upsample, int) or upsample < 1:
        raise UsageError(f"{where}, upsample {upsample!r}: give a whole number, 1 or more")
    if synthetic and entry.get("valid"):
        raise UsageError(f"{where}: a synthetic corpus has no valid:; validation is on real "
                         "pairs only (give valid: to a real corpus)")
    return synthetic, upsample


def _monolingual(entry: dict, n: int, train: tuple[str, ...]) -> Backtranslation | None:
    """The back-translation of an entry of one language (only ``tgt_lang:``), None for an
    entry of pairs; one line for text of the source language (only ``src_lang:``), for
    a reverse model given to pairs, and for what a monolingual entry cannot have."""
    where = f"corpora, entry {n}"
    one = [k for k in ("src_lang", "tgt_lang") if entry.get(k)]
    if len(one) != 1 or "directions" in entry:
        given = [k for k in ("reverse_model", "backtranslate") if k in entry]
        if given:
            raise UsageError(f"{where}: {given[0]}: is for text of one language (tgt_lang: "
                             "only, no src_lang:), which tfm prepare back-translates")
        return None
    if one == ["src_lang"]:
        raise UsageError(
            f"{where}: only src_lang: {entry['src_lang']}: give its languages (src_lang: and "
            "tgt_lang:) for pairs. Text of one language is back-translated where it is the "
            "target language (tgt_lang: alone); text of the source language serves the other "
            "direction's run (tgt_lang: there), or translate it yourself with `tfm "
            "backtranslate --lang SRC --into TGT` and list its output with synthetic: true")
    lang = check_language(str(entry["tgt_lang"]), f"{where}, tgt_lang")
    if len(train) != 1:
        raise UsageError(f"{where}, train: text of one language is one file, a sentence a "
                         "line")
    if entry.get("valid") or entry.get("synthetic") is False:
        raise UsageError(f"{where}: back-translated pairs are synthetic: they are never "
                         "validated on (no valid:, no synthetic: false)")
    return parse_backtranslation(entry, n, lang)


def _into_languages(items: list[Corpus]) -> list[Corpus]:
    """The corpora with each monolingual one's source language: its ``into``, or the one
    source language of the run's corpora of pairs into its language (one line where there
    is none, or several)."""
    resolved = []
    for c in items:
        bt = c.backtranslation
        if bt is None or bt.into is not None:
            resolved.append(c)
            continue
        sources = sorted({d.direction.src for d in items if d.backtranslation is None
                          and d.direction.tgt == bt.lang and d.direction.src})
        if len(sources) != 1:
            have = sorted({d.direction.name for d in items if d.backtranslation is None})
            why = (f"the run's corpora translate {' and '.join(sources)} into {bt.lang}"
                   if sources else f"no corpus of pairs translates into {bt.lang} (the "
                   f"run's: {', '.join(have) or 'none'})")
            raise UsageError(f"{bt.where}: {why}; say which language to back-translate "
                             "into with backtranslate: {into: LANG}")
        into = sources[0]
        bt = dataclasses.replace(bt, into=into)
        resolved.append(dataclasses.replace(
            c, direction=Direction(into, bt.lang),
            train=dataclasses.replace(c.train, src_lang=into), backtranslation=bt))
    return resolved


def _valid_split(split: str) -> str:
    return "validation" if split == "train" else split


def _paths(value: Any, where: str) -> tuple[str, ...]:
    """A corpus's ``train:`` / ``valid:``: one path or a list of two aligned files."""
    if isinstance(value, str) and value:
        return (value,)
    if isinstance(value, list) and 1 <= len(value) <= 2 and all(
            isinstance(v, str) and v for v in value):
        return tuple(value)
    raise UsageError(f"{where}: give a path (a prefix, a TSV or JSONL file, a dataset) or a "
                     "list of two aligned files")


def corpus_texts(corpora: Corpora) -> Iterator[str]:
    """Every text of the corpora, each (corpus, language) once although a multi-way corpus
    gives it in several directions: what a joint tokenizer learns from. A corpus's pairs are
    read source, target, source, ... (as ``iter_texts`` reads one corpus)."""
    from tfm.data.corpus import iter_pairs

    seen: set[tuple] = set()
    for c in corpora.items:
        if c.backtranslation is not None:  # its pairs are made with the run's tokenizer
            continue
        wanted = []
        for side, lang in enumerate((c.direction.src, c.direction.tgt)):
            key = (c.train.paths, c.train.split, c.train.hf_config, lang)
            if key not in seen:
                seen.add(key)
                wanted.append(side)
        if wanted:
            for pair in iter_pairs(c.train):
                for side in wanted:
                    yield pair[side]


def direction_names(directions: Sequence[Direction]) -> list[str]:
    return [d.name for d in directions]
