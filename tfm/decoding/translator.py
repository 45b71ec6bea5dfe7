"""The Translator interface: sentences in, translations out, whatever engine decodes.

``translate``, ``eval`` and the server speak only to this interface. It does the text-level work
every engine shares: normalises the input as ``prepare`` did, tokenizes it with the model's own
tokenizer, truncates what the model cannot take, sorts the sentences by length into token-sized
batches (little padding), and returns the results in input order, each on one line. An engine
supplies only ``search``: token ids in, hypotheses out. Engines: tfm's own PyTorch search
(tfm.decoding.torch_engine) and CTranslate2 (tfm.decoding.ctranslate2_engine).

tfm.decoding.engines.load_translator picks the engine from what the directory holds.
"""

from __future__ import annotations

import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from pathlib import Path
from typing import Any, Protocol

from tfm.config import SearchOptions
from tfm.data.language_marks import ModelLanguages, ResolvedLanguage
from tfm.data.lexical_alignment import Lexicon, load_lexicon
from tfm.data.tokenizer import Vocabularies, decode, encode_batch, text_normalizer
from tfm.decoding.alignment import align_words
from tfm.decoding.constraints import (
    ConstraintError,
    ConstraintSpec,
    TargetConstraints,
    compile_constraints,
)
from tfm.decoding.mbr import mbr_order
from tfm.decoding.rules import Hypothesis, length_limit
from tfm.decoding.workers import Workers
from tfm.errors import OptionError, UsageError
from tfm.model_info import ModelInfo
from tfm.special_tokens import BOS_ID, EOS_ID

__all__ = ["Reranker", "SearchOptions", "Source", "Translation", "Translator"]

# Characters that str.splitlines() and most tools treat as line breaks.
_LINE_BREAKS = re.compile("[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]")


def _one_line(text: str) -> str:
    """A translation on one line: a model can generate a line-break byte, which would shift
    every following line of the output against its input."""
    return _LINE_BREAKS.sub(" ", text)


@dataclass
class Source:
    """A sentence as the model reads it (``Translator.prepare``)."""

    sentence: str  # as given
    ids: list[int]  # token ids ending with EOS; empty when there is nothing to translate
    truncated: bool = False  # longer than the model takes, and cut
    constraints: TargetConstraints | None = None  # phrases and prefix its translation must have
    # The tokens its decoder is fed before the search chooses any: never scored, never output
    # (tfm.decoding.steps.decoder_start; a target-language token after <s>, say).
    start: tuple[int, ...] = (BOS_ID,)

    @property
    def tokens(self) -> int:
        """Source tokens the model reads (EOS included; 0 for nothing to translate)."""
        return len(self.ids)


@dataclass
class Translation:
    source: str
    hypotheses: list[tuple[str, float]]  # (text, score), best first
    truncated: bool = False  # the source was longer than the model accepts
    # With SearchOptions.attention, for the best hypothesis: the BPE symbols of both sides
    # (source with its end-of-sentence token), cross-attention (target x source symbols) and
    # word alignments as (source word, target word) pairs.
    source_symbols: list[str] | None = None
    target_symbols: list[str] | None = None
    attention: list[list[float]] | None = None
    alignment: list[tuple[int, int]] | None = None
    target_tokens: int = 0  # BPE tokens of the best hypothesis (EOS not counted)
    # With constraint phrases: for each, (phrase, whether the translation contains it, the
    # glossary source term that asked for it or None); and for each hypothesis, whether it
    # contains them all.
    constraints: list[tuple[str, bool, str | None]] | None = None
    hypotheses_met: list[bool] | None = None

    @property
    def constraints_met(self) -> bool | None:
        """Whether the translation contains every constraint phrase (None: it had none)."""
        return None if self.constraints is None else all(m for _, m, _ in self.constraints)

    @property
    def text(self) -> str:
        return self.hypotheses[0][0]


class Reranker(Protocol):
    """Scores by which a sentence's beam hypotheses are ranked anew (tfm.decoding.rerank)."""

    def rescore(self, sources: list[str], hypotheses: list[list[str]],
                scores: list[list[float]]) -> list[list[float]]:
        """For each source sentence, a score for each of its hypotheses (texts), given the
        search's scores of them (length-normalised log-probabilities): higher is better."""


class Translator(ABC):
    """A loaded model, ready to translate. Subclasses set ``vocabs``, ``info``,
    ``max_source_tokens`` and implement ``search``."""

    engine: str = ""  # a short name for reports: "tfm", "ctranslate2"
    supports_attention: bool = False  # whether search can return cross-attention
    supports_phrases: bool = True  # whether search can honour constraint phrases (not prefixes)
    vocabs: Vocabularies
    info: ModelInfo
    max_source_tokens: int  # longest source the model takes, EOS included
    _workers: Workers | None = None
    # Ranks each sentence's beam hypotheses anew (tfm.decoding.rerank); None: by their scores.
    reranker: Reranker | None = None
    _languages: ModelLanguages | None = None
    lexicon_dir: Path | None = None  # the model directory whose alignment lexicon is read

    @cached_property
    def lexicon(self) -> Lexicon | None:
        """The model's alignment lexicon (tfm.data.lexical_alignment), which places a
        document's tags by its words instead of the attention; None: the model has none.
        Read at first use: plain text never needs it."""
        return None if self.lexicon_dir is None else load_lexicon(self.lexicon_dir)

    @abstractmethod
    def search(self, batch: list[list[int]], options: SearchOptions,
               constraints: list[TargetConstraints | None] | None = None,
               start: list[tuple[int, ...]] | None = None) -> list[list[Hypothesis]]:
        """The hypotheses (best first, ``options.n_best`` of them) of each source in
        ``batch``: token ids ending with EOS, sorted by length, at most
        ``options.batch_tokens`` source tokens x beam in all. ``constraints``: one per source
        (None: none), given only when some source has any; an engine that cannot honour
        them raises UsageError. ``start``: one per source, all of one length, the tokens its
        decoder is fed before the search (Source.start), given only where some source's are
        more than ``<s>`` alone."""

    @property
    def workers(self) -> Workers:
        """The threads that decode the batches of one ``translate`` call, and the server's
        batches (tfm.decoding.workers): this translator's own, one unless the engine made
        more."""
        if self._workers is None:
            self._workers = Workers(1)
        return self._workers

    @workers.setter
    def workers(self, workers: Workers) -> None:
        self._workers = workers

    def close(self) -> None:
        """Done with decoding: the workers' threads stopped, and the thread that loaded the
        model given back its CPU threads (Workers.close). The translator may decode again
        (its workers start anew), as one loaded with one worker would."""
        if self._workers is not None:
            self._workers.close()

    def no_phrases(self) -> str:
        """Why an engine without ``supports_phrases`` refuses constraint phrases: the one
        wording, for a request (``prepare``) and for a search given them."""
        return (f"the {self.engine} engine cannot make a translation contain given phrases: "
                "use a tfm model directory (a prefix alone works)")

    def forced_log_probs(self, sources: list[list[int]], targets: list[list[int]],
                         batch_tokens: int = 2048) -> list[list[float]]:
        """log P of each target token and of the closing EOS given its source, by teacher
        forcing: ``sources`` as ``prepare`` makes them (token ids ending with EOS), ``targets``
        target token ids without EOS; batches of about ``batch_tokens`` source + target tokens
        where the engine batches itself. What ``score`` computes on."""
        raise UsageError(f"the {self.engine} engine cannot score translations")

    def score(self, sources: Sequence[str], targets: Sequence[str], batch_tokens: int = 2048
              ) -> list[tuple[float, int]]:
        """log P(target | source) of each pair of texts under the model (an ensemble: the log
        of its members' mean probability at each position), and the target's length in
        tokens, EOS included: forced decoding. Both sides are read as ``prepare`` reads a
        source (normalised, truncated to what the model takes)."""
        if len(sources) != len(targets):
            raise ValueError(f"{len(sources)} sources but {len(targets)} targets")
        if self.languages.needs_source:
            raise UsageError("scoring pairs of texts needs their languages, which a model of "
                             "language codes (NLLB-200, M2M100) is not given here: it cannot "
                             "be a --reverse-model")
        limit = self.max_source_tokens - 1  # room for EOS (the source's) or BOS (the target's)
        src_norm, tgt_norm = text_normalizer(self.vocabs.src), text_normalizer(self.vocabs.tgt)
        src_ids = [x[:limit] + [EOS_ID] for x in encode_batch(
            self.vocabs.src, [src_norm(s) for s in sources])] if sources else []
        tgt_ids = [y[:limit] for y in encode_batch(
            self.vocabs.tgt, [tgt_norm(t) for t in targets])] if targets else []
        return [(sum(log_probs), len(log_probs))
                for log_probs in self.forced_log_probs(src_ids, tgt_ids, batch_tokens)]

    def describe(self) -> dict[str, Any]:
        """What /v1/info and reports show of the engine."""
        return {"engine": self.engine}

    def default_options(self, **overrides: Any) -> SearchOptions:
        """SearchOptions from the model's generation defaults and the options the user gave
        (None: not given). A length penalty given for greedy search is refused: greedy search
        compares no hypotheses of different lengths, so the penalty would change nothing."""
        g = self.info.generation
        values = dict(beam=g.beam, length_penalty=g.length_penalty, max_len_a=g.max_len_a,
                      max_len_b=g.max_len_b)
        given = {k: v for k, v in overrides.items() if v is not None}
        values.update(given)
        if values["beam"] == 1 and "length_penalty" in given:
            raise OptionError("length_penalty", "has no effect on greedy search (beam 1): "
                              "drop it, or give a beam of 2 or more")
        options = SearchOptions(**values)
        if options.attention and not self.supports_attention:
            raise UsageError(f"the {self.engine} engine gives no attention weights: "
                             "--alignments, --show-attention and --plot need a tfm model "
                             "directory")
        return options

    @property
    def languages(self) -> ModelLanguages:
        """The model's languages (tfm.data.language_marks), read once from its metadata and
        vocabulary: what a request's ``target_lang`` and ``source_lang`` resolve against
        (``languages.resolve``), at the edge, into the ``ResolvedLanguage`` that ``prepare``
        takes."""
        if self._languages is None:
            info = self.info
            self._languages = ModelLanguages.of(self.vocabs, info.language_marking,
                                                info.src_lang, info.tgt_lang, info.directions)
        return self._languages

    def prepare(self, sentences: list[str],
                constraints: Sequence[ConstraintSpec | None] | None = None,
                options: SearchOptions | None = None,
                language: ResolvedLanguage | None = None, first: int = 0) -> list[Source]:
        """Each sentence as the model will read it: normalised, tokenized, truncated to what
        the model takes, ending with EOS (and its language marks). ``translate`` is
        ``translate_prepared(prepare(...))``; the server prepares in its request handlers (it
        needs each sentence's length to fill batches) and decodes the prepared sources, so no
        sentence is tokenized twice. ``constraints``: one per sentence (None: none), compiled
        and checked against the length limits of ``options`` (ConstraintError, with the
        sentence's position). ``language``: the request's languages, resolved once by the caller
        (``languages.resolve``), applied as the model marks them: the sentences' tags (checked,
        counting them from ``first``), the codes around their ids, the decoder's start. None:
        none resolved, each sentence read as written (its own tag, if any, unchecked)."""
        if language is None:
            language = replace(self.languages.resolve(None), tags=())
        sentences = language.texts(list(sentences), first)
        before, after = list(language.source_prefix), list(language.source_suffix)
        limit = self.max_source_tokens - 1 - len(before) - len(after)  # room for EOS, marks
        normalize = text_normalizer(self.vocabs.src)
        texts = [normalize(s) for s in sentences]
        ids = encode_batch(self.vocabs.src, texts) if texts else []
        # Nothing to translate: an empty text, or one of which a SentencePiece segmenter
        # leaves no piece (only spaces; tfm's own normalisation would have stripped them).
        sources = [Source(sentence, before + x[:limit] + [EOS_ID] + after if text and x else [],
                          len(x) > limit, start=language.start)
                   for sentence, text, x in zip(sentences, texts, ids)]
        if constraints is not None:
            self._constrain(sources, constraints, options or self.default_options())
        return sources

    def _constrain(self, sources: list[Source], specs: Sequence[ConstraintSpec | None],
                   options: SearchOptions) -> None:
        if len(specs) != len(sources):
            raise ValueError(f"{len(specs)} constraint specs for {len(sources)} sentences")
        for i, (source, spec) in enumerate(zip(sources, specs)):
            if not spec:
                continue
            if spec.phrases or spec.glossary_hits:
                problem = None
                if not self.supports_phrases:
                    problem = self.no_phrases()
                elif options.beam == 1:
                    problem = ("constraint phrases need beam search: give a beam of 2 or more "
                               "(a prefix alone works with greedy search)")
                if problem is not None:
                    error = ConstraintError("constraints", problem)
                    error.sentence = i
                    raise error
            longest = length_limit(max(1, source.tokens), options.max_len_a,
                                   options.max_len_b, self.max_source_tokens)
            try:
                source.constraints = compile_constraints(self.vocabs.tgt, spec, longest - 1)
            except ConstraintError as e:
                e.sentence = i
                raise

    def translate(self, sentences: list[str], options: SearchOptions,
                  progress: Callable[[int], None] | None = None,
                  constraints: Sequence[ConstraintSpec | None] | None = None,
                  language: ResolvedLanguage | None = None) -> list[Translation]:
        """Translations of ``sentences``, in the same order. ``progress``, if given, is called
        with the number of sentences each time a batch of them is done. ``constraints``: one
        per sentence, or None (tfm.decoding.constraints); ``language`` as ``prepare``
        takes it."""
        sources = self.prepare(sentences, constraints, options, language)
        return self.translate_prepared(sources, options, progress)

    def translate_prepared(self, sources: list[Source], options: SearchOptions,
                           progress: Callable[[int], None] | None = None
                           ) -> list[Translation]:
        """Translations of sources from ``prepare``, in the same order (``progress``: as for
        ``translate``; empty sources count as done at once)."""
        results: list[Translation | None] = [None] * len(sources)
        for i, source in enumerate(sources):
            if not source.ids:  # nothing to translate: an empty line stays an empty line
                results[i] = Translation(source.sentence, [("", 0.0)])
                _report_constraints(results[i], source.constraints, [[]])
        pending = [i for i in range(len(sources)) if results[i] is None]
        if progress is not None and len(pending) < len(sources):
            progress(len(sources) - len(pending))
        ids = [source.ids for source in sources]
        starts = [len(source.start) for source in sources]
        for batch, found in self._search_batches(list(_batches(ids, starts, pending, options)),
                                                 sources, options):
            for i, (hyps, texts, scores) in zip(batch, found):
                order = self._order(hyps, texts, scores, options)[:options.n_best]
                hyps, texts = [hyps[k] for k in order], [texts[k] for k in order]
                result = Translation(
                    sources[i].sentence, [(t, h.score) for t, h in zip(texts, hyps)],
                    sources[i].truncated, target_tokens=len(hyps[0].tokens))
                _report_constraints(result, sources[i].constraints, [h.tokens for h in hyps])
                if options.attention:
                    self._attach_attention(result, ids[i], hyps[0])
                results[i] = result
            if progress is not None:
                progress(len(batch))
        return [r for r in results if r is not None]

    def _order(self, hyps: list[Hypothesis], texts: list[str], scores: list[float],
               options: SearchOptions) -> list[int]:
        """The order in which a sentence's hypotheses are returned: MBR's, with ``scores`` as
        the hypotheses' scores; else by ``scores`` when a reranker gave them; else the
        search's (best score first, those that meet their constraints before those that do
        not)."""
        if options.mbr:
            order = mbr_order(texts, scores, [len(h.tokens) + 1 for h in hyps], options.mbr)
        elif self.reranker is not None:
            order = sorted(range(len(hyps)), key=lambda k: (-scores[k], k))
        else:
            return list(range(len(hyps)))
        # Hypotheses that miss a constraint phrase (cut by the length limit) come last.
        return sorted(order, key=lambda k: not hyps[k].complete)

    def _search_texts(self, batch: list[int], sources: list[Source], options: SearchOptions
                      ) -> list[tuple[list[Hypothesis], list[str], list[float]]]:
        """For each source of ``batch`` (positions in ``sources``): its hypotheses, their
        texts, and the scores they are ranked by (the reranker's where there is one). MBR and
        reranking choose among all the beam's hypotheses, then keep the n_best first."""
        if options.mbr or self.reranker is not None:
            options = replace(options, n_best=options.beam)
        constraints = [sources[i].constraints for i in batch]
        start = [sources[i].start for i in batch]
        given: dict[str, Any] = {}  # what an engine is given only where some source has it
        if any(c is not None for c in constraints):
            given["constraints"] = constraints
        if any(s != (BOS_ID,) for s in start):
            given["start"] = start
        found = self.search([sources[i].ids for i in batch], options, **given)
        texts = [[_one_line(decode(self.vocabs.tgt, h.tokens)) for h in hyps] for hyps in found]
        scores = [[h.score for h in hyps] for hyps in found]
        if self.reranker is not None:
            scores = self.reranker.rescore([sources[i].sentence for i in batch], texts, scores)
        return list(zip(found, texts, scores))

    def _search_batches(self, batches: list[list[int]], sources: list[Source],
                        options: SearchOptions
                        ) -> Iterator[tuple[list[int], list[tuple[list[Hypothesis], list[str],
                                                                   list[float]]]]]:
        """Each batch (positions in ``sources``) with what ``_search_texts`` finds for it,
        decoded by the workers (``Workers.map``: with several, side by side, each as it ends).
        Each sentence's result is the one it gets alone: the search is batch-invariant, and
        the batches are the same whatever the number of workers."""
        return self.workers.map(lambda batch: self._search_texts(batch, sources, options),
                                batches)

    def _attach_attention(self, result: Translation, src_ids: list[int],
                          best: Hypothesis) -> None:
        result.source_symbols = [self.vocabs.src.id_to_token(i) for i in src_ids]  # ends </s>
        result.target_symbols = [self.vocabs.tgt.id_to_token(i) for i in best.tokens]
        result.attention = [row[: len(src_ids)] for row in best.attention or []]
        result.alignment = align_words(result.attention, result.source_symbols[:-1],
                                       result.target_symbols)


def _report_constraints(result: Translation, constraints: TargetConstraints | None,
                        outputs: list[list[int]]) -> None:
    """Which phrases the translation (its first hypothesis) and each hypothesis contain."""
    if constraints is None or not constraints.phrases:
        return
    met = [constraints.met(tokens) for tokens in outputs]
    result.constraints = [(p.text, m, p.source_term)
                          for p, m in zip(constraints.phrases, met[0])]
    result.hypotheses_met = [all(m) for m in met]


def _batches(ids: list[list[int]], starts: list[int], positions: list[int],
             options: SearchOptions) -> Iterator[list[int]]:
    """``positions`` grouped by length so that (rows x longest x beam) <= batch_tokens, each
    batch's sources with as many forced start tokens (``starts``) as each other."""
    for forced in sorted({starts[i] for i in positions}):
        yield from length_batches([len(x) * options.beam for x in ids],
                                  [i for i in positions if starts[i] == forced],
                                  options.batch_tokens)


def length_batches(lengths: Sequence[int], positions: Iterable[int], batch_tokens: int
                   ) -> Iterator[list[int]]:
    """``positions`` (indices into ``lengths``) sorted by length and grouped so that rows x the
    longest row stays within ``batch_tokens`` (a longer row alone makes a batch of one)."""
    batch: list[int] = []
    for i in sorted(positions, key=lambda i: lengths[i]):
        if batch and lengths[i] * (len(batch) + 1) > batch_tokens:
            yield batch
            batch = []
        batch.append(i)
    if batch:
        yield batch
