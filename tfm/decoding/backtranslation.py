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
"""

from __future__ import annotations

import hashlib
import json
import random
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tfm.atomic import atomic_write_bytes
from tfm.config import BacktranslateConfig, SearchOptions
from tfm.data.corpus import read_text_lines
from tfm.decoding.corpus_translation import read_translations, translate_corpus
from tfm.decoding.translator import Translator
from tfm.errors import DataError, UsageError

__all__ = ["BacktranslationReport", "backtranslate", "check_reverse_model",
           "check_text_language", "noised",
           "output_paths", "read_monolingual", "share"]


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


def check_text_language(lines: Sequence[str], lang: str, where: Path) -> None:
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
        raise DataError(f"{where}: --lang {lang}, but {found.off_target} of "
                        f"{found.identified} sampled lines read as other languages (most as "
                        f"{other}, py3langid): give the text's language, and a reverse "
                        "model of it")


def check_reverse_model(translator: Translator, text_lang: str, output_lang: str,
                        tokenizer: Path | None = None) -> None:
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
                f"--reverse-model translates {', '.join(known)}, not {wanted}: back-"
                f"translation of {text_lang} text needs a model of {wanted} (trained on the "
                "pairs the other way round)")
    if tokenizer is not None:
        from tfm.data.tokenizer import load_vocabularies

        theirs = load_vocabularies(tokenizer)
        if (theirs.src.get_vocab() != translator.vocabs.tgt.get_vocab()
                or theirs.tgt.get_vocab() != translator.vocabs.src.get_vocab()):
            raise UsageError(f"--tokenizer {tokenizer} is not the reverse model's tokenizer: "
                             "train the reverse model on data prepared with it")


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
