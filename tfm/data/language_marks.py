"""How a model is told which language to write: the ``>>xx<<`` spelling, stated once, and
``LanguageMarking``, the model metadata that says where a language's token goes.

A bilingual model needs no mark. A multilingual one marks the direction in one of these ways
(``LanguageMarking.where``):

- ``source_tag``: the target language's token before the source text (``>>de<< A dog.``), as
  tfm trains multilingual models and OPUS-MT's multi-target models do. It is text: the
  tokenizer keeps it whole, so prepare, training, validation and decoding add it the same way
  (``tagged``).
- ``decoder_token``: the target language's token as the decoder's first forced token, after
  ``<s>`` (tfm.decoding.steps.decoder_start): fed, never scored, never output.
- ``source_and_decoder``: both of the above (`tfm prepare --language-token both`).
- ``language_codes``: the model's own language codes (NLLB-200's ``eng_Latn``, M2M100's
  ``en``, spelled in its vocabulary as ``LanguageMarking.spelling`` says: ``__en__``): the
  source language's token before the source (``[eng_Latn] X </s>``; ``X </s> [eng_Latn]``
  with ``source_code`` "suffix", NLLB's ``legacy_behaviour``), and the decoder starting from
  ``</s>`` with the target language's token forced after it, as fairseq trained them. Both
  languages are needed.

The resolver: a model's languages (``ModelLanguages``, from its metadata and vocabulary)
resolve a request's target and source once, at the edge (the command line's options, the
server's request), into a ``ResolvedLanguage`` that knows its marking, its decoder start and
its source marking; the engines, training, prepare and the exports take that value. A
language the model lacks, or one it needs and is not given, is a ``LanguageError`` that
carries the value and the known languages and that each edge words with its own option
(``--target-lang``, ``target_lang``). ``mark`` applies a marking to one direction; every path
that reads or writes a direction comes through it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from difflib import get_close_matches
from typing import Any, Protocol

from tfm.data.language_names import code_of, labelled, matching
from tfm.errors import UsageError
from tfm.special_tokens import BOS_ID, EOS_ID


class _Direction(Protocol):
    """A translation direction (tfm.data.directions.Direction, which imports this module)."""

    src: str | None
    tgt: str | None

TAG_OPEN, TAG_CLOSE = ">>", "<<"
_TAG = re.compile(r">>[A-Za-z][A-Za-z0-9_]{0,15}<<")  # >>de<<, >>pt_BR<<, >>zho_Hans<<

WHERE = ("none", "source_tag", "decoder_token", "source_and_decoder", "language_codes")
# The model format (tfm.model_info) that added each marking beyond format 2's.
MARKING_FORMAT = {"language_codes": 3, "source_and_decoder": 4}
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

    @property
    def by_codes(self) -> bool:
        """Whether the model names its languages by its own codes (NLLB-200, M2M100)."""
        return self.where == "language_codes"

    @property
    def decoder_start(self) -> int:
        """The token every decoder of the model starts from, stated once for tfm's search,
        the CTranslate2 export and its engine: ``</s>`` for a model of language codes (the
        target's code forced after it, as fairseq trained them), else ``<s>``."""
        return EOS_ID if self.by_codes else BOS_ID

    def find_code(self, lang: str) -> str | None:
        """``lang``, given as a code (``deu_Latn``, ``de``) or as its token (``__de__``), as
        one of the model's codes; None where it has none such."""
        if lang in self.codes:
            return lang
        bare = self._bare(lang)
        return bare if bare in self.codes else None

    def _bare(self, lang: str) -> str:
        """``lang`` without the vocabulary's spelling around a code (``__de__`` -> ``de``)."""
        prefix, _, suffix = self.spelling.partition("{}")
        return lang[len(prefix):len(lang) - len(suffix)] if (
            len(lang) > len(prefix) + len(suffix) and lang.startswith(prefix)
            and lang.endswith(suffix)) else lang

    def nearest(self, lang: str) -> str:
        """The codes nearest ``lang``, for a message: ``nearest: ...`` or a few of them."""
        lang = self._bare(lang)
        near = get_close_matches(lang, self.codes, n=5, cutoff=0.5) or [
            c for c in self.codes if c.lower().startswith(lang[:2].lower())][:5]
        return f"nearest: {', '.join(near)}" if near else f"it has {len(self.codes)}, e.g. " \
            + ", ".join(self.codes[:5])

    def code(self, lang: str, what: str) -> str:
        """``lang`` as one of the model's codes (``find_code``), refused in one line naming
        ``what`` and the nearest codes the model has (``tfm trim``'s options)."""
        found = self.find_code(lang)
        if found is None:
            raise UsageError(f"{what} {lang}: not a language code of this model "
                             f"({self.nearest(lang)})")
        return found

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



def vocabulary_tags(tok: Any) -> list[str]:
    """The ``>>xx<<`` tokens of a tokenizer's vocabulary, sorted: empty for a tokenizer of one
    target language. A tokenizer that has them makes every source sentence start with one."""
    return sorted(t for t in tok.get_vocab() if is_tag(t))


# How an edge names a side's language by default; the command line and the server word a
# LanguageError with their own option (``worded``).
SIDES = {"target": "target language", "source": "source language"}


class LanguageError(UsageError):
    """A request's language that the model lacks, or one it needs and was not given. It
    carries the ``side`` (target or source), the ``value`` given (None: none) and the
    model's ``known`` languages; its message is a template whose ``{option}`` each edge fills
    with its own name for the side (``worded``), so no label travels through the library."""

    def __init__(self, side: str, template: str, value: str | None = None,
                 known: Sequence[str] = ()) -> None:
        self.side, self.template, self.value, self.known = side, template, value, tuple(known)
        super().__init__(self.worded(SIDES[side]))

    def worded(self, option: str) -> str:
        """The message with the edge's name of the option: ``--target-lang``, ``target_lang``
        (replaced, not formatted: a value given may hold braces)."""
        return self.template.replace("{option}", option)


@dataclass(frozen=True)
class ResolvedLanguage:
    """A request's languages as one model reads them, resolved once (``ModelLanguages``):
    the marking (``where``), the languages (``target``: ``de``, ``deu_Latn``; None: none
    asked, the model's one language or each sentence's own tag), the token before each
    source text (``source_tag``) and its id (``tag_id``), the ids before each source's ids and
    after its ``</s>`` (``source_prefix``, ``source_suffix``: a model of language codes), the
    decoder's forced ``start`` (fed, never scored nor output), and the model's ``>>xx<<`` tags
    where a sentence's own tag is checked (``tags``: a model of source tags)."""

    where: str = "none"
    target: str | None = None
    source: str | None = None
    token: str | None = None  # the target language's token as the vocabulary spells it
    source_tag: str | None = None
    tag_id: int | None = None
    start: tuple[int, ...] = (BOS_ID,)
    source_prefix: tuple[int, ...] = ()
    source_suffix: tuple[int, ...] = ()
    tags: tuple[str, ...] = ()

    def source_ids(self, text_ids: Sequence[int]) -> list[int]:
        """A source text's token ids (no ``</s>``) as the model reads them: its tag, its
        language code around it, ``</s>`` (what prepare stores and a search reads)."""
        tag_ids = [self.tag_id] if self.tag_id is not None else []
        return [*tag_ids, *self.source_prefix, *map(int, text_ids), EOS_ID, *self.source_suffix]

    def text_ids(self, source_ids: Sequence[int]) -> list[int]:
        """``source_ids`` of this marking without it: the text's own ids."""
        head = (self.tag_id is not None) + len(self.source_prefix)
        return [int(t) for t in source_ids[head:len(source_ids) - 1 - len(self.source_suffix)]]

    def texts(self, sentences: list[str], first: int = 0) -> list[str]:
        """The sentences of one request as the model reads them: each with ``source_tag``
        before it. Where the model has several tags and none is asked, each sentence must
        start with its own; refused where one has none, or writes a tag anywhere else (the
        tokenizer would read it as a tag). ``first``: the number of the first sentence, for
        the messages (a stream's line)."""
        if self.source_tag is None and len(self.tags) < 2:
            return sentences  # one target language, or the tag is not the source's
        for n, sentence in enumerate(sentences, first + 1):
            self._check_own_tag(sentence.lstrip(), n)
        return [tagged(s, self.source_tag) for s in sentences]

    def _check_own_tag(self, text: str, n: int) -> None:
        own = find_tag(text)
        if own is None:
            if self.source_tag is None and text:
                names = ", ".join(map(tag_language, self.tags))
                raise LanguageError("target", "{option} is needed: this model translates into "
                                    f"{names}; give {{option}} (e.g. {{option}} "
                                    f"{tag_language(self.tags[0])}), or start each sentence "
                                    f"with its >>xx<< tag (sentence {n} has none)",
                                    None, self.tags)
            return
        if self.source_tag is not None or not text.startswith(own) or find_tag(text[len(own):]):
            given = self.source_tag is not None and text.startswith(own)
            raise LanguageError("target", f"sentence {n}: it writes the target-language tag "
                                f"{own} " + ("while {option} gives one" if given else
                                             "inside the sentence")
                                + "; the tag goes before the sentence, once", own, self.tags)
        if own not in self.tags:
            raise UsageError(f"the tag {own}: the model has no {own} token; it has "
                             f"{', '.join(map(tag_language, self.tags))}")


def mark(marking: LanguageMarking, token: str | None, token_id: Callable[[str], int | None],
         source_token: str | None = None) -> ResolvedLanguage:
    """What a model of ``marking`` reads for a translation into the language whose token is
    ``token`` (``>>de<<``, ``__de__``; None: the model's one target language, no mark): a
    source tag, a forced decoder token, or both; for a model of language codes the source's
    token (``source_token``) around the source too. ``token_id``: the target vocabulary's
    ids, None for a token it lacks (refused in one line)."""
    if token is None or marking.where == "none":
        return ResolvedLanguage(marking.where)
    if marking.by_codes:
        src = _token_id(token_id, source_token, "source")  # type: ignore[arg-type]
        before, after = ((src,), ()) if marking.source_code == "prefix" else ((), (src,))
        return ResolvedLanguage(marking.where, token=token,
                                start=(marking.decoder_start, _token_id(token_id, token)),
                                source_prefix=before, source_suffix=after)
    source_tag = token if marking.in_source else None
    start = (marking.decoder_start, _token_id(token_id, token)) if marking.in_decoder \
        else (marking.decoder_start,)
    return ResolvedLanguage(marking.where, token=token, source_tag=source_tag, start=start)


def _token_id(token_id: Callable[[str], int | None], token: str, side: str = "target") -> int:
    ident = token_id(token)
    if ident is None:
        raise LanguageError(side, f"{{option}} {tag_language(token)}: the model has no {token} "
                            "token", token)
    return ident


@dataclass(frozen=True)
class ModelLanguages:
    """The languages of one model, from its metadata and vocabulary: the resolver of a
    request's languages. ``tags``: the tokens of the languages it translates into, sorted,
    where its marking puts them (``>>xx<<`` tags; a model of language codes: its codes as its
    vocabulary spells them); ``token_id`` and ``source_id``: the target and source
    vocabularies' ids; ``src_lang`` and ``tgt_lang``: the languages the model records, which
    a model of language codes takes where a request gives none; ``sources``: the source
    languages of a multilingual model's directions (``en-fr``, ``de-fr``: en, de).

    A language is given by its code or by its English name as tfm.data.language_names has it
    (and the server's page shows it): "German", "german (latin)", "German (Latin) (deu_Latn)",
    any case; a name that fits several of the model's languages is refused listing them."""

    marking: LanguageMarking
    tags: tuple[str, ...]
    token_id: Callable[[str], int | None]
    source_id: Callable[[str], int | None]
    src_lang: str | None = None
    tgt_lang: str | None = None
    sources: tuple[str, ...] = ()

    @classmethod
    def of(cls, vocabs: Any, marking: LanguageMarking | None = None,
           src_lang: str | None = None, tgt_lang: str | None = None,
           directions: Sequence[str] = ()) -> ModelLanguages:
        """A model's languages from its vocabularies (tfm.data.tokenizer.Vocabularies), its
        recorded marking (None: none recorded, inferred from the source vocabulary's tags:
        ``LanguageMarking.infer``) and its directions (``en-de``)."""
        marking = marking or LanguageMarking.infer(vocabulary_tags(vocabs.src))
        if marking.by_codes:
            tags = sorted(marking.token(code) for code in marking.codes)
        else:
            tags = vocabulary_tags(vocabs.src if marking.in_source else vocabs.tgt)
        sources = sorted({d.split("-")[0] for d in directions if "-" in d})
        return cls(marking, tuple(tags), vocabs.tgt.token_to_id, vocabs.src.token_to_id,
                   src_lang, tgt_lang, tuple(sources))

    @property
    def source_languages(self) -> list[str]:
        """The languages the model translates from, where known: a model of language codes'
        codes, a multilingual model's directions' sources, else its one recorded source
        language (none where it records none)."""
        if self.marking.by_codes:
            return sorted(self.marking.codes)
        return list(self.sources) or ([self.src_lang] if self.src_lang else [])

    @property
    def targets(self) -> list[str]:
        """The languages a request may ask for (``xx`` of ``>>xx<<``; a model's own codes),
        sorted; empty for a model of one target language."""
        if self.marking.by_codes:
            return sorted(self.marking.codes)
        return [tag_language(token) for token in self.tags]

    @property
    def needs_source(self) -> bool:
        """Whether a request names its source language too (a model of language codes)."""
        return self.marking.by_codes

    def resolve(self, target: str | None, source: str | None = None) -> ResolvedLanguage:
        """A request's languages (``fr`` or ``>>fr<<``; a model of language codes: its codes,
        ``deu_Latn``, or their tokens, ``__de__``) as the model reads them; None: none asked
        (a model of one target language, or sentences that carry their own tags). Raises
        LanguageError for a language the model lacks or needs and is not given. Either may
        be given by its name (the class's docstring)."""
        if target is not None:
            target = _named("target", target, self.targets)
        if source is not None:
            source = _named("source", source, self.source_languages, lenient=True)
        if self.marking.by_codes:
            return self._coded(target, source)
        if target is None:
            if self.marking.in_decoder and len(self.tags) > 1:
                raise LanguageError("target", "{option} is needed: this model translates into "
                                    f"{', '.join(self.targets)}", None, self.tags)
            return ResolvedLanguage(self.marking.where, source=source,
                                    tags=self.tags if self.marking.in_source else ())
        token = self._tag(target)
        resolved = mark(self.marking, token, self.token_id)
        tag_id = self.source_id(token) if resolved.source_tag is not None else None
        return replace(resolved, target=tag_language(token), source=source, tag_id=tag_id,
                        tags=self.tags if resolved.source_tag is not None else ())

    def direction(self, direction: _Direction) -> ResolvedLanguage:
        """A direction of the model's training data, resolved as a request into its target
        language (from its source language, for a model of language codes)."""
        return self.resolve(direction.tgt, direction.src)

    def _tag(self, lang: str) -> str:
        """``>>lang<<`` (``lang`` given with or without the brackets), refused where the
        model has no such token."""
        token = lang if is_tag(lang) else tag(lang)
        if token in self.tags:
            return token
        if not self.tags:
            raise LanguageError("target", f"{{option}} {lang}: this model has no "
                                "target-language tokens (it translates into one language)",
                                lang)
        raise LanguageError("target", f"{{option}} {lang}: the model has no {token} token; it "
                            f"has {', '.join(self.targets)}", lang, self.tags)

    def _coded(self, target: str | None, source: str | None) -> ResolvedLanguage:
        """A model of language codes: both languages (the model's own, where recorded, when
        not given), each refused where unknown or missing."""
        marking = self.marking
        codes = {}
        for side, lang in (("target", target if target is not None else self.tgt_lang),
                           ("source", source if source is not None else self.src_lang)):
            if lang is None:
                raise LanguageError(side, "{option} is needed: this model translates between "
                                    f"{len(marking.codes)} languages, named by its own codes "
                                    f"(e.g. {{option}} {marking.codes[0]})", None,
                                    marking.codes)
            codes[side] = marking.find_code(lang)
            if codes[side] is None:
                raise LanguageError(side, f"{{option}} {lang}: not a language code of this "
                                    f"model ({marking.nearest(lang)})", lang, marking.codes)
        resolved = mark(marking, marking.token(codes["target"]), self.token_id,
                        marking.token(codes["source"]))
        return replace(resolved, target=codes["target"], source=codes["source"])


def _named(side: str, lang: str, codes: Sequence[str], lenient: bool = False) -> str:
    """The code of ``codes`` that ``lang`` names (its code or its name: language_names),
    or ``lang`` as given where none does (the caller refuses it, naming the model's
    languages). A name of several is refused listing them. ``lenient`` (a source language,
    which a model of tags does not check): a name the model's languages lack is still read
    as the language's own code where the table knows it (German: de)."""
    found = matching(lang, list(codes))
    if len(found) > 1:
        raise LanguageError(side, f"{{option}} {lang}: the name of {len(found)} of this "
                            f"model's languages: {', '.join(map(labelled, found))}; give one "
                            "of them", lang, tuple(codes))
    if found:
        return found[0]
    return (code_of(lang) or lang) if lenient else lang
