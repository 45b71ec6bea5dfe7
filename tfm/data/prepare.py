"""``tfm prepare``: a parallel corpus in, a cleaned and tokenized dataset on disk out.

The prepared directory is a Hugging Face ``DatasetDict`` (``train``, and ``valid`` when given)
saved with ``save_to_disk``: token ids in memory-mapped Arrow files, plus ``prepare.json`` (what
was read, how it was cleaned, how many pairs were kept) and a copy of the tokenizer, so that
``tfm train`` needs nothing but this directory. A second ``prepare`` of the same input with the
same tokenizer and options finds ``prepare.json`` up to date and returns at once.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from tfm.atomic import write_error
from tfm.config import CleanConfig
from tfm.data.corpus import (
    CorpusSpec,
    batched,
    corpus_fingerprint,
    iter_pairs,
    resolve_corpus,
)
from tfm.data.dataset import (
    PREPARE_FILE,
    PREPARE_VERSION,
    PrepareInfo,
    read_prepare_info,
    write_prepare_info,
)
from tfm.data.directions import (
    Corpora,
    Corpus,
    Direction,
    corpus_texts,
    direction_names,
    single_corpus,
    source_tag,
    vocabulary_tags,
)
from tfm.data.language_marks import (
    LANGUAGE_TOKEN,
    LanguageError,
    LanguageMarking,
    ModelLanguages,
    ResolvedLanguage,
    find_tag,
    tagged,
)
from tfm.data.text import has_invisible, normalize_text
from tfm.data.tokenizer import (
    EOS_ID,
    Vocabularies,
    encode_batch,
    load_vocabularies,
    save_vocabularies,
    text_normalizer,
    tokenizer_from_json,
    tokenizer_to_json,
    train_tokenizer,
    vocabulary_files,
)
from tfm.errors import DataError, UsageError, WriteError
from tfm.layout import CONFIG_FILE, TOKENIZER_FILE
from tfm.model_info import read_model_info
from tfm.special_tokens import SPECIAL_TOKENS

_CHUNK = 20_000  # pairs tokenized at a time


@dataclass
class SplitReport:
    """What happened to the pairs of one split."""

    read: int = 0
    kept: int = 0
    dropped: dict[str, int] = field(default_factory=lambda: {
        "empty": 0, "too long": 0, "length ratio": 0, "duplicate": 0})
    src_tokens: int = 0
    tgt_tokens: int = 0
    invisible_removed: int = 0  # pairs read whose text lost control / zero-width chars


@dataclass
class PrepareReport:
    output: str
    up_to_date: bool
    splits: dict[str, SplitReport]  # each split's pairs, all directions together
    # split -> direction (``en-de``) -> its pairs
    directions: dict[str, dict[str, SplitReport]] = field(default_factory=dict)


def train_vocabularies(corpora: Corpora | CorpusSpec, vocab_size: int = 8000,
                       min_frequency: int = 2, separate: bool = False,
                       lowercase: bool = False) -> Vocabularies:
    """BPE on the normalised text of the corpora, streamed: one joint vocabulary learnt from
    both sides, or (``separate``) one per side, each of ``vocab_size`` entries; ``lowercase``:
    the tokenizers lowercase what they encode (see ``new_tokenizer``). Each language of a
    corpus is read once, however many directions it serves in; where the corpora translate
    into several languages, the (source) vocabulary gets their tags (tfm.data.directions).
    Monolingual corpora are not read: the reverse model that back-translates them is trained
    with this tokenizer, before their pairs exist."""
    if isinstance(corpora, CorpusSpec):
        corpora = single_corpus(corpora, None, None, None)
    tags = corpora.tags
    if not separate:
        texts = (normalize_text(t) for t in corpus_texts(corpora))
        return Vocabularies.shared(train_tokenizer(texts, vocab_size, min_frequency,
                                                   lowercase=lowercase, tags=tags))
    pairs = [c for c in corpora.items if c.backtranslation is None]
    src = train_tokenizer((normalize_text(s) for c in pairs for s, _ in iter_pairs(c.train)),
                          vocab_size, min_frequency, lowercase=lowercase, tags=tags)
    tgt = train_tokenizer((normalize_text(t) for c in pairs for _, t in iter_pairs(c.train)),
                          vocab_size, min_frequency, lowercase=lowercase)
    return Vocabularies(src, tgt)


def prepare(
    train: Corpora | CorpusSpec,
    tokenizer_path: Path,
    output: Path,
    valid: CorpusSpec | None = None,
    clean: CleanConfig | None = None,
    force: bool = False,
    num_proc: int = 1,
    language_token: str = "source",
    synthetic_tag: str | None = None,
) -> PrepareReport:
    """Clean and tokenize the corpora ``train`` (one CorpusSpec, and ``valid``, for a
    bilingual run given on the command line) into the dataset directory ``output``,
    ``num_proc`` worker processes tokenizing chunks of pairs in parallel (1: in this process,
    with the tokenizers library's own threads). The result does not depend on ``num_proc``.

    Every pair is stored with its direction; where the tokenizer has target-language tags,
    ``language_token`` says where its direction's goes (``LANGUAGE_TOKEN``): before each
    source (tfm.data.directions), as the decoder's forced first token, or both.

    Corpora marked ``synthetic`` (back-translated) are never validated on; with
    ``synthetic_tag`` (Caswell et al., 2019: ``<BT>``), their sources start with that token,
    added to the dataset's tokenizer as a special token (refused where the vocabulary has it as
    an ordinary entry). A corpus's ``upsample`` writes its pairs that many times. A run
    without either prepares what it did before they existed, byte for byte."""
    clean = clean or CleanConfig()
    output = Path(output)
    corpora = train if isinstance(train, Corpora) else single_corpus(train, valid, None, None)
    if corpora.monolingual:
        raise UsageError(f"{corpora.monolingual[0].backtranslation.where}: its text is "
                         "back-translated before prepare reads pairs "
                         "(tfm.decoding.backtranslation.backtranslate_corpora)")
    vocabs, tags, synthetic_tag, source_tags, marking, codes = _plan(
        corpora, Path(tokenizer_path), language_token, synthetic_tag)
    splits = _splits(corpora)
    resolved = {name: [resolve_corpus(c.train if name == "train" else c.valid)
                       for c in items] for name, items in splits.items()}
    fingerprint = _fingerprint(corpora, Path(tokenizer_path), clean, marking, synthetic_tag)

    previous = _previous_info(output)
    if previous and previous.fingerprint == fingerprint and not force:
        return PrepareReport(str(output), True, {
            name: SplitReport(**report) for name, report in previous.splits.items()},
            _by_direction(previous))

    import datasets
    import pyarrow as pa

    job = _Job(corpora, splits, resolved, vocabs, source_tags, tags, clean, fingerprint,
               marking, codes, synthetic_tag)
    with _quiet_datasets(datasets):
        reports, by_direction = _write_dataset(job, output, datasets, pa, num_proc)
    return PrepareReport(str(output), False, reports, by_direction)


def _plan(corpora: Corpora, tokenizer_path: Path, language_token: str,
          synthetic_tag: str | None) -> tuple[Vocabularies, list[str], str | None,
                                              list[str | None], LanguageMarking | None,
                                              list[ResolvedLanguage] | None]:
    """What prepare reads the corpora with, each option checked (no corpus read yet): the
    vocabularies (with the synthetic tag added), their tags, the tag, each direction's source
    tag, the marking by language codes or decoder tokens, and each direction's marks."""
    vocabs = load_vocabularies(tokenizer_path)
    tags = vocabulary_tags(vocabs.src)
    synthetic_tag = add_synthetic_tag(vocabs, synthetic_tag, corpora, tokenizer_path)
    source_tags = [source_tag(tags, d, "tfm prepare") for d in corpora.directions]
    marking = tokenizer_marking(tokenizer_path) or tag_marking(tags, language_token)
    codes = [direction_codes(marking, vocabs, d) for d in corpora.directions] \
        if marking is not None else None
    if marking is not None and not marking.in_source:
        source_tags = [None] * len(source_tags)
    return vocabs, tags, synthetic_tag, source_tags, marking, codes


def check_prepare(corpora: Corpora, tokenizer_path: Path, output: Path,
                  language_token: str = "source", synthetic_tag: str | None = None) -> None:
    """What ``prepare`` refuses before it reads a corpus (the tokenizer, the tags, an
    ``output`` that is not a dataset), checked without writing: so that a mistake is found
    before the monolingual corpora are back-translated, which may take hours."""
    _plan(corpora, Path(tokenizer_path), language_token, synthetic_tag)
    _previous_info(Path(output))


def _splits(corpora: Corpora) -> dict[str, list[Corpus]]:
    """The corpora each split reads: every corpus for train, those with validation data for
    valid (none: no valid split)."""
    splits = {"train": list(corpora.items)}
    valid = [c for c in corpora.items if c.valid is not None]
    if valid:
        splits["valid"] = valid
    return splits


def _by_direction(info: PrepareInfo) -> dict[str, dict[str, SplitReport]]:
    return {name: {d: SplitReport(**r) for d, r in reports.items()}
            for name, reports in info.direction_splits.items()}


@dataclass
class _Job:
    """What one prepare writes: the corpora by split, their tokenizer and tags, the rules."""

    corpora: Corpora
    splits: dict[str, list[Corpus]]
    resolved: dict[str, list[Any]]
    vocabs: Vocabularies
    source_tags: list[str | None]  # per direction: the tag its sources start with
    tags: list[str]  # the tokenizer's tags: none may be written inside a text
    clean: CleanConfig
    fingerprint: str
    # A model of language codes' (NLLB-200, M2M100): its marking, and each direction's marks
    marking: LanguageMarking | None = None
    codes: list[ResolvedLanguage] | None = None
    synthetic_tag: str | None = None  # the token before each synthetic source (None: none)


def add_synthetic_tag(vocabs: Vocabularies, tag: str | None, corpora: Corpora,
                      tokenizer_path: Path) -> str | None:
    """``tag`` (``synthetic_tag``) checked and added to the source vocabulary as one token
    (kept where it is one already: a tokenizer from a tagged run's dataset); one line
    for a tag with spaces, a reserved or language token, an ordinary vocabulary entry (the
    model could not tell the tag from that word), or no synthetic corpus to tag."""
    if tag is None:
        return None
    option = f"--synthetic-tag {tag!r}"
    if not any(c.synthetic for c in corpora.items):
        raise UsageError(f"{option}: no corpus is marked synthetic: true (the run config's "
                         "corpora:), so there is nothing to tag")
    if not tag.strip() or any(c.isspace() for c in tag):
        raise UsageError(f"{option}: a tag is one token, without spaces (e.g. <BT>)")
    if tag in SPECIAL_TOKENS or find_tag(tag) == tag:
        raise UsageError(f"{option} is a reserved token of tfm (special or language tag); "
                         "choose another, e.g. <BT>")
    known = vocabs.src.token_to_id(tag)
    added = {t.content for t in vocabs.src.get_added_tokens_decoder().values()}
    if known is not None and tag not in added:
        raise UsageError(f"{option} is already the vocabulary entry {known} of "
                         f"{tokenizer_path}: choose a tag the vocabulary lacks, e.g. <BT>")
    if known is None:
        from tokenizers import AddedToken

        # As the language tags are: an added token matched in the text (tfm's special tokens
        # are matched by id only), which the BPE never splits.
        vocabs.src.add_tokens([AddedToken(tag, normalized=False, special=False)])
    return tag


def tokenizer_marking(tokenizer_path: Path) -> LanguageMarking | None:
    """The marking by language codes of the model whose tokenizer ``tokenizer_path`` is (its
    config.json beside it: an imported NLLB-200 or M2M100 model's directory), else None (a
    tokenizer of `tfm train-tokenizer`, without one). A config.json there that is not a tfm
    model's, or of a newer format, is refused in one line naming it (read_model_info)."""
    if not (tokenizer_path.parent / CONFIG_FILE).is_file():
        return None
    marking = read_model_info(tokenizer_path.parent).language_marking
    return marking if marking is not None and marking.by_codes else None


def tag_marking(tags: list[str], language_token: str) -> LanguageMarking | None:
    """A tfm multilingual model's marking where ``--language-token`` puts its tag elsewhere
    than before the source (None: the source tag, recorded as before, or no tags), refused in
    one line for a tokenizer without tags (one target language) or an unknown placement."""
    if language_token not in LANGUAGE_TOKEN:
        raise UsageError(f"--language-token {language_token}: choose "
                         f"{', '.join(LANGUAGE_TOKEN)}")
    if language_token == "source":
        return None
    if not tags:
        raise UsageError(f"--language-token {language_token}: the tokenizer has no "
                         ">>xx<< target-language tags, so there is one target language and "
                         "nothing to mark (a multilingual run's `tfm train-tokenizer` adds them)")
    return LanguageMarking(LANGUAGE_TOKEN[language_token])


def direction_codes(marking: LanguageMarking, vocabs: Vocabularies, direction: Direction
                    ) -> ResolvedLanguage:
    """How ``direction`` (in the model's codes: eng_Latn-deu_Latn; for a model of tags, its
    languages: en-de) is marked (tfm.data.language_marks resolves it as a request): the
    source code or tag, the decoder's forced start; one line for a language the model
    lacks."""
    if marking.by_codes and not (direction.src and direction.tgt):
        raise DataError(f"direction {direction}: a model of language codes needs both "
                        "languages, by its codes (e.g. eng_Latn-deu_Latn)")
    try:
        return ModelLanguages.of(vocabs, marking).direction(direction)
    except LanguageError as e:
        raise DataError(f"tfm prepare, direction {direction}: {e.worded(e.side + ' language')}"
                        ) from None


def _previous_info(output: Path) -> PrepareInfo | None:
    """The prepare.json of an earlier prepare into ``output``, or None if there is none to
    reuse. Refuses an ``output`` that holds something else: replacing it would delete it."""
    if output.exists() and not output.is_dir():
        raise DataError(f"{output} exists and is not a directory; give another --output")
    if not (output / PREPARE_FILE).is_file():
        if output.is_dir() and any(output.iterdir()):
            raise DataError(f"{output} is a non-empty directory but not a prepared dataset "
                            f"(no {PREPARE_FILE}); give another --output or empty it")
        return None
    try:
        return read_prepare_info(output)
    except DataError:  # unreadable (or of a newer format): prepare again, over it
        return None


@contextmanager
def _quiet_datasets(datasets: Any) -> Iterator[None]:
    """Hide the datasets library's own progress bars: prepare reports in one table."""
    was_enabled = datasets.is_progress_bar_enabled()
    datasets.disable_progress_bars()
    try:
        yield
    finally:
        if was_enabled:
            datasets.enable_progress_bars()


def _write_dataset(job: _Job, output: Path, datasets: Any, pa: Any, num_proc: int = 1
                   ) -> tuple[dict[str, SplitReport], dict[str, dict[str, SplitReport]]]:
    """Write the dataset in a work directory beside ``output`` and swap it in whole. A full
    disk (or a read-only one) raises WriteError with the work directory removed and the
    previous dataset, if any, intact."""
    kept = "the previous dataset is intact" if output.exists() else "nothing was kept"
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    except OSError as e:
        raise (write_error(output, e, kept=kept) or e) from e
    try:
        return _write_in(work, job, output, datasets, pa, num_proc)
    except OSError as e:
        written = sum(p.stat().st_size for p in work.rglob("*") if p.is_file())
        fault = write_error(output, e, kept=kept)
        if fault is None:
            raise
        raise WriteError(f"{fault} The prepared data had reached {written / 1e6:.1f} MB when "
                         "the write failed.") from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_in(work: Path, job: _Job, output: Path, datasets: Any, pa: Any, num_proc: int
              ) -> tuple[dict[str, SplitReport], dict[str, dict[str, SplitReport]]]:
    """Each split written as an Arrow file in ``work``, then the dataset directory made of
    them (the splits, the tokenizer, prepare.json) and swapped in for ``output``."""
    by_direction = {name: _write_split(work, job, name, pa, num_proc) for name in job.splits}
    reports = {name: _total(mine.values()) for name, mine in by_direction.items()}
    tables = {name: datasets.Dataset.from_file(str(work / f"{name}.arrow"))
              for name in job.splits}
    final = work / "dataset"
    datasets.DatasetDict(tables).save_to_disk(str(final))
    save_vocabularies(job.vocabs, final / TOKENIZER_FILE)
    write_prepare_info(final, _prepare_info(job, reports, by_direction))
    _swap_in(final, output, work)
    return reports, by_direction


def _write_split(work: Path, job: _Job, name: str, pa: Any, num_proc: int
                 ) -> dict[str, SplitReport]:
    """The split ``name``'s pairs, every corpus of it cleaned and tokenized, as the Arrow
    stream ``work/name.arrow``; returns each direction's report. A direction left without
    a pair is refused in one line naming its files."""
    items, directions = job.splits[name], list(job.corpora.directions)
    with_text = name != "train"
    schema = _schema(pa, with_text)
    mine: dict[str, SplitReport] = {}
    seen: dict[str, set[bytes]] = {}  # per direction, for --dedup
    with pa.OSFile(str(work / f"{name}.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, schema) as w:
        for corpus, resolved in zip(items, job.resolved[name]):
            index = directions.index(corpus.direction)
            report = mine.setdefault(corpus.direction.name, SplitReport())
            spec = corpus.train if name == "train" else corpus.valid
            assert spec is not None
            marks = job.codes[index] if job.codes is not None else ResolvedLanguage()
            read = _Reading(spec, resolved.description, index, job.source_tags[index],
                            job.tags, with_text, marks.source_prefix, marks.source_suffix,
                            job.synthetic_tag if corpus.synthetic else None,
                            job.synthetic_tag)
            copies = corpus.upsample if name == "train" else 1
            for batch in _tokenized_chunks(read, job.vocabs, job.clean, report,
                                           seen.setdefault(corpus.direction.name, set()),
                                           num_proc):
                for _ in range(copies):  # upsample: the chunk's pairs again
                    w.write_batch(pa.RecordBatch.from_pydict(batch, schema=schema))
    for direction, report in mine.items():
        if report.kept == 0:
            what = ", ".join(r.description for c, r in zip(items, job.resolved[name])
                             if c.direction.name == direction)
            which = f" of direction {direction}" if len(directions) > 1 else ""
            raise DataError(f"{what}: no pair{which} is left after cleaning "
                            f"({report.read} read); check the files and --max-length")
    return mine


def _swap_in(final: Path, output: Path, work: Path) -> None:
    """Swap the finished directory ``final`` in as ``output``: an interrupted prepare leaves
    the old one intact. The old one is moved aside into ``work`` (a rename, not a slow
    delete) and removed with it."""
    if output.exists():
        output.rename(work / "previous")
        try:
            final.rename(output)
        except BaseException:
            (work / "previous").rename(output)
            raise
    else:
        final.rename(output)


def _prepare_info(job: _Job, reports: dict[str, SplitReport],
                  by_direction: dict[str, dict[str, SplitReport]]) -> PrepareInfo:
    """What prepare.json records of ``job`` and what became of its pairs."""
    directions = list(job.corpora.directions)
    one = directions[0] if len(directions) == 1 else None
    coded = job.marking is not None and job.codes is not None
    return PrepareInfo(
        fingerprint=job.fingerprint,
        src_lang=one.src if one else None,
        tgt_lang=one.tgt if one else None,
        directions=direction_names(directions),
        tags=job.tags,
        weights=job.corpora.weights(),
        inputs={name: [f"{c.direction}: {r.description}" for c, r in
                       zip(job.splits[name], job.resolved[name])] if one is None else
                job.resolved[name][0].description for name in job.splits},
        clean=asdict(job.clean),
        splits={name: asdict(r) for name, r in reports.items()},
        direction_splits={name: {d: asdict(r) for d, r in mine.items()}
                          for name, mine in by_direction.items()},
        # each direction's forced decoder start, which training feeds (tfm.data.batching)
        language_marking=job.marking if coded else None,
        decoder_starts=[m.start for m in job.codes or ()] if coded else None)


def _total(reports: Iterable[SplitReport]) -> SplitReport:
    """The sum of several reports (a split's, over its directions)."""
    total = SplitReport()
    for r in reports:
        total.read += r.read
        total.kept += r.kept
        for k, v in r.dropped.items():
            total.dropped[k] += v
        total.src_tokens += r.src_tokens
        total.tgt_tokens += r.tgt_tokens
        total.invisible_removed += r.invisible_removed
    return total


def _schema(pa: Any, with_text: bool) -> Any:
    ids = pa.list_(pa.int32())
    columns = [("src_ids", ids), ("tgt_ids", ids), ("direction", pa.int16())]
    if with_text:  # validation keeps the text: references for BLEU
        columns += [("src_text", pa.string()), ("tgt_text", pa.string())]
    return pa.schema(columns)


@dataclass(frozen=True)
class _Reading:
    """One corpus of a split as it is read: its direction (an index into the dataset's
    directions), the tag its sources start with, the tags no text may contain."""

    spec: CorpusSpec
    description: str
    direction: int
    source_tag: str | None
    tags: list[str]
    with_text: bool
    prefix: tuple[int, ...] = ()  # ids before each source (a model's language code)
    suffix: tuple[int, ...] = ()  # ids after its EOS
    synthetic_tag: str | None = None  # before each source of a synthetic corpus
    reserved: str | None = None  # the run's synthetic tag: no text may write it


@dataclass
class _EncodedChunk:
    """What tokenizing one chunk of raw pairs gave, pair by pair in corpus order (computed in
    a worker process with --num-proc): ``status`` 0 for a pair to keep, else the reason to
    drop it; ``keys`` identify the normalised pairs for de-duplication (stable across
    processes, unlike ``hash``); ``tag_at``: the first pair that writes a tag inside its text
    (refused), with the tag."""

    status: list[int]
    invisible: int
    keys: list[bytes] | None
    src_ids: list[list[int]]
    tgt_ids: list[list[int]]
    texts: list[tuple[str, str]] | None
    tag_at: tuple[int, str] | None = None


_KEEP, _EMPTY, _TOO_LONG, _RATIO = range(4)
_REASONS = {_EMPTY: "empty", _TOO_LONG: "too long", _RATIO: "length ratio"}


def _encode_chunk(raw: list[tuple[str, str]], vocabs: Vocabularies, clean: CleanConfig,
                  read: _Reading) -> _EncodedChunk:
    """Normalise, tokenize and judge a chunk of raw pairs; a pure function of its inputs."""
    src_norm, tgt_norm = text_normalizer(vocabs.src), text_normalizer(vocabs.tgt)
    invisible = sum(1 for s, t in raw  # removed only by tfm's own normalisation
                    if (src_norm is normalize_text and has_invisible(s))
                    or (tgt_norm is normalize_text and has_invisible(t)))
    pairs = [(src_norm(s), tgt_norm(t)) for s, t in raw]
    tag_at = _tag_inside(pairs, read.tags, read.reserved)
    if tag_at is not None:
        return _EncodedChunk([], invisible, None, [], [], None, tag_at)
    live = [i for i, (s, t) in enumerate(pairs) if s and t]
    src_ids = encode_batch(vocabs.src, [tagged(tagged(pairs[i][0], read.source_tag),
                                               read.synthetic_tag) for i in live])
    tgt_ids = encode_batch(vocabs.tgt, [pairs[i][1] for i in live])
    status = [_EMPTY] * len(pairs)
    for i, src, tgt in zip(live, src_ids, tgt_ids):
        longest, shortest = max(len(src), len(tgt)), min(len(src), len(tgt))
        if not shortest:  # a side a SentencePiece segmenter leaves no piece of (only spaces)
            continue
        if longest > clean.max_length:
            status[i] = _TOO_LONG
        elif clean.max_ratio and (longest + 1) / (shortest + 1) > clean.max_ratio:
            status[i] = _RATIO
        else:
            status[i] = _KEEP
    ids = dict(zip(live, zip(src_ids, tgt_ids)))
    kept = [i for i in range(len(pairs)) if status[i] == _KEEP]
    keys = None
    if clean.dedup:  # every non-empty pair: a duplicate of a dropped pair is a duplicate too
        keys = [hashlib.blake2b(f"{s}\t{t}".encode(), digest_size=16).digest() if s and t
                else b"" for s, t in pairs]
    return _EncodedChunk(status, invisible, keys, [ids[i][0] for i in kept],
                         [ids[i][1] for i in kept],
                         [pairs[i] for i in kept] if read.with_text else None)


def _tag_inside(pairs: list[tuple[str, str]], tags: list[str], reserved: str | None = None
                ) -> tuple[int, str] | None:
    """The first pair whose text writes one of the tokenizer's tags (or the ``reserved``
    synthetic tag), and the tag: the tokenizer would read it as the tag itself, so a corpus
    may not contain one."""
    if not tags and reserved is None:
        return None
    for i, (s, t) in enumerate(pairs):
        for text in (s, t):
            found = find_tag(text) if tags else None
            if found is not None and found in tags:
                return i, found
            if reserved is not None and reserved in text:
                return i, reserved
    return None


# One worker process's tokenizers, set once by its initializer (--num-proc).
_worker_vocabs: Vocabularies | None = None


def _init_worker(src_json: str, tgt_json: str | None) -> None:
    global _worker_vocabs
    src = tokenizer_from_json(src_json)
    _worker_vocabs = Vocabularies(src, tokenizer_from_json(tgt_json)) if tgt_json else \
        Vocabularies.shared(src)


def _encode_in_worker(raw: list[tuple[str, str]], clean: CleanConfig, read: _Reading
                      ) -> _EncodedChunk:
    assert _worker_vocabs is not None
    return _encode_chunk(raw, _worker_vocabs, clean, read)


def _encoded_chunks(read: _Reading, vocabs: Vocabularies, clean: CleanConfig,
                    num_proc: int) -> Iterator[_EncodedChunk]:
    """Every chunk of the corpus encoded, in corpus order: here (num_proc 1, where the
    tokenizers library already uses every core), or by ``num_proc`` worker processes that
    each normalise and tokenize a chunk at a time, a few chunks ahead of the writer."""
    if num_proc <= 1:
        for raw in batched(iter_pairs(read.spec), _CHUNK):
            yield _encode_chunk(raw, vocabs, clean, read)
        return
    import multiprocessing
    import os
    from collections import deque

    # Fresh interpreters: a fork would copy the tokenizers library's thread pool, which
    # deadlocks; each worker tokenizes single-threaded, the processes are the parallelism.
    os.environ["TOKENIZERS_PARALLELISM"] = "false"
    context = multiprocessing.get_context("spawn")
    # (an imported MarianMT vocabulary is one vocabulary, but each side has its segmenter)
    init = (tokenizer_to_json(vocabs.src),
            None if vocabs.src is vocabs.tgt else tokenizer_to_json(vocabs.tgt))
    with context.Pool(num_proc, initializer=_init_worker, initargs=init) as pool:
        pending: deque = deque()
        for raw in batched(iter_pairs(read.spec), _CHUNK):
            pending.append(pool.apply_async(_encode_in_worker, (raw, clean, read)))
            if len(pending) >= 2 * num_proc:  # bounded memory: a few chunks in flight
                yield pending.popleft().get()
        while pending:
            yield pending.popleft().get()


def _tokenized_chunks(read: _Reading, vocabs: Vocabularies, clean: CleanConfig,
                      report: SplitReport, seen: set[bytes], num_proc: int = 1
                      ) -> Iterator[dict[str, list]]:
    """Arrow-ready columns of the kept pairs, chunk by chunk, counting into ``report`` (its
    direction's, which may gather several corpora). De-duplication happens here, in corpus
    order, so that the result does not depend on ``num_proc``: a pair is a duplicate if an
    equal non-empty pair of the same direction came before it (``seen``: the direction's
    pairs so far)."""
    for chunk in _encoded_chunks(read, vocabs, clean, num_proc):
        if chunk.tag_at is not None:
            line, found = chunk.tag_at
            what = "synthetic-pair" if found == read.reserved else "target-language"
            raise DataError(f"{read.description}, pair {report.read + line + 1}: the text "
                            f"writes the {what} tag {found}, which the tokenizer "
                            "reads as the tag itself; tfm prepare adds the tags, remove it "
                            "from the corpus")
        report.read += len(chunk.status)
        report.invisible_removed += chunk.invisible
        out: dict[str, list] = {"src_ids": [], "tgt_ids": [], "direction": []}
        if read.with_text:
            out["src_text"], out["tgt_text"] = [], []
        kept = 0  # index into the chunk's kept pairs
        for i, status in enumerate(chunk.status):
            if status == _EMPTY:
                report.dropped["empty"] += 1
                continue
            if chunk.keys is not None:
                if chunk.keys[i] in seen:
                    report.dropped["duplicate"] += 1
                    kept += status == _KEEP
                    continue
                seen.add(chunk.keys[i])
            if status != _KEEP:
                report.dropped[_REASONS[status]] += 1
                continue
            src, tgt = chunk.src_ids[kept], chunk.tgt_ids[kept]
            out["src_ids"].append([*read.prefix, *src, EOS_ID, *read.suffix])
            out["tgt_ids"].append(tgt)
            out["direction"].append(read.direction)
            if chunk.texts is not None:
                out["src_text"].append(chunk.texts[kept][0])
                out["tgt_text"].append(chunk.texts[kept][1])
            kept += 1
            report.kept += 1
            report.src_tokens += len(src) + 1 + len(read.prefix) + len(read.suffix)
            report.tgt_tokens += len(tgt) + 1
        yield out


def _fingerprint(corpora: Corpora, tokenizer_path: Path, clean: CleanConfig,
                 marking: LanguageMarking | None = None, synthetic_tag: str | None = None
                 ) -> str:
    h = hashlib.sha256()
    h.update(json.dumps([PREPARE_VERSION, asdict(clean), corpora.weights()]).encode())
    mixed = [(c.synthetic, c.upsample) for c in corpora.items]
    if synthetic_tag is not None or any(m != (False, 1) for m in mixed):  # (else as before)
        h.update(json.dumps(["synthetic", synthetic_tag, mixed]).encode())
    if marking is not None:
        h.update(json.dumps(marking.to_json()).encode())
    for path in vocabulary_files(tokenizer_path):
        h.update(path.read_bytes())
    for c in corpora.items:
        h.update(c.direction.name.encode())
        for name, spec in (("train", c.train), ("valid", c.valid)):
            if spec is not None:
                h.update(name.encode())
                h.update(corpus_fingerprint(spec).encode())
    return h.hexdigest()
