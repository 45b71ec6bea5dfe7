"""Back-translation (Sennrich et al., 2016): text in the target language of a run translated
into its source language by a reverse model, giving synthetic pairs to train on beside the
real ones.

How the synthetic sources are made matters (Edunov et al., EMNLP 2018): sampled (the
search's ``sampling_topk`` 0), top-k sampled (``sampling_topk`` 10) or beam search with noise
(``noise``: each word deleted with probability 0.1, replaced by a filler with 0.1, and the
words shuffled so that none moves more than 3 positions) all beat plain beam search, which
gives sources too regular to learn from; a tag on the synthetic sources (Caswell et al., 2019:
``tfm prepare``'s ``synthetic_tag``) does as well and keeps beam search usable.

The work is a corpus translation (tfm.decoding.corpus_translation: chunks written
atomically, resumed from disk); with several processes (torchrun), each translates its own
contiguous share and the first joins the shares in order. Every random choice depends only on
a seed and the sentence (sampling: its ids; the noise: its line number), so the synthetic
corpus is the same for any batching, number of processes or interruption.

Files, for the output prefix ``PREFIX`` of a de -> en reverse model::

    PREFIX.en, PREFIX.de     the synthetic pairs (what ``tfm prepare`` reads as the corpus
                             ``PREFIX`` with src_lang en, tgt_lang de), written atomically
    PREFIX.json              what was done (languages, search, noise, filters, counts), last
    PREFIX.work/             the shares' chunks while the work is under way

``tfm backtranslate`` and ``tfm prepare`` (a run config's monolingual entry, parsed by
tfm.data.monolingual) do the same work by the same calls: ``open_backtranslation`` (every
check, before any work; refusals worded as the command's options or the entry's keys), then
``backtranslate``; prepare's through ``backtranslate_corpora``, with ``OUTPUT.bt/N-NAME`` as
the prefix (``work_directory``).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tfm.atomic import atomic_write_bytes
from tfm.config import BacktranslateConfig, EngineOptions, SearchOptions
from tfm.data.corpus import read_text_lines
from tfm.data.directions import Corpora, Corpus
from tfm.data.monolingual import Backtranslation
from tfm.decoding.corpus_translation import read_translations, translate_corpus
from tfm.decoding.translator import Translator
from tfm.errors import (
    DataError,
    ModelError,
    OptionError,
    ResourceError,
    TfmError,
    UsageError,
)

__all__ = ["BacktranslationReport", "Opened", "Wording", "backtranslate",
           "backtranslate_corpora", "check_reverse_model", "check_text_language",
           "model_identity", "noised", "open_backtranslation", "output_paths",
           "read_monolingual", "share", "work_directory"]


@dataclass(frozen=True)
class BacktranslationReport:
    """What ``backtranslate`` did: sentences read, pairs written, pairs each filter dropped,
    sentences translated now and found translated on disk, the files written (rank 0)."""

    read: int
    written: int
    dropped: dict[str, int]
    translated: int
    reused: int
    files: tuple[Path, ...]


@dataclass(frozen=True)
class Wording:
    """How a refusal names what the user gave: ``tfm backtranslate``'s options, or the keys of
    a run config's monolingual corpus entry (``tfm prepare``), so that the one line points at
    what to change. ``where`` starts every line (none for the command)."""

    where: str = ""
    input: str = ""  # before a line about the text file (the command's name the file alone)
    lang: str = "--lang"
    reverse_model: str = "--reverse-model"
    tokenizer: str = "--tokenizer"
    options: str = ""  # before a line about the search options (the command's: none)

    @classmethod
    def entry(cls, where: str) -> Wording:
        """The keys of a run config's corpus entry ``where`` ("corpora, entry 2")."""
        return cls(f"{where}: ", f"{where}, train: ", "tgt_lang", "reverse_model",
                   "--tokenizer", f"{where}, backtranslate: ")


COMMAND = Wording()


def read_monolingual(path: Path) -> list[str]:
    """The lines of a monolingual file, one sentence each. DataError in one line for a file
    that is missing, empty, not UTF-8 text or binary (a NUL byte), or has no text at all."""
    lines = read_text_lines(path)
    for number, line in enumerate(lines, 1):
        if "\x00" in line:
            raise DataError(f"{path}, line {number}: a NUL byte: this is a binary file, not "
                            "text one sentence a line")
    if not any(line.strip() for line in lines):
        raise DataError(f"{path} has no text (only empty lines); give one sentence a line")
    return lines


LANGUAGE_SAMPLE = 200  # lines of the text whose language is checked (py3langid)


def check_text_language(lines: Sequence[str], lang: str, where: Path,
                        option: str = "--lang") -> None:
    """Where the ``langid`` extra is installed and knows ``lang``: that most of a sample of the
    text reads as ``lang`` (a file of the wrong language is the costliest mistake here: the
    reverse model would translate all of it into nonsense). One line naming the file and the
    language most of it reads as; nothing where py3langid is missing or cannot tell."""
    import importlib.util

    if importlib.util.find_spec("py3langid") is None:
        return
    from tfm.decoding.language_id import TargetLanguageCheck

    try:
        check = TargetLanguageCheck(lang)
    except UsageError:  # a language py3langid does not know: nothing to check it by
        return
    found = check([line for line in lines if line.strip()][:LANGUAGE_SAMPLE])
    if found.identified >= 10 and found.rate > 50:
        other = max((code for code in found.found if code != found.lang),
                    key=lambda code: found.found[code])
        raise DataError(f"{where}: {option} {lang}, but {found.off_target} of "
                        f"{found.identified} sampled lines read as other languages (most as "
                        f"{other}, py3langid): give the text's language, and a reverse "
                        "model of it")


def check_reverse_model(translator: Translator, text_lang: str, output_lang: str,
                        tokenizer: Path | None = None, wording: Wording = COMMAND) -> None:
    """That the reverse model reads ``text_lang`` and writes ``output_lang`` (the languages
    its config.json records), and, where ``tokenizer`` (the run's) is given, that it has the
    same vocabulary: one line naming what is wrong, before any work."""
    info = translator.info
    directions = info.direction_names
    wanted = f"{text_lang}-{output_lang}"
    if wanted not in directions:
        known = [d for d in directions if "?" not in d]
        if known:
            raise UsageError(
                f"{wording.where}{wording.reverse_model} translates {', '.join(known)}, not "
                f"{wanted}: back-translation of {text_lang} text needs a model of {wanted} "
                "(trained on the pairs the other way round)")
    if tokenizer is not None:
        from tfm.data.tokenizer import load_vocabularies

        theirs = load_vocabularies(tokenizer)
        if (theirs.src.get_vocab() != translator.vocabs.tgt.get_vocab()
                or theirs.tgt.get_vocab() != translator.vocabs.src.get_vocab()):
            raise UsageError(f"{wording.where}{wording.tokenizer} {tokenizer} is not the "
                             f"{wording.reverse_model}'s tokenizer: train the reverse model "
                             "on data prepared with it")


@dataclass
class Opened:
    """A back-translation checked and ready: the text's lines, the reverse model loaded, the
    search (its defaults and the options given), and what names the model (``identity``)."""

    lines: list[str]
    translator: Translator
    options: SearchOptions
    identity: dict[str, Any]


def open_backtranslation(text: Path, reverse_model: Path, lang: str, into: str,
                         search: dict[str, Any], engine: EngineOptions,
                         tokenizer: Path | None = None, wording: Wording = COMMAND) -> Opened:
    """What ``tfm backtranslate`` and ``tfm prepare`` (a monolingual corpus) check before
    any work, in one place: the ``text`` (``read_monolingual``, ``check_text_language``), the
    reverse model (loaded with ``engine``; ``check_reverse_model``) and the ``search``
    options given, over the model's defaults. Each refusal is one line in ``wording``."""
    from tfm.decoding.engines import load_translator

    try:
        lines = read_monolingual(Path(text))
        check_text_language(lines, lang, Path(text), wording.lang)
    except DataError as e:
        raise _reworded(e, wording.input) from None
    try:
        translator = load_translator(reverse_model, engine.device, engine.precision,
                                     workers=engine.workers, shortlist=engine.shortlist,
                                     exact_search=engine.exact_search,
                                     cuda_graphs=engine.cuda_graphs)
    except TfmError as e:
        if not wording.where:
            raise
        raise _reworded(e, f"{wording.where}{wording.reverse_model}: ") from None
    check_reverse_model(translator, lang, into, tokenizer, wording)
    try:
        options = translator.default_options(**search)
    except UsageError as e:
        if not wording.options:
            raise
        text = e.for_request() if isinstance(e, OptionError) else str(e)
        raise UsageError(f"{wording.options}{text}") from None
    return Opened(lines, translator, options, model_identity(Path(reverse_model)))


def _reworded(e: TfmError, prefix: str) -> TfmError:
    """``e``'s line after ``prefix``, as an error of its kind (its exit status)."""
    if not prefix:
        return e
    kind = next(k for k in (DataError, ModelError, ResourceError, UsageError, TfmError)
                if isinstance(e, k))
    return kind(f"{prefix}{e}")


def model_identity(model: Path) -> dict[str, Any]:
    """What names the reverse model in the corpus translation's fingerprint: its files'
    names, sizes and modification times (a model trained anew is another model)."""
    h = hashlib.sha256()
    for path in sorted(p for p in Path(model).iterdir() if p.is_file()):
        stat = path.stat()
        h.update(f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
    return {"model": h.hexdigest()}


def share(total: int, rank: int, world: int) -> range:
    """The contiguous lines ``rank`` of ``world`` processes translates: shares differ by at
    most one line, rank 0's first."""
    per, extra = divmod(total, world)
    start = rank * per + min(rank, extra)
    return range(start, start + per + (rank < extra))


def noised(words: list[str], config: BacktranslateConfig, rng: random.Random) -> list[str]:
    """``words`` with Edunov et al.'s noise: each deleted with probability
    ``noise_delete``, else replaced by ``noise_filler`` with ``noise_replace``, then
    shuffled by sorting on position + U(0, swap + 1) (Lample et al., 2018), which moves no
    word more than ``noise_swap`` positions. Never empty: a sentence that would lose every
    word keeps its first."""
    kept = []
    for word in words:
        draw = rng.random()
        if draw < config.noise_delete:
            continue
        kept.append(config.noise_filler if draw < config.noise_delete + config.noise_replace
                    else word)
    if not kept and words:
        kept = words[:1]
    if config.noise_swap:
        keys = [i + rng.uniform(0, config.noise_swap + 1) for i in range(len(kept))]
        kept = [w for _, w in sorted(zip(keys, kept), key=lambda p: p[0])]
    return kept


def output_paths(prefix: Path, source_lang: str, target_lang: str) -> tuple[Path, Path, Path]:
    """The synthetic sources, the real targets and the report of output ``prefix``."""
    prefix = Path(prefix)
    return (prefix.with_name(f"{prefix.name}.{source_lang}"),
            prefix.with_name(f"{prefix.name}.{target_lang}"),
            prefix.with_name(f"{prefix.name}.json"))


def backtranslate(translator: Translator, lines: Sequence[str], prefix: Path,
                  text_lang: str, output_lang: str, options: SearchOptions,
                  config: BacktranslateConfig, *, identity: Any = None, rank: int = 0,
                  world: int = 1, barrier: Callable[[], None] | None = None,
                  progress: Callable[[int], None] | None = None) -> BacktranslationReport:
    """``lines`` (in ``text_lang``) translated by the reverse model ``translator`` into
    ``output_lang`` with ``options``, noised and filtered as ``config`` says, written as the
    parallel corpus ``prefix`` (``output_paths``). This process translates its ``share`` of
    the lines (rank of world); after ``barrier`` (all processes' shares done), rank 0 joins
    them in order and writes the corpus; the others return having written nothing else.
    ``identity``: what names the reverse model (corpus_translation's fingerprint). Where
    ``prefix`` holds the corpus of the same request already (the report says so and the
    files are as written), it is returned at once, untranslated."""
    work = Path(prefix).with_name(f"{Path(prefix).name}.work")
    mine = share(len(lines), rank, world)
    request = _request(lines, text_lang, output_lang, options, config, identity)
    finished = _finished(prefix, request)
    if finished is not None:
        if progress is not None and len(mine):
            progress(len(mine))
        return finished if rank == 0 else BacktranslationReport(len(mine), 0, {}, 0, 0, ())
    languages = translator.languages
    language = (languages.resolve(output_lang, text_lang) if languages.marking.by_codes else
                languages.resolve(output_lang if languages.tags else None))
    done = translate_corpus(translator, list(lines[mine.start:mine.stop]),
                            work / f"share-{rank:04d}-of-{world:04d}.{output_lang}", options,
                            identity=identity, language=language, chunk=config.chunk,
                            progress=progress)
    if barrier is not None:
        barrier()
    if rank != 0:
        return BacktranslationReport(len(mine), 0, {}, done.translated, done.reused, ())
    texts: list[str] = []
    scores: list[float] = []
    for r in range(world):
        t, s = read_translations(work / f"share-{r:04d}-of-{world:04d}.{output_lang}")
        texts += t
        scores += s
    report = _write_pairs(lines, texts, scores, prefix, request, config, done.translated,
                          done.reused)
    shutil.rmtree(work, ignore_errors=True)
    return report


def _request(lines: Sequence[str], text_lang: str, output_lang: str, options: SearchOptions,
             config: BacktranslateConfig, identity: Any) -> dict[str, Any]:
    """What a synthetic corpus is made of, as JSON: the languages, the text (its lines and
    sha256), the reverse model (``identity``), the search and the noise and filters (without
    ``batch_tokens`` and ``chunk``, which change no output)."""
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8") + b"\n")
    search, bt = asdict(options), asdict(config)
    search.pop("batch_tokens")
    bt.pop("chunk")
    return {"version": 1, "source_lang": output_lang, "target_lang": text_lang,
            "text": {"lines": len(lines), "sha256": digest.hexdigest()},
            "identity": identity, "search": search, "backtranslate": bt}


def _finished(prefix: Path, request: dict[str, Any]) -> BacktranslationReport | None:
    """The report of the corpus at ``prefix`` where it was made for ``request`` and its
    files are as written (their sha256), else None."""
    src, tgt, report = output_paths(prefix, request["source_lang"], request["target_lang"])
    try:
        record = json.loads(report.read_text(encoding="utf-8"))
        if record.get("request") != request or record.get("sha256") != [
                _sha256(src), _sha256(tgt)]:
            return None
    except (OSError, ValueError, AttributeError):
        return None
    return BacktranslationReport(record["read"], record["written"], record["dropped"], 0,
                                 record["read"], (src, tgt, report))


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _write_pairs(lines: Sequence[str], texts: list[str], scores: list[float], prefix: Path,
                 request: dict[str, Any], config: BacktranslateConfig, translated: int,
                 reused: int) -> BacktranslationReport:
    """The pairs filtered and noised, written atomically: both sides, then the report, which
    says the corpus is whole."""
    dropped = {"empty": 0, "length ratio": 0, "score": 0}
    sources, targets = [], []
    for number, (target, source, score) in enumerate(zip(lines, texts, scores)):
        reason = _dropped(target, source, score, config)
        if reason is not None:
            dropped[reason] += 1
            continue
        if config.noise:
            rng = random.Random(f"{config.noise_seed}:{number}")
            source = " ".join(noised(source.split(), config, rng))
        sources.append(source)
        targets.append(target.strip())
    if not sources:
        raise DataError(f"{prefix}: every pair was dropped by the filters ({dropped}); "
                        "loosen --max-ratio or --min-score")
    src_path, tgt_path, report_path = output_paths(prefix, request["source_lang"],
                                                   request["target_lang"])
    report_path.unlink(missing_ok=True)  # no report while the pairs change
    src_data = "".join(s + "\n" for s in sources).encode("utf-8")
    tgt_data = "".join(t + "\n" for t in targets).encode("utf-8")
    atomic_write_bytes(src_path, src_data)
    atomic_write_bytes(tgt_path, tgt_data)
    report = BacktranslationReport(len(lines), len(sources), dropped, translated, reused,
                                   (src_path, tgt_path, report_path))
    record = {"synthetic": "source", "read": len(lines), "written": len(sources),
              "dropped": dropped, "request": request,
              "sha256": [hashlib.sha256(src_data).hexdigest(),
                         hashlib.sha256(tgt_data).hexdigest()]}
    atomic_write_bytes(report_path, json.dumps(record, indent=1).encode("utf-8"))
    return report


def _dropped(target: str, source: str, score: float, config: BacktranslateConfig
             ) -> str | None:
    """Why a pair (a real ``target``, its synthetic ``source``) is dropped, or None."""
    t, s = len(target.split()), len(source.split())
    if not t or not s:
        return "empty"
    if config.max_ratio and max(s, t) / min(s, t) > config.max_ratio:
        return "length ratio"
    if config.min_score is not None and score < config.min_score:
        return "score"
    return None


# A progress factory of backtranslate_corpora: for an entry, its number of lines and its
# search, a context that yields backtranslate's ``progress`` callback (or None).
Progress = Callable[[Backtranslation, int, SearchOptions],
                    AbstractContextManager[Callable[[int], None] | None]]


def work_directory(output: Path) -> Path:
    """Where ``tfm prepare`` into dataset ``output`` keeps its monolingual corpora's
    back-translations: ``OUTPUT.bt/`` beside it (not inside: the dataset is replaced whole by
    a rename at its end, and an interrupted back-translation must outlive the attempt)."""
    output = Path(output)
    return output.with_name(f"{output.name}.bt")


def backtranslate_corpora(corpora: Corpora, tokenizer: Path, output: Path,
                          progress: Progress | None = None
                          ) -> tuple[Corpora, list[BacktranslationReport]]:
    """``corpora`` with each monolingual corpus (a run config's entry of one language)
    back-translated by ``backtranslate``, as ``tfm backtranslate`` does, into the synthetic
    corpus ``work_directory(output)/N-NAME`` (entry N, its text file NAME.LANG), and listed
    as that corpus, marked synthetic; the reports, in their order. Every entry is checked
    (``open_backtranslation``, in the entry's keys; the reverse model against ``tokenizer``)
    before any is translated; each resumes from its chunks and returns at once where its
    corpus is made. The caller holds ``output``'s lock."""
    from tfm.data.corpus import CorpusSpec

    entries = [c for c in corpora.items if c.backtranslation is not None]
    opened = [_open_entry(c.backtranslation, tokenizer) for c in entries]
    made: dict[int, Corpus] = {}
    reports = []
    for corpus, ready in zip(entries, opened):
        bt = corpus.backtranslation
        assert bt is not None and bt.into is not None
        prefix = work_directory(output) / f"{bt.entry}-{Path(bt.text).name.split('.')[0]}"
        with (progress(bt, len(ready.lines), ready.options) if progress is not None
              else nullcontext()) as advance:
            reports.append(backtranslate(
                ready.translator, ready.lines, prefix, bt.lang, bt.into, ready.options,
                bt.config, identity=ready.identity, progress=advance))
        made[id(corpus)] = dataclasses.replace(
            corpus, train=CorpusSpec((str(prefix),), bt.into, bt.lang, corpus.train.split,
                                     corpus.train.hf_config), backtranslation=None)
        ready.lines.clear()  # (the text and the model of an entry done: not held)
    return Corpora(tuple(made.get(id(c), c) for c in corpora.items)), reports


def _open_entry(bt: Backtranslation | None, tokenizer: Path) -> Opened:
    assert bt is not None and bt.into is not None
    return open_backtranslation(Path(bt.text), bt.reverse_model, bt.lang, bt.into, bt.search,
                                bt.engine, tokenizer, Wording.entry(bt.where))
