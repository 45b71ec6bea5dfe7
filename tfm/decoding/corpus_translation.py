"""A whole corpus translated by a model, in chunks, resumably: what ``tfm distill`` (the
teacher's translations of the training sources) and back-translation (a reverse model's of
monolingual targets) both need, written once.

Files, for ``out_path`` = ``DIR/train.de``::

    DIR/train.de.parts/fingerprint.json      what is being translated (below); written first
    DIR/train.de.parts/chunk-000000.jsonl    one record a sentence: {"text", "score", "tokens"}
    ...                                      (each chunk written atomically: whole or absent)
    DIR/train.de                             the translations, one a line   } written at the
    DIR/train.de.scores                      each one's search score        } end, atomically,
    DIR/train.de.json                        the fingerprint, and checksums } this one last

A kill loses at most the chunk in flight: run again with the same arguments, the chunks on
disk are kept and the rest translated. The **fingerprint** says what the translations are of:
the caller's ``identity`` (the model's weights, say), the sources (their number and sha256),
the search (``SearchOptions`` but ``batch_tokens``, which changes no output) and the target
language asked; chunks of another fingerprint are discarded, and a finished translation of the
same fingerprint is returned at once, untranslated (``is_complete``). The caller holds the
directory's lock (tfm.lock) while this runs.

Sentences go through the one request path (``requests.prepare_request``, then
``Translator.translate_prepared``: token-sized batches, the translator's workers), so a chunk's
translations are those ``tfm translate`` would write.
"""

from __future__ import annotations

import hashlib
import json
import shutil
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from tfm.atomic import atomic_write_bytes, remove_stale_temporaries
from tfm.config import SearchOptions
from tfm.data.language_marks import ResolvedLanguage
from tfm.decoding.requests import prepare_request
from tfm.decoding.translator import Translator
from tfm.errors import DataError

__all__ = ["CorpusTranslation", "fingerprint", "is_complete", "read_translations",
           "recorded_fingerprint",
           "translate_corpus"]

FORMAT_VERSION = 1
DEFAULT_CHUNK = 1000  # sentences a chunk: a kill loses at most this many translations


@dataclass(frozen=True)
class CorpusTranslation:
    """What ``translate_corpus`` left on disk: the translations (``path``, one a line), their
    search scores (``scores_path``, one float a line: the search's length-normalised
    log-probability), how many sentences were found already translated (``reused``) and how
    many were translated by this call (``translated``)."""

    path: Path
    scores_path: Path
    reused: int
    translated: int


def fingerprint(sources: Sequence[str], options: SearchOptions, identity: Any = None,
                language: ResolvedLanguage | None = None) -> dict[str, Any]:
    """What a corpus translation is of, as JSON: ``identity`` (the caller's: which model), the
    sources' number and sha256, the search (without ``batch_tokens``: the output is the same
    for any) and the target/source languages asked. Two calls with equal fingerprints write
    the same translations."""
    search = asdict(options)
    search.pop("batch_tokens", None)
    return {"version": FORMAT_VERSION, "identity": identity,
            "sources": {"sentences": len(sources), "sha256": _lines_sha256(sources)},
            "search": search,
            "language": None if language is None else
            {"target": language.target, "source": language.source}}


def translate_corpus(translator: Translator, sources: Sequence[str], out_path: Path,
                     options: SearchOptions, *, identity: Any = None,
                     language: ResolvedLanguage | None = None, chunk: int = DEFAULT_CHUNK,
                     progress: Callable[[int], None] | None = None) -> CorpusTranslation:
    """``sources`` translated by ``translator`` with ``options`` into ``out_path`` (one line a
    sentence, in order) and ``out_path.scores``, ``chunk`` sentences at a time, each chunk
    written atomically under ``out_path.parts/``; resumed from the chunks on disk, and
    nothing done where ``out_path`` already holds this fingerprint's translations.
    ``identity``: JSON that names the model (and anything else the translations depend on),
    kept in the fingerprint; ``language``: the languages asked, resolved by the caller
    (``translator.languages.resolve``); ``progress``: called with the number of sentences
    done each time some are (those found on disk first). Raises what the request path raises
    (a source's tag refused: LanguageError)."""
    if chunk < 1:
        raise ValueError(f"chunk must be 1 or more, not {chunk}")
    out_path = Path(out_path)
    wanted = {**fingerprint(sources, options, identity, language), "chunk": chunk}
    scores_path = _scores_path(out_path)
    if is_complete(out_path, wanted):
        if progress is not None and sources:
            progress(len(sources))
        return CorpusTranslation(out_path, scores_path, len(sources), 0)
    parts = _start_parts(out_path, wanted)
    reused = translated = 0
    for number, start in enumerate(range(0, len(sources), chunk)):
        part = parts / f"chunk-{number:06d}.jsonl"
        size = min(chunk, len(sources) - start)
        if _read_chunk(part, size) is not None:
            reused += size
            if progress is not None:
                progress(size)
            continue
        records = _translate_chunk(translator, sources[start:start + size], options, language,
                                   start, progress)
        atomic_write_bytes(part, "".join(json.dumps(r, ensure_ascii=False) + "\n"
                                         for r in records).encode("utf-8"))
        translated += size
    _finish(out_path, parts, wanted, len(sources), chunk)
    return CorpusTranslation(out_path, scores_path, reused, translated)


def is_complete(out_path: Path, wanted: dict[str, Any]) -> bool:
    """Whether ``out_path`` holds a finished translation whose fingerprint is ``wanted`` (as
    ``translate_corpus`` records it, ``chunk`` included) and whose files are as written (their
    sha256 checked: a damaged file is translated again)."""
    out_path = Path(out_path)
    try:
        record = json.loads(_meta_path(out_path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    if not isinstance(record, dict) or record.get("fingerprint") != wanted:
        return False
    try:
        return (_file_sha256(out_path) == record.get("sha256")
                and _file_sha256(_scores_path(out_path)) == record.get("scores_sha256"))
    except OSError:
        return False


def recorded_fingerprint(out_path: Path) -> dict[str, Any] | None:
    """The fingerprint recorded with a finished translation at ``out_path`` (None: none)."""
    try:
        record = json.loads(_meta_path(Path(out_path)).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record.get("fingerprint") if isinstance(record, dict) else None


def read_translations(out_path: Path) -> tuple[list[str], list[float]]:
    """A finished translation's lines and their scores, in order. DataError naming the file
    where the two disagree in length."""
    out_path = Path(out_path)
    texts = out_path.read_text(encoding="utf-8").split("\n")[:-1]
    scores = [float(s) for s in _scores_path(out_path).read_text(encoding="utf-8").split()]
    if len(texts) != len(scores):
        raise DataError(f"{out_path}: {len(texts)} translations but {len(scores)} scores in "
                        f"{_scores_path(out_path)}; delete both to translate again")
    return texts, scores


def _translate_chunk(translator: Translator, sentences: Sequence[str], options: SearchOptions,
                     language: ResolvedLanguage | None, first: int,
                     progress: Callable[[int], None] | None) -> list[dict[str, Any]]:
    """One chunk through the request path: a record a sentence (text, score, tokens)."""
    prepared = prepare_request(translator, sentences, options, language=language, first=first)
    results = translator.translate_prepared(prepared, options, progress)
    return [{"text": r.text, "score": r.hypotheses[0][1], "tokens": r.target_tokens}
            for r in results]


def _start_parts(out_path: Path, wanted: dict[str, Any]) -> Path:
    """The chunk directory for ``wanted``: kept where it is of the same fingerprint, else
    emptied; temporaries of a killed write removed."""
    parts = _parts_path(out_path)
    mark = parts / "fingerprint.json"
    try:
        same = json.loads(mark.read_text(encoding="utf-8")) == wanted
    except (OSError, ValueError):
        same = False
    if not same and parts.exists():
        shutil.rmtree(parts)
    if same:
        remove_stale_temporaries(parts)
    else:
        atomic_write_bytes(mark, json.dumps(wanted, indent=1).encode("utf-8"))
    return parts


def _read_chunk(part: Path, size: int) -> list[dict[str, Any]] | None:
    """A chunk's records, or None where it is missing or not whole (``size`` records)."""
    try:
        lines = part.read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
    except (OSError, ValueError):
        return None
    if len(records) != size or not all(isinstance(r, dict) and isinstance(r.get("text"), str)
                                       for r in records):
        return None
    return records


def _finish(out_path: Path, parts: Path, wanted: dict[str, Any], total: int,
            chunk: int) -> None:
    """The chunks joined into the translations and scores files, the fingerprint recorded
    last (what makes the translation complete), the chunks removed."""
    texts: list[str] = []
    scores: list[str] = []
    for number, start in enumerate(range(0, total, chunk)):
        records = _read_chunk(parts / f"chunk-{number:06d}.jsonl", min(chunk, total - start))
        if records is None:  # removed under us: the next run translates it again
            raise DataError(f"{parts}: chunk {number} went missing while translating; run "
                            "again to translate it")
        texts += [r["text"] for r in records]
        scores += [repr(float(r["score"])) for r in records]
    text_data = "".join(t + "\n" for t in texts).encode("utf-8")
    score_data = "".join(s + "\n" for s in scores).encode("utf-8")
    meta = _meta_path(out_path)
    meta.unlink(missing_ok=True)  # no record of a fingerprint while the files change
    atomic_write_bytes(_scores_path(out_path), score_data)
    atomic_write_bytes(out_path, text_data)
    record = {"fingerprint": wanted, "sentences": total,
              "sha256": hashlib.sha256(text_data).hexdigest(),
              "scores_sha256": hashlib.sha256(score_data).hexdigest()}
    atomic_write_bytes(meta, json.dumps(record, indent=1).encode("utf-8"))
    shutil.rmtree(parts, ignore_errors=True)


def _lines_sha256(lines: Sequence[str]) -> str:
    digest = hashlib.sha256()
    for line in lines:
        digest.update(line.encode("utf-8"))
        digest.update(b"\n")
    return digest.hexdigest()


def _file_sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _parts_path(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + ".parts")


def _scores_path(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + ".scores")


def _meta_path(out_path: Path) -> Path:
    return out_path.with_name(out_path.name + ".json")
