"""CTranslate2 as a Translator engine: decodes a ``tfm export --to ctranslate2`` directory.

tfm.decoding.translator does the text-level work (normalising, tokenizing, batching, output);
this engine hands CTranslate2 token strings and maps tfm's SearchOptions onto its options.

By default a batch is decoded in one call of CTranslate2's own search, at CTranslate2's speed,
under the rules of tfm.decoding.rules where CTranslate2 takes them (``_one_pass``): the same
greedy outputs as tfm's search, and the same best hypothesis of a beam without a length
penalty; with one, CTranslate2 stops by its own rule and the hypotheses can differ.

With ``exact`` (``tfm translate --exact-search``), it finds what tfm's own search
(tfm.decoding.search) finds, in up to three passes:

* Source tokens go in as they are (ending with ``</s>``; the export tells CTranslate2 to add
  nothing) and decoding starts from ``<s>``.
* ``<pad>``, ``<unk>`` and ``<s>`` are never emitted. They are given to CTranslate2 as extra
  end tokens rather than disabled: disabling renormalises the softmax over the tokens left,
  tfm's search does not, and the scores would drift apart. A hypothesis that ends on one of
  them is dropped; when one would have been returned, the sentence is decoded again with the
  tokens disabled (rare: a trained model gives them almost no probability).
* Scores are tfm's: the sum of log-probabilities, EOS included, divided by
  (tokens + 1) ** length_penalty (1 for greedy search); CTranslate2 normalises the same way
  once told to keep the end token in the hypothesis, and the n-best are ranked here.
* Length limits are per sentence, as in tfm: floor(max_len_a * source length + max_len_b)
  tokens, EOS included, capped at the model's max_positions. CTranslate2 has one limit per
  call, so a batch is decoded with its largest limit, and the sentences whose search reached
  their own limit are decoded again with it (see ``search``). Where tfm
  forces EOS at the limit, CTranslate2 cuts the hypothesis; such hypotheses (and all of them
  when ``min_len`` disabled EOS for a while) are rescored with CTranslate2's teacher-forced
  scoring, which gives exactly tfm's log-probabilities, and a beam search that reached the
  limit is run again keeping every hypothesis it finds, so that the rescored ones are ranked
  among all.
* Greedy search is tfm's exactly, scores included (also at the length limit and with
  ``min_len``). Beam search expands the same beams as tfm's (the k best candidates that do
  not end) and finishes the same hypotheses; the two differ only in when they stop, which
  CTranslate2 does not let a caller decide. Without a length penalty, with one best asked
  for and ``stop_early``, CTranslate2 stops where tfm does (once the best candidate ends),
  so the best hypothesis is the same. Otherwise it collects finished hypotheses until
  2 x beam have ended (patience 2; with patience 1, CTranslate2's default, it sometimes stops
  before the best has ended), while tfm stops once no live beam, ended now, would beat its worst
  needed hypothesis: with a length penalty, CTranslate2 sometimes finds a better best
  hypothesis that tfm had stopped before reaching, and the hypotheses below the best of an
  n-best list may differ either way (docs/CLI.md has the counts). At the length limit
  CTranslate2 keeps its k best candidates of the last step where tfm keeps all k live
  beams. Without ``stop_early`` tfm stops once beam hypotheses have ended (fairseq's rule),
  which is CTranslate2's patience 1: the exact search asks for that, and finds tfm's
  hypotheses.
* Precision: ``int8`` (CPU) computes with int8 weights (``int8_float32``), ``fp32`` in
  float32, ``bf16``/``fp16`` in bfloat16/float16 where CTranslate2 supports it on the device
  (an error otherwise), ``auto`` in bfloat16 (else float16) on CUDA and float32 on CPU unless
  CTranslate2 computes bfloat16 there and the CPU has native bf16. An export stored in int8
  or int16 keeps its integer weights: int8 with the chosen float type around it
  (int8_float32, int8_bfloat16, ...).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tfm.config import SearchOptions
from tfm.data.tokenizer import load_vocabularies
from tfm.decoding import rules
from tfm.decoding.constraints import TargetConstraints
from tfm.decoding.rules import (
    NEVER_EMITTED,
    Hypothesis,
    StepRule,
    counted,
    hypothesis,
    length_limit,
    length_penalty_of,
    rank,
    score,
)
from tfm.decoding.translator import Translator
from tfm.decoding.workers import Workers, cpu_threads
from tfm.device import PRECISIONS, cpu_has_native_bf16
from tfm.errors import ModelError, UsageError
from tfm.extras import require
from tfm.interop.common import read_export_info
from tfm.layout import TOKENIZER_FILE
from tfm.model_info import ModelInfo
from tfm.special_tokens import EOS, UNK_ID

FORMAT = "ctranslate2"
MODEL_FILE = "model.bin"
_PATIENCE = 2  # see _translate
_FLOAT_TYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def is_export(path: Path) -> bool:
    """Whether ``path`` is a CTranslate2 export written by tfm."""
    path = Path(path)
    if not (path / MODEL_FILE).is_file():
        return False
    record = read_export_info(path)
    return isinstance(record, dict) and record.get("format") == FORMAT


class CTranslate2Translator(Translator):
    """A loaded CTranslate2 export."""

    engine = "ctranslate2"
    supports_attention = True
    supports_phrases = False  # CTranslate2 has no constrained search; prefixes it takes

    def __init__(self, path: Path, device: str = "auto", precision: str = "fp32",
                 exact: bool = False, workers: int | None = None) -> None:
        """``exact``: find what tfm's own search finds (see the module's docstring), in
        several passes; else CTranslate2's own beam search in one pass, at its speed.
        ``workers``: batches handed to CTranslate2 at once (None: one; it decodes each with
        its own CPU threads, and torch's are not involved)."""
        ct2 = require("ctranslate2", "export")
        self.workers = Workers(workers or 1, share_cpu_threads=False)
        self.path, self.exact = Path(path), exact
        self.lexicon_dir = self.path
        path = Path(path)
        record = read_export_info(path)
        if record is None or record.get("format") != FORMAT:
            raise ModelError(f"{path}: not a CTranslate2 export of tfm (no {FORMAT} "
                             "tfm_export.json); write one with `tfm export --to ctranslate2`")
        self.info = _model_info(path, record)
        self.vocabs = load_vocabularies(path / TOKENIZER_FILE)
        self.max_source_tokens = self.info.model.max_positions
        self.quantization = record.get("quantization") or "float32"
        self.device, device_index = _device(ct2, device)
        self.compute_type = _compute_type(ct2, self.device, precision, self.quantization)
        try:
            self.translator = ct2.Translator(str(path), device=self.device,
                                             device_index=device_index,
                                             compute_type=self.compute_type,
                                             intra_threads=_cpu_threads())
        except (RuntimeError, ValueError) as e:
            raise ModelError(f"{path}: CTranslate2 cannot load this export "
                             f"({str(e).splitlines()[0] if str(e) else type(e).__name__})"
                             ) from e
        self._src_tokens = [self.vocabs.src.id_to_token(i)
                            for i in range(self.vocabs.src.get_vocab_size())]
        self._tgt_tokens = [self.vocabs.tgt.id_to_token(i)
                            for i in range(self.vocabs.tgt.get_vocab_size())]
        self._tgt_ids = {token: i for i, token in enumerate(self._tgt_tokens)}
        self._never_emitted = [self._tgt_tokens[i] for i in NEVER_EMITTED]

    def describe(self) -> dict[str, Any]:
        return {"engine": self.engine, "device": self.device, "precision": self.compute_type,
                "quantization": self.quantization,
                "search": "tfm's (exact)" if self.exact else "CTranslate2's"}

    # --- search -------------------------------------------------------------------------------

    def search(self, batch: list[list[int]], o: SearchOptions,
               constraints: list[TargetConstraints | None] | None = None,
               start: list[tuple[int, ...]] | None = None) -> list[list[Hypothesis]]:
        forced = self._forced(start, len(batch))
        skip = len(forced[0]) if forced else 0
        limits = [length_limit(len(ids), o.max_len_a, o.max_len_b,
                               self.info.model.max_positions - skip) for ids in batch]
        sources = [[self._src_tokens[i] for i in ids] for ids in batch]
        decode = self._exact_group if self.exact else self._one_pass
        prefixes = self._prefixes(constraints)
        if not skip:
            outcomes = self._by_limit(sources, limits, o, prefixes, decode)
            return [outcome.hyps[: o.n_best] for outcome in outcomes]
        # The forced tokens after <s> go to CTranslate2 as the start of each target prefix;
        # every length counts them there. They are taken off the hypotheses found, which are
        # scored anew by teacher forcing without them.
        prefixes = [f + (prefixes[i] if prefixes else []) for i, f in enumerate(forced)]
        outcomes = self._by_limit(sources, [limit + skip for limit in limits],
                                  replace(o, min_len=o.min_len + skip), prefixes, decode)
        found = [(i, h) for i, outcome in enumerate(outcomes) for h in outcome.hyps]
        for _, h in found:
            h.tokens = h.tokens[skip:]
            h.attention = None if h.attention is None else h.attention[skip:]
        log_probs = self._log_probs([sources[i] for i, _ in found],
                                    [h.tokens for _, h in found], [forced[i] for i, _ in found])
        for (_, h), log_prob in zip(found, log_probs):
            h.log_prob = log_prob
        return [hyps[: o.n_best] for hyps in (outcome.hyps for outcome in
                                              self._ranked(outcomes, o, skip + 1))]

    def _forced(self, start: list[tuple[int, ...]] | None, sentences: int
                ) -> list[list[str]] | None:
        """Each sentence's forced decoder tokens after the start token (CTranslate2's
        decoder_start_token, which it feeds itself: ``<s>``, or ``</s>`` for a model of
        language codes) as target tokens; None where there are none."""
        first = self._start_id
        if start is None or all(len(s) == 1 for s in start):
            if start is not None and any(s[0] != first for s in start):
                raise UsageError("the ctranslate2 export starts every decoder from "
                                 f"{self._tgt_tokens[first]}")
            return None
        if len(start) != sentences or len({len(s) for s in start}) != 1 or any(
                s[0] != first for s in start):
            raise ValueError("start: one tuple per sentence, all of one length, from "
                             f"{self._tgt_tokens[first]}")
        return [[self._tgt_tokens[i] for i in s[1:]] for s in start]

    @property
    def _start_id(self) -> int:
        """The id of the token CTranslate2 starts each decoder from (decoder_start_token, as
        the export wrote it: the model's ``LanguageMarking.decoder_start``)."""
        return self.languages.marking.decoder_start

    def _prefixes(self, constraints: list[TargetConstraints | None] | None
                  ) -> list[list[str]] | None:
        """Each sentence's forced prefix as target tokens, or None when none has one.
        CTranslate2 has no constrained search: Translator refuses phrases before they come
        here (``supports_phrases``)."""
        if constraints is None:
            return None
        if any(c is not None and c.phrases for c in constraints):
            raise UsageError(self.no_phrases())
        prefixes = [[self._tgt_tokens[i] for i in c.prefix] if c is not None else []
                    for c in constraints]
        return prefixes if any(prefixes) else None

    def _by_limit(self, sources: list[list[str]], limits: list[int], o: SearchOptions,
                  prefixes: list[list[str]] | None, decode: _Decode) -> list[_Outcome]:
        """Each sentence decoded by ``decode`` as it would be alone, in few calls. CTranslate2
        has one length limit per call and pays a fixed cost per decoding step and call (many
        small calls are slower than one: docs/BENCHMARKS.md), so the batch is decoded with its
        largest limit, and a sentence whose search reached its own, smaller limit is decoded
        again with it (one that ended before found what a search with its limit finds). With
        attention, each call holds sources of one length (and so one limit): CTranslate2's
        attention rows of a padded source are not tfm's."""
        groups: dict[int, list[int]] = defaultdict(list)
        for row, source in enumerate(sources):
            groups[len(source) if o.attention else 0].append(row)
        outcomes: list[_Outcome] = [_Outcome([], _Pass())] * len(sources)
        for rows in groups.values():
            top = max(limits[r] for r in rows)
            again: dict[int, list[int]] = defaultdict(list)
            for row, outcome in zip(rows, self._decode(decode, sources, rows, top, o,
                                                       prefixes)):
                outcomes[row] = outcome
                if limits[row] < top and outcome.longest >= limits[row]:
                    again[limits[row]].append(row)
            for limit, redo in again.items():
                for row, outcome in zip(redo, self._decode(decode, sources, redo, limit, o,
                                                           prefixes)):
                    outcomes[row] = outcome
        return outcomes

    def _decode(self, decode: _Decode, sources: list[list[str]], rows: list[int], limit: int,
                o: SearchOptions, prefixes: list[list[str]] | None) -> list[_Outcome]:
        """``decode`` of the sentences ``rows``, which share the length limit ``limit`` (EOS
        included)."""
        chosen = [sources[r] for r in rows]
        if limit == 1:  # tfm forces EOS at once: the empty translation
            return [_Outcome([h], _Pass(), longest=1)
                    for h in self._rescored(chosen, [[] for _ in chosen], o)]
        return decode(chosen, limit, o, _pick(prefixes, rows))

    def _one_pass(self, sources: list[list[str]], limit: int, o: SearchOptions,
                  prefixes: list[list[str]] | None) -> list[_Outcome]:
        """One call of CTranslate2's own search, under tfm's rules where CTranslate2 takes
        them: the never-emitted tokens disabled, scores by rules.score of CTranslate2's
        log-probabilities (normalised over the tokens that may be emitted; prefixed hypotheses
        rescored, so that the prefix counts). It stops as CTranslate2 stops: once its best
        candidate ends (patience 1), which is tfm's ``stop_early`` without a length penalty;
        with one, the hypotheses found can differ from tfm's search (``exact`` finds those)."""
        call = _Call(o, limit, self._never_emitted, suppress=True, wanted=o.n_best)
        results = self._translate_batch(sources, call, prefixes)
        outcomes, to_rescore = [], []
        for i, result in enumerate(results):
            outcome = _Outcome([], _Pass(), longest=_longest(result))
            for tokens, value, attn in _found(result, o):
                hyp = self._hypothesis(tokens, value, attn, call.length_penalty,
                                       ended=bool(tokens) and tokens[-1] == EOS)
                outcome.hyps.append(hyp)
                if prefixes is not None and prefixes[i]:
                    to_rescore.append((i, hyp))
            outcomes.append(outcome)
        self._rescore(sources, to_rescore)
        return self._ranked(outcomes, o)

    def _exact_group(self, sources: list[list[str]], limit: int, o: SearchOptions,
                     prefixes: list[list[str]] | None = None) -> list[_Outcome]:
        """What tfm's search finds for sentences that share the length limit ``limit``,
        starting with ``prefixes`` (target tokens, one list per sentence) if given."""
        outcomes = self._translate(sources, limit, o, _Pass(), prefixes)
        # Sentences whose first pass is not tfm's answer yet are decoded again: with the
        # never-emitted tokens disabled, or keeping every hypothesis at the length limit. The
        # flags only accumulate, so this ends after at most two more passes.
        for _ in range(2):
            redo: dict[_Pass, list[int]] = defaultdict(list)
            for i, outcome in enumerate(outcomes):
                if outcome.again != outcome.done:
                    redo[outcome.again].append(i)
            for flags, rows in redo.items():
                for i, outcome in zip(rows, self._translate([sources[i] for i in rows],
                                                            limit, o, flags,
                                                            _pick(prefixes, rows))):
                    outcomes[i] = outcome
        return outcomes

    def _translate(self, sources: list[list[str]], limit: int, o: SearchOptions,
                   flags: _Pass, prefixes: list[list[str]] | None = None) -> list[_Outcome]:
        """One CTranslate2 call of the exact search for sentences with the length limit
        ``limit``. With ``prefixes``, CTranslate2 starts each translation with its prefix
        (``target_prefix``); those hypotheses are rescored by teacher forcing, so their scores
        are tfm's: the log-probability of the whole output, prefix included."""
        greedy = o.beam == 1
        if greedy:
            patience, wanted = 1, 1
        elif o.length_penalty == 0 and o.stop_early and o.n_best == 1:
            # CTranslate2 stops once the best candidate is EOS: where tfm's stop_early stops
            patience, wanted = 1, 1
        elif not o.stop_early:
            # Once beam x patience hypotheses have ended: fairseq's rule, tfm's without
            # stop_early (rules.sentence_done)
            patience, wanted = 1, o.beam
        else:
            # Finished hypotheses are collected until 2 x beam have ended (a limit is the
            # number returned) and ranked here.
            patience, wanted = _PATIENCE, _PATIENCE * o.beam
        if flags.wide:  # the same search, which reached the limit: keep all it found
            patience, wanted = _PATIENCE + 1, (_PATIENCE + 1) * o.beam
        call = _Call(o, limit, self._never_emitted, flags.suppress, patience, wanted)
        results = self._translate_batch(sources, call, prefixes)
        end_tokens = call.end_tokens
        outcomes: list[_Outcome] = []
        to_rescore: list[tuple[int, Hypothesis]] = []  # (sentence, hypothesis)
        for i, result in enumerate(results):
            outcome = _Outcome([], flags, longest=_longest(result))
            for place, (tokens, value, attn) in enumerate(_found(result, o)):
                ended = bool(tokens) and tokens[-1] in end_tokens
                if ended and tokens[-1] != EOS:  # <pad>, <unk> or <s>: tfm never emits it
                    if place < o.n_best:
                        outcome.again = replace(outcome.again, suppress=True)
                    continue
                if not ended and not greedy:  # cut at the limit
                    outcome.again = replace(outcome.again, wide=True)
                hyp = self._hypothesis(tokens, value, attn, call.length_penalty, ended)
                outcome.hyps.append(hyp)
                # tfm's log P differs where EOS was forced (cut here) or disabled (min_len),
                # or where disabling renormalised the softmax (suppress).
                if not ended or o.min_len > 0 or flags.suppress or (prefixes and prefixes[i]):
                    to_rescore.append((i, hyp))
            outcomes.append(outcome)
        self._rescore(sources, to_rescore)
        return self._ranked(outcomes, o)

    def _translate_batch(self, sources: list[list[str]], call: _Call,
                         prefixes: list[list[str]] | None) -> list[Any]:
        """The one call of CTranslate2's translate_batch: tfm's step rules as ``_STEP_OPTIONS``
        maps them (every one of rules.STEP_RULES, or UnmappedRule), the search's own
        options, and each sentence's target prefix."""
        options: dict[str, Any] = {}
        for rule_options in rules.mapped("the ctranslate2 engine", _STEP_OPTIONS):
            options.update(rule_options(call))
        if prefixes is not None:
            options["target_prefix"] = prefixes
        return self.translator.translate_batch(
            sources, beam_size=call.o.beam, patience=call.patience,
            num_hypotheses=call.wanted, length_penalty=call.length_penalty,
            return_end_token=True, max_input_length=0, max_batch_size=0, return_scores=True,
            return_attention=call.o.attention, **options)

    def _hypothesis(self, tokens: list[str], value: float, attention: Any,
                    length_penalty: float, ended: bool) -> Hypothesis:
        """A hypothesis CTranslate2 found: its tokens (without the end token) as tfm's ids,
        its log-probability (CTranslate2 divided the sum by len(tokens) ** penalty, the end
        token counted), its attention rows; scored by ``_ranked``."""
        body = tokens[:-1] if ended else tokens
        log_prob = float(value) * len(tokens) ** length_penalty
        rows = None if attention is None else [list(r) for r in attention[: len(body)]]
        return Hypothesis([self._tgt_ids[t] for t in body], log_prob, log_prob, rows)

    def _rescore(self, sources: list[list[str]], found: list[tuple[int, Hypothesis]]) -> None:
        """Each (sentence, hypothesis) of ``found`` given tfm's log-probability, by teacher
        forcing."""
        if found:
            log_probs = self._log_probs([sources[i] for i, _ in found],
                                        [h.tokens for _, h in found])
            for (_, hyp), log_prob in zip(found, log_probs):
                hyp.log_prob = log_prob

    @staticmethod
    def _ranked(outcomes: list[_Outcome], o: SearchOptions, forced: int = 1
                ) -> list[_Outcome]:
        """The outcomes with their hypotheses scored by rules.score (after ``forced`` start
        tokens: rules.counted), best first."""
        penalty = length_penalty_of(o)
        for outcome in outcomes:
            for h in outcome.hyps:
                h.score = score(h.log_prob, counted(len(h.tokens), forced), penalty)
            outcome.hyps.sort(key=rank, reverse=True)
        return outcomes

    def _log_probs(self, sources: list[list[str]], targets: list[list[int]],
                   forced: list[list[str]] | None = None) -> list[float]:
        """log P(target + EOS | source) of each pair, by teacher forcing; with ``forced``
        (target tokens for each pair), the decoder is fed those first, their own
        log-probabilities left out."""
        skip = [len(f) for f in forced] if forced else [0] * len(targets)
        results = self.translator.score_batch(
            sources, [(forced[n] if forced else []) + [self._tgt_tokens[i] for i in t]
                      for n, t in enumerate(targets)], max_input_length=0)
        return [float(sum(r.log_probs[k:])) for r, k in zip(results, skip)]

    def _rescored(self, sources: list[list[str]], targets: list[list[int]],
                  o: SearchOptions) -> list[Hypothesis]:
        """Hypotheses of given targets, scored as tfm scores them."""
        penalty = length_penalty_of(o)
        return [hypothesis(list(target), log_prob, 1, penalty, [] if o.attention else None)
                for target, log_prob in zip(targets, self._log_probs(sources, targets))]

    def forced_log_probs(self, sources: list[list[int]], targets: list[list[int]],
                         batch_tokens: int = 2048) -> list[list[float]]:
        """Translator.forced_log_probs, by CTranslate2's teacher-forced scoring (which batches
        the call itself: ``batch_tokens`` is for tfm's engine)."""
        results = self.translator.score_batch(
            [[self._src_tokens[i] for i in s] for s in sources],
            [[self._tgt_tokens[i] for i in t] for t in targets], max_input_length=0)
        return [list(r.log_probs) for r in results]


def _found(result: Any, o: SearchOptions) -> Iterator[tuple[list[str], float, Any]]:
    """(tokens, score, attention or None) of each hypothesis of a translate_batch result."""
    attentions = result.attention if o.attention else [None] * len(result.hypotheses)
    return zip(result.hypotheses, result.scores, attentions)


def _longest(result: Any) -> int:
    """The positions a sentence's search reached: the tokens of its longest hypothesis, the
    end token counted as tfm counts EOS."""
    return max((len(t) for t in result.hypotheses), default=0)


def _pick(prefixes: list[list[str]] | None, rows: list[int]) -> list[list[str]] | None:
    """The prefixes of ``rows``, or None when there are none."""
    return None if prefixes is None else [prefixes[r] for r in rows]


@dataclass(frozen=True)
class _Call:
    """What one translate_batch call is asked (``_translate_batch``): the options ``o``, tfm's
    length limit ``limit`` (EOS included), the never-emitted tokens (``never``) disabled
    (``suppress``) or made extra end tokens, ``patience`` and the hypotheses ``wanted``."""

    o: SearchOptions
    limit: int
    never: list[str]
    suppress: bool
    patience: int = 1
    wanted: int = 1

    @property
    def end_tokens(self) -> list[str]:
        """The tokens a hypothesis may end on: EOS, and the never-emitted ones unless
        disabled (a hypothesis that ends on one is dropped, or decoded again suppressed)."""
        return [EOS] if self.suppress else [EOS, *self.never]

    @property
    def length_penalty(self) -> float:
        """CTranslate2's: the options' for beam search; 0 for greedy search, whose raw sums
        rules.score then divides as it scores greedy search (rules.length_penalty_of)."""
        return 0.0 if self.o.beam == 1 else self.o.length_penalty


def _never_emitted(call: _Call) -> dict[str, Any]:
    """rules.NEVER_EMITTED: extra end tokens, or disabled (which renormalises CTranslate2's
    softmax over the others)."""
    options: dict[str, Any] = {"end_token": call.end_tokens}
    if call.suppress:
        options.update(disable_unk=True, suppress_sequences=[
            [t] for i, t in zip(NEVER_EMITTED, call.never) if i != UNK_ID])
    return options


def _length_limit(call: _Call) -> dict[str, Any]:
    """rules.length_limit: CTranslate2 counts tokens without EOS; tfm's limit counts it (at
    it, CTranslate2 cuts the hypothesis where tfm forces EOS: rescored, see the module)."""
    return {"max_decoding_length": call.limit - 1}


def _min_length(call: _Call) -> dict[str, Any]:
    """No EOS before min_len, the length limit winning over it."""
    return {"min_decoding_length": min(call.o.min_len, call.limit - 1)}


def _sampling_top_k(call: _Call) -> dict[str, Any]:
    """Sampling from the k most probable tokens (0: all), CTranslate2's own options. Its
    draws come from CTranslate2's generators in its own threads, which ``sampling_seed``
    does not reach: they differ from run to run (tfm's engine draws repeatably)."""
    if call.o.sampling_topk == 1:
        return {}
    return {"sampling_topk": call.o.sampling_topk,
            "sampling_temperature": call.o.sampling_temp}


# How each of tfm's step rules (rules.STEP_RULES) reaches CTranslate2: translate_batch options.
# Checked at import and at every call: a declared rule without an entry stops the engine.
_STEP_OPTIONS: dict[StepRule, Callable[[_Call], dict[str, Any]]] = {
    StepRule.NEVER_EMITTED: _never_emitted,
    StepRule.MIN_LENGTH: _min_length,
    StepRule.LENGTH_LIMIT: _length_limit,
    StepRule.SAMPLING_TOP_K: _sampling_top_k,
}
rules.mapped("the ctranslate2 engine", _STEP_OPTIONS)


@dataclass(frozen=True)
class _Pass:
    """How a CTranslate2 call decodes: ``suppress`` disables <pad>, <unk> and <s> instead of
    ending on them; ``wide`` keeps every hypothesis of a search that reaches the limit."""

    suppress: bool = False
    wide: bool = False


@dataclass
class _Outcome:
    """One sentence's hypotheses from a pass (``done``), and the pass it needs (``again``)."""

    hyps: list[Hypothesis]
    done: _Pass
    again: _Pass = None  # type: ignore[assignment]
    longest: int = 0  # positions the search reached (EOS included): see search()

    def __post_init__(self) -> None:
        if self.again is None:
            self.again = self.done


# How a group of sentences with one length limit is decoded: (sources, limit, options,
# prefixes) -> one _Outcome per sentence (CTranslate2Translator._one_pass, _exact_group).
_Decode = Callable[[list[list[str]], int, SearchOptions, "list[list[str]] | None"],
                   list[_Outcome]]


def _model_info(path: Path, record: dict[str, Any]) -> ModelInfo:
    """The model an export was made from, as its tfm_export.json records it."""
    return ModelInfo.from_json(record, f"{path}: tfm_export.json")


def _cpu_threads() -> int:
    """CTranslate2's CPU threads: its default of 4, but never more than decoding may use
    (workers.cpu_threads: more OpenMP threads than cores contend for them)."""
    return min(4, cpu_threads())


def _device(ct2: Any, name: str) -> tuple[str, int]:
    """CTranslate2's device and device index for tfm's --device (auto, cpu, cuda, cuda:N)."""
    gpus = ct2.get_cuda_device_count()
    if name == "auto":
        return ("cuda" if gpus else "cpu"), 0
    if name == "cpu":
        return "cpu", 0
    kind, _, index = name.partition(":")
    if kind == "cuda" and (not index or index.isdigit()):
        if not gpus:
            raise UsageError("--device cuda: CTranslate2 sees no CUDA GPU here; use "
                             "--device cpu")
        if int(index or 0) >= gpus:
            raise UsageError(f"--device {name}: there are {gpus} GPUs (cuda:0 to "
                             f"cuda:{gpus - 1})")
        return "cuda", int(index or 0)
    raise UsageError(f"--device {name}: not a device (use auto, cpu or cuda)")


def _compute_type(ct2: Any, device: str, precision: str, quantization: str) -> str:
    """CTranslate2's compute type for tfm's --precision and the export's weight type."""
    if precision not in PRECISIONS:
        raise UsageError(f"--precision {precision}: choose one of {', '.join(PRECISIONS)}")
    supported = set(ct2.get_supported_compute_types(device))
    if precision == "int8":  # int8 weights (quantized at load from a float export)
        if device != "cpu":
            raise UsageError(f"--precision int8 is for CPUs; on {device} use bf16 or fp16")
        if "int8_float32" not in supported:
            raise UsageError("--precision int8: CTranslate2 cannot compute in int8 on this "
                             "CPU; use --precision fp32")
        return "int8_float32"
    if precision == "auto":
        if device == "cuda":
            candidates = ["bfloat16", "float16"]
        else:
            candidates = ["bfloat16"] if cpu_has_native_bf16() else []
        floating = next((t for t in candidates if t in supported), "float32")
    else:
        floating = _FLOAT_TYPES[precision]
        if floating not in supported:
            raise UsageError(f"--precision {precision}: CTranslate2 cannot compute in "
                             f"{floating} on {device} here (it can: "
                             f"{', '.join(sorted(supported))}); use --precision fp32")
    if quantization.startswith("int8"):  # keep the int8 weights, with the float type around
        integer = "int8_float32" if floating == "float32" else f"int8_{floating}"
        return integer if integer in supported else floating
    if quantization == "int16" and floating == "float32" and "int16" in supported:
        return "int16"
    return floating
