"""Languages identified by py3langid (a maintained fork of langid.py whose model ships inside
the package; the optional extra ``tfm[langid]``): the off-target rate, the share of
translations that are not in the language asked for (the known failure of multilingual
models, zero-shot directions above all), and the server's source language of a text, among a
model's source languages (``identify``)."""

from __future__ import annotations

import copy
import functools
import math
from collections import Counter
from dataclasses import dataclass

from tfm.data.language_marks import tag_language
from tfm.data.language_names import code_of
from tfm.errors import UsageError
from tfm.extras import require


def _py3langid():
    """The py3langid package, or a one-line error naming the extra that installs it."""
    return require("py3langid", "langid")


@functools.cache
def _bundled_identifier(package):
    """py3langid's identifier of the model it ships, read once a process: reading it
    decompresses the whole model (docs/BENCHMARKS.md, the test suite). Each check uses a copy
    of it (``set_languages`` gives the copy arrays of its own and leaves this one whole)."""
    return package.langid.LanguageIdentifier.from_model_file(package.langid.MODEL_FILE)


def require_langid() -> None:
    """Fail early (before translating anything) when the rate cannot be measured."""
    _py3langid()


# py3langid names a language by its ISO 639-1 code where there is one; multilingual OPUS-MT
# models often by the ISO 639-3 code (>>fra<<), or that of the language's main member
# (>>cmn_Hans<<, >>nob<<). Those of the languages py3langid knows by two letters:
_ISO639_1 = {
    "afr": "af", "amh": "am", "ara": "ar", "arb": "ar", "asm": "as", "aze": "az", "azj": "az",
    "bel": "be", "bul": "bg", "ben": "bn", "bre": "br", "bos": "bs", "cat": "ca", "ces": "cs",
    "cym": "cy", "dan": "da", "deu": "de", "ell": "el", "eng": "en", "epo": "eo", "spa": "es",
    "est": "et", "ekk": "et", "eus": "eu", "fas": "fa", "pes": "fa", "fin": "fi", "fra": "fr",
    "fry": "fy", "gle": "ga", "gla": "gd", "glg": "gl", "guj": "gu", "hau": "ha", "heb": "he",
    "hin": "hi", "hrv": "hr", "hat": "ht", "hun": "hu", "hye": "hy", "ind": "id", "ibo": "ig",
    "isl": "is", "ita": "it", "jpn": "ja", "jav": "jv", "kat": "ka", "kaz": "kk", "khm": "km",
    "kan": "kn", "kor": "ko", "kur": "ku", "kir": "ky", "lat": "la", "lug": "lg", "lin": "ln",
    "lao": "lo", "lit": "lt", "lav": "lv", "lvs": "lv", "mlg": "mg", "plt": "mg", "mkd": "mk",
    "mal": "ml", "mon": "mn", "khk": "mn", "mar": "mr", "msa": "ms", "zsm": "ms", "mya": "my",
    "nep": "ne", "npi": "ne", "nld": "nl", "nor": "no", "nob": "no", "nno": "nn", "orm": "om",
    "ori": "or", "pan": "pa", "pol": "pl", "pus": "ps", "por": "pt", "que": "qu", "ron": "ro",
    "rus": "ru", "san": "sa", "sin": "si", "slk": "sk", "slv": "sl", "som": "so", "sqi": "sq",
    "srp": "sr", "swe": "sv", "swa": "sw", "swh": "sw", "tam": "ta", "tel": "te", "tha": "th",
    "tgl": "tl", "tur": "tr", "uig": "ug", "ukr": "uk", "urd": "ur", "uzb": "uz", "uzn": "uz",
    "vie": "vi", "xho": "xh", "yor": "yo", "zho": "zh", "cmn": "zh", "zul": "zu", "kin": "rw",
    "sme": "se", "sna": "sn", "sot": "st", "arg": "an", "fao": "fo", "ltz": "lb", "bak": "ba",
    "mlt": "mt", "oci": "oc", "tgk": "tg", "tuk": "tk", "tat": "tt", "vol": "vo", "dzo": "dz",
    "wln": "wa",
}


def language_code(lang: str) -> str:
    """``lang`` as py3langid names languages: without ``>>..<<`` brackets, region or script
    (``>>pt_br<<`` and ``de-AT`` are ``pt`` and ``de``: it tells neither apart), by its
    two-letter code where it has one (``fra`` is ``fr``); a language's English name as its code
    (``German`` is ``de``: tfm.data.language_names)."""
    named = code_of(lang)
    if named is not None:
        return named
    code = tag_language(lang.strip())
    code = code.replace("-", "_").split("_")[0].lower()
    return _ISO639_1.get(code, code)


@dataclass(frozen=True)
class OffTarget:
    """How many of ``total`` translations were identified as another language than ``lang``.

    ``empty`` translations (blank lines) and ``unidentifiable`` ones (nothing in them that the
    identifier knows a language by: numbers, punctuation, a short word such as "OK"; or what it
    identifies as no language at all, such as a URL) have no language to be wrong about: they
    are counted apart, and the rate is over the rest."""

    lang: str
    total: int
    empty: int
    unidentifiable: int
    off_target: int
    found: dict[str, int]  # how many translations were identified as each language
    languages: tuple[str, ...] | None  # the candidate languages; None: all py3langid knows
    version: str  # py3langid's

    @property
    def identified(self) -> int:
        return self.total - self.empty - self.unidentifiable

    @property
    def rate(self) -> float:
        """The off-target share of the identified translations, in percent."""
        return 100.0 * self.off_target / self.identified if self.identified else 0.0

    @property
    def text(self) -> str:
        return (f"off-target {self.rate:.1f}% ({self.off_target} of {self.identified} not "
                f"identified as {self.lang}; {self.empty} empty, {self.unidentifiable} "
                "unidentifiable)")

    @property
    def signature(self) -> str:
        candidates = ",".join(self.languages) if self.languages is not None else "all"
        return f"langid:py3langid-{self.version}|lang:{self.lang}|candidates:{candidates}"


NO_LANGUAGE = "zxx"  # py3langid's (and ISO 639's) "no linguistic content": a URL, code


class TargetLanguageCheck:
    """py3langid's model, loaded once for the target language ``lang``, then applied to every
    translation of a call. Each is one ``classify`` (py3langid has no batch call for sentences:
    its batch mode reads files in worker processes) on raw scores: only the best language
    matters here, so its probabilities are not normalised, and no confidence threshold applies.

    By default a translation may be identified as any of the languages py3langid knows: "not in
    the target language" means in any other, and a model gone wrong may write one that nobody
    thought of. ``languages`` restricts the choice (``lang`` is always among them), as
    langid's ``set_languages`` does: for the languages a model is trained to write, it spares
    short sentences being taken for a language that happens to share their few words ("Ja."
    is Hausa to it), at the price of missing output in a language outside the list."""

    def __init__(self, lang: str, languages: list[str] | None = None) -> None:
        package = _py3langid()
        self._identifier = copy.copy(_bundled_identifier(package))
        # Text without a feature scores this floor for every language (and the first wins).
        self._floor = package.langid.RAW_FLOOR
        self._version = package.__version__
        known = self._identifier.labels
        self.lang = self._known(language_code(lang), lang, known)
        self.languages = None
        if languages is not None:
            codes = {self._known(language_code(c), c, known) for c in languages} | {self.lang}
            self.languages = tuple(sorted(codes))
            self._identifier.set_languages(list(self.languages))

    @staticmethod
    def _known(code: str, given: str, known: list[str]) -> str:
        if code not in known:
            raise UsageError(f"language {given}: py3langid does not know it (it knows "
                             f"{', '.join(sorted(known))})")
        return code

    def __call__(self, hypotheses: list[str]) -> OffTarget:
        """The off-target counts of ``hypotheses`` (one translation each)."""
        found: Counter[str] = Counter()
        empty = unidentifiable = 0
        for hypothesis in hypotheses:
            if not hypothesis.strip():
                empty += 1
                continue
            lang, score = self._identifier.classify(hypothesis)
            if score <= self._floor or lang == NO_LANGUAGE:
                unidentifiable += 1
            else:
                found[lang] += 1
        off = sum(n for lang, n in found.items() if lang != self.lang)
        return OffTarget(self.lang, len(hypotheses), empty, unidentifiable, off,
                         dict(found.most_common()), self.languages, self._version)


IDENTIFIED_CHARACTERS = 4000  # what identification reads of a text: enough to tell
IDENTIFIED_SHARE = 0.9  # the probability, among the candidates, of a language identified


@functools.lru_cache(maxsize=16)
def _identifier_among(codes: tuple[str, ...]):
    """py3langid's identifier restricted to ``codes`` (a copy; made once a set of codes)."""
    identifier = copy.copy(_bundled_identifier(_py3langid()))
    identifier.set_languages(list(codes))
    return identifier


def identify(text: str, candidates: list[str]) -> str | None:
    """Which of ``candidates`` (a model's source languages: ``de``, ``deu``, ``deu_Latn``)
    ``text`` is written in, by py3langid among those of them it knows; None where it cannot
    tell: nothing in the text it knows a language by, fewer than two candidates it knows,
    two candidates it does not tell apart (``srp_Cyrl``, ``srp_Latn``), or no language
    ``IDENTIFIED_SHARE`` likely among them. Needs the
    ``langid`` extra (a UsageError saying so otherwise)."""
    known = set(_bundled_identifier(_py3langid()).labels)
    by_code: dict[str, list[str]] = {}
    for candidate in candidates:
        code = language_code(candidate)
        if code in known:
            by_code.setdefault(code, []).append(candidate)
    if len(by_code) < 2 or not text.strip():
        return None
    ranked = _identifier_among(tuple(sorted(by_code))).rank(text[:IDENTIFIED_CHARACTERS])
    lang, best = ranked[0]
    # The best language's probability among the candidates: near even for text that tells
    # little (numbers, one short word), which is unknown rather than a guess.
    share = 1.0 / sum(math.exp(score - best) for _, score in ranked)
    found = by_code.get(lang, [])
    return found[0] if share >= IDENTIFIED_SHARE and len(found) == 1 else None
