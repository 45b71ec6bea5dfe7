"""Reading parallel corpora in the shapes people actually have them.

A corpus is given on the command line as one or two paths (a :class:`CorpusSpec`). This module
detects its shape -- two aligned text files, a ``PREFIX`` + languages, a TSV or JSONL file, a
Hugging Face dataset (saved folder, local parquet/csv, or hub name) -- and streams
``(source, target)`` pairs from it without loading it into memory.

Text lines are decoded strictly as UTF-8 and only the line terminator (and a leading BOM) is
removed: cleaning is another module's job. Every problem the user can fix is raised as a
one-line :class:`DataError` (bad data) or :class:`UsageError` (bad options) naming the file.
"""

from __future__ import annotations

import bz2
import gzip
import hashlib
import json
import lzma
import re
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any, TypeVar

from tfm.errors import DataError, UsageError

T = TypeVar("T")

_OPENERS: dict[str, Callable[..., IO[bytes]]] = {
    ".gz": gzip.open, ".xz": lzma.open, ".bz2": bz2.open,
}
# gzip.BadGzipFile is an OSError; zlib.error comes from corrupted deflate data.
_READ_ERRORS = (EOFError, OSError, lzma.LZMAError, zlib.error)
_BOM = b"\xef\xbb\xbf"
_HF_FILE_FORMATS = {".parquet": "parquet", ".csv": "csv"}
_DATA_SUFFIXES = {".tsv", ".jsonl", ".json", *_HF_FILE_FORMATS, *_OPENERS}
# Extensions that look like language codes but are not.
_NOT_LANGS = {"txt", "tsv", "csv", "json", "tok", "raw", "out", "src", "tgt", "ref", "hyp", "bpe",
              "sgm", "xml", "log", "dat", "tmp", "bak", "gz", "xz", "bz2", "md"}
_LANG_RE = re.compile(r"^[a-z]{2,3}([_-][A-Za-z0-9]{2,4})?$")


@dataclass(frozen=True)
class CorpusSpec:
    """Where a parallel corpus lives and which languages to take from it."""

    paths: tuple[str, ...]  # what the user gave on the command line: 1 or 2 entries
    src_lang: str | None = None
    tgt_lang: str | None = None
    split: str = "train"  # for HF DatasetDict folders / hub datasets
    hf_config: str | None = None  # hub dataset config name, e.g. "de-en"


@dataclass(frozen=True)
class ResolvedCorpus:
    """What a :class:`CorpusSpec` turned out to be: its kind, languages and local files."""

    kind: str  # "text" | "tsv" | "jsonl" | "hf"
    src_lang: str | None
    tgt_lang: str | None
    files: tuple[Path, ...]  # the local files read (empty for a hub dataset)
    description: str  # short human description for reports


# ---------------------------------------------------------------------------- line reading


def _base_suffix(path: Path) -> str:
    """The suffix that says the format, looking through a compression suffix."""
    suffixes = [s.lower() for s in path.suffixes]
    if suffixes and suffixes[-1] in _OPENERS:
        suffixes.pop()
    return suffixes[-1] if suffixes else ""


def _lang_from_name(path: Path) -> str | None:
    """The language code in a name like ``train.en.gz`` or ``corpus.de``, or None."""
    suffix = _base_suffix(path).lstrip(".")
    return suffix if _LANG_RE.match(suffix) and suffix not in _NOT_LANGS else None


def _open_binary(path: Path) -> IO[bytes]:
    """Open ``path`` for binary reading, decompressing by suffix (.gz, .xz, .bz2)."""
    opener = _OPENERS.get(path.suffix.lower(), open)
    try:
        return opener(path, "rb")
    except FileNotFoundError as err:
        raise DataError(f"{path}: no such file; check the path") from err
    except IsADirectoryError as err:
        raise DataError(f"{path} is a directory, not a file; give the corpus file") from err
    except PermissionError as err:
        raise DataError(f"{path}: permission denied; make the file readable") from err
    except OSError as err:
        raise DataError(f"{path}: cannot open ({err.strerror or err})") from err


def _read_error(path: Path, lineno: int, err: BaseException) -> DataError:
    reason = str(err) or type(err).__name__
    if path.suffix.lower() in _OPENERS:
        return DataError(f"{path}: cannot decompress after line {lineno} ({reason}); the file is "
                         "corrupted or truncated: re-download or recreate it")
    return DataError(f"{path}: read error after line {lineno} ({reason})")


def _iter_lines(path: Path) -> Iterator[tuple[int, str]]:
    """Yield ``(lineno, text)`` for each line, streamed, strictly UTF-8, terminator removed.

    A BOM at the start is dropped; "\\n" and "\\r\\n" endings are removed. Raises DataError
    for an empty, missing, unreadable, corrupted or non-UTF-8 file.
    """
    with _open_binary(path) as handle:
        lines = iter(handle)
        lineno = 0
        while True:
            try:
                raw = next(lines, None)
            except _READ_ERRORS as err:
                raise _read_error(path, lineno, err) from err
            if raw is None:
                break
            lineno += 1
            if lineno == 1 and raw.startswith(_BOM):
                raw = raw[len(_BOM):]
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            if raw.endswith(b"\r"):
                raw = raw[:-1]
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as err:
                column = len(raw[: err.start].decode("utf-8")) + 1
                raise DataError(
                    f"{path}:{lineno}: not valid UTF-8 (byte 0x{raw[err.start]:02X} at column "
                    f"{column}); re-encode the file as UTF-8 (e.g. iconv -f latin1 -t utf-8)"
                ) from None
            yield lineno, text
    if lineno == 0:
        raise DataError(f"{path} is empty; give a corpus with at least one line")


def _text_pairs(src: Path, tgt: Path) -> Iterator[tuple[str, str]]:
    """Zip two aligned files, failing with both real line counts if their lengths differ."""
    src_lines, tgt_lines = _iter_lines(src), _iter_lines(tgt)
    count = 0
    for _, src_text in src_lines:
        item = next(tgt_lines, None)
        if item is None:
            src_total = count + 1 + sum(1 for _ in src_lines)
            raise DataError(f"{src} has {src_total} lines but {tgt} has {count}: "
                            "the files must be aligned line by line")
        count += 1
        yield src_text, item[1]
    rest = sum(1 for _ in tgt_lines)
    if rest:
        raise DataError(f"{src} has {count} lines but {tgt} has {count + rest}: "
                        "the files must be aligned line by line")


def _tsv_pairs(path: Path) -> Iterator[tuple[str, str]]:
    for lineno, text in _iter_lines(path):
        columns = text.split("\t")
        if len(columns) != 2:
            raise DataError(f"{path}:{lineno}: expected 2 tab-separated columns "
                            f"(source<TAB>target), found {len(columns)}; fix or remove the line")
        yield columns[0], columns[1]


def _jsonl_pairs(path: Path, src: str, tgt: str) -> Iterator[tuple[str, str]]:
    for lineno, text in _iter_lines(path):
        if not text.strip():
            continue  # blank lines (e.g. a trailing one) carry no pair
        try:
            obj = json.loads(text)
        except json.JSONDecodeError as err:
            raise DataError(f"{path}:{lineno}: not valid JSON ({err.msg} at column {err.colno}); "
                            "each line must be one JSON object") from None
        if not isinstance(obj, dict):
            raise DataError(f"{path}:{lineno}: expected a JSON object, found "
                            f"{type(obj).__name__}; each line must be one JSON object")
        yield _pair_from_record(obj, src, tgt, f"{path}:{lineno}")


def _pair_from_record(record: dict[str, Any], src: str, tgt: str, where: str) -> tuple[str, str]:
    """Take the two languages from a flat record or one with a ``translation`` dict."""
    if not (src in record and tgt in record) and isinstance(record.get("translation"), dict):
        record = record["translation"]
    texts = []
    for lang in (src, tgt):
        if lang not in record:
            present = ", ".join(map(str, record)) or "none"
            raise DataError(f"{where}: no '{lang}' text (keys present: {present}); "
                            "check --src-lang/--tgt-lang")
        if not isinstance(record[lang], str):
            raise DataError(f"{where}: '{lang}' is {type(record[lang]).__name__}, not a string")
        texts.append(record[lang])
    return texts[0], texts[1]


# ---------------------------------------------------------------------------- HF datasets


def _hf_dict_split_dir(folder: Path, split: str) -> Path:
    """The folder of ``split`` inside a ``DatasetDict.save_to_disk`` folder."""
    try:
        splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise DataError(f"{folder}/dataset_dict.json is unreadable ({err}); "
                        "save the dataset again") from err
    if split not in splits:
        raise DataError(f"{folder}: no split '{split}' (available: {', '.join(splits)}); "
                        "choose one with --split")
    return folder / split


def _hf_local_path(spec: CorpusSpec) -> Path:
    """The saved dataset folder (the split's folder for a DatasetDict) or data file to load."""
    path = Path(spec.paths[0]).expanduser()
    if (path / "dataset_dict.json").is_file():
        return _hf_dict_split_dir(path, spec.split)
    return path


def _hf_dataset(spec: CorpusSpec) -> tuple[Any, str]:
    """Load the dataset behind an "hf" spec (lazily importing ``datasets``) and a label."""
    import datasets  # a slow import: only when a HF dataset is really used

    raw = spec.paths[0]
    path = _hf_local_path(spec)
    try:
        if path.is_dir():
            return datasets.load_from_disk(str(path)), str(path)
        if path.is_file():
            fmt = _HF_FILE_FORMATS[_base_suffix(path)]
            return datasets.load_dataset(fmt, data_files=str(path), split="train",
                                         streaming=True), str(path)
    except Exception as err:  # datasets/pyarrow raise many types for a bad local dataset
        raise DataError(f"{raw}: cannot load as a dataset ({_short(err)})") from err
    try:
        return datasets.load_dataset(raw, spec.hf_config, split=spec.split), raw
    except Exception as err:  # network, auth, missing name/config/split: all user-fixable
        raise DataError(f"cannot load dataset {raw} from the Hugging Face hub "
                        f"(offline? misspelled?): {_short(err)}") from err


def _short(err: BaseException) -> str:
    text = (str(err).strip().splitlines() or [type(err).__name__])[0]
    return text if len(text) <= 200 else text[:197] + "..."


def _hf_pairs(spec: CorpusSpec, src: str, tgt: str) -> Iterator[tuple[str, str]]:
    """Stream pairs from a HF dataset: a ``translation`` column or one column per language."""
    dataset, label = _hf_dataset(spec)
    columns = dataset.column_names
    if columns is not None:
        if src in columns and tgt in columns:
            dataset = dataset.select_columns([src, tgt])
        elif "translation" in columns:
            dataset = dataset.select_columns(["translation"])
        else:
            raise DataError(f"{label}: no '{src}'/'{tgt}' columns and no 'translation' column "
                            f"(columns: {', '.join(columns)}); check --src-lang/--tgt-lang")
    rows = iter(dataset)
    index = 0
    while True:
        try:
            row = next(rows, None)
        except Exception as err:  # pyarrow/csv parse errors surface while iterating
            raise DataError(f"{label}: cannot read row {index + 1} ({_short(err)})") from err
        if row is None:
            break
        index += 1
        yield _pair_from_record(row, src, tgt, f"{label}: row {index}")
    if index == 0:
        raise DataError(f"{label} is empty; give a dataset with at least one row")


def _hf_files(spec: CorpusSpec) -> tuple[Path, ...]:
    """The local files behind an "hf" spec (none for a hub dataset)."""
    path = _hf_local_path(spec)
    if path.is_dir():
        return tuple(sorted(p for p in path.rglob("*") if p.is_file()))
    return (path,) if path.is_file() else ()


# ---------------------------------------------------------------------------- resolution


def _require_langs(spec: CorpusSpec, what: str) -> tuple[str, str]:
    if not spec.src_lang or not spec.tgt_lang:
        raise UsageError(f"{what}: pass --src-lang and --tgt-lang to say which languages to read")
    return spec.src_lang, spec.tgt_lang


def _prefix_file(prefix: str, lang: str) -> Path:
    tried = [Path(f"{prefix}.{lang}{ext}") for ext in ("", ".gz", ".xz", ".bz2")]
    for candidate in tried:
        if candidate.is_file():
            return candidate
    raise DataError(f"no {lang} file for prefix {prefix} (tried {', '.join(map(str, tried))}); "
                    "check the prefix and --src-lang/--tgt-lang")


def _looks_local(raw: str) -> bool:
    """Whether a non-existing path is meant as a local file/prefix rather than a hub name."""
    path = Path(raw)
    if raw.startswith((".", "/", "~")) or len(path.parts) > 2:
        return True
    if path.suffix.lower() in _DATA_SUFFIXES:
        return True
    return str(path.parent) != "." and path.parent.is_dir()


def _resolve_missing(spec: CorpusSpec, raw: str) -> ResolvedCorpus:
    """Resolve a single path that does not exist: a prefix, or else a hub dataset name."""
    path = Path(raw).expanduser()
    siblings = sorted(p for p in path.parent.glob(f"{path.name}.*")
                      if path.parent.is_dir() and _lang_from_name(p))
    if siblings or _looks_local(raw):
        if path.suffix.lower() in _DATA_SUFFIXES:
            raise DataError(f"{raw}: no such file; check the path")
        if spec.src_lang and spec.tgt_lang:
            return _resolve_prefix(spec, str(path))
        found = f" (found {', '.join(p.name for p in siblings[:6])})" if siblings else ""
        raise UsageError(f"{raw}: no such file; if it is a prefix of {raw}.SRC and {raw}.TGT "
                         f"files{found}, pass --src-lang and --tgt-lang")
    src_lang, tgt_lang = _require_langs(spec, f"dataset {raw}")
    config = f"{spec.hf_config}, " if spec.hf_config else ""
    return ResolvedCorpus("hf", src_lang, tgt_lang, (),
                          f"hub dataset {raw} ({config}split {spec.split})")


def _resolve_prefix(spec: CorpusSpec, prefix: str) -> ResolvedCorpus:
    src_lang, tgt_lang = _require_langs(spec, prefix)
    src, tgt = _prefix_file(prefix, src_lang), _prefix_file(prefix, tgt_lang)
    return ResolvedCorpus("text", src_lang, tgt_lang, (src, tgt), f"{src.name} + {tgt.name}")


def resolve_corpus(spec: CorpusSpec) -> ResolvedCorpus:
    """Detect what ``spec`` points at and check it cheaply (files exist, languages known).

    Contents are not read here (except a DatasetDict's split list); reading errors surface
    from :func:`iter_pairs`. Hub datasets are not contacted until they are read.
    """
    if len(spec.paths) not in (1, 2) or not all(spec.paths):
        raise UsageError(f"give one corpus path or two aligned files, not {len(spec.paths)} "
                         f"({' '.join(map(repr, spec.paths))})")
    if len(spec.paths) == 2:
        src, tgt = (Path(p).expanduser() for p in spec.paths)
        for path in (src, tgt):
            if not path.exists():
                raise DataError(f"{path}: no such file; check the path")
            if not path.is_file():
                raise DataError(f"{path} is not a regular file; give the corpus file")
        return ResolvedCorpus("text", spec.src_lang or _lang_from_name(src),
                              spec.tgt_lang or _lang_from_name(tgt), (src, tgt),
                              f"{src.name} + {tgt.name}")
    raw = spec.paths[0]
    path = Path(raw).expanduser()
    if path.is_dir():
        if not ((path / "dataset_dict.json").is_file() or (path / "state.json").is_file()):
            raise DataError(f"{path} is a directory but not a dataset saved with save_to_disk "
                            "(no dataset_dict.json or state.json); give a file or a prefix")
        src_lang, tgt_lang = _require_langs(spec, raw)
        files = _hf_files(spec)
        return ResolvedCorpus("hf", src_lang, tgt_lang, files,
                              f"dataset folder {path.name} (split {spec.split})")
    if not path.exists():
        return _resolve_missing(spec, raw)
    suffix = _base_suffix(path)
    if suffix == ".tsv":
        return ResolvedCorpus("tsv", spec.src_lang, spec.tgt_lang, (path,), path.name)
    if suffix in (".jsonl", ".json"):
        src_lang, tgt_lang = _require_langs(spec, raw)
        return ResolvedCorpus("jsonl", src_lang, tgt_lang, (path,), path.name)
    if suffix in _HF_FILE_FORMATS:
        src_lang, tgt_lang = _require_langs(spec, raw)
        return ResolvedCorpus("hf", src_lang, tgt_lang, (path,), path.name)
    raise UsageError(f"{raw} is a single file of unknown layout: give two aligned files "
                     "(SRC TGT), a prefix with --src-lang/--tgt-lang, or a .tsv/.jsonl/.parquet/"
                     ".csv file")


# ---------------------------------------------------------------------------- public readers


def iter_pairs(spec: CorpusSpec) -> Iterator[tuple[str, str]]:
    """Stream ``(source, target)`` pairs. Resolution errors are raised at call time."""
    resolved = resolve_corpus(spec)
    if resolved.kind == "text":
        return _text_pairs(*resolved.files)
    if resolved.kind == "tsv":
        return _tsv_pairs(resolved.files[0])
    src, tgt = _require_langs(spec, spec.paths[0])  # resolve_corpus already checked them
    if resolved.kind == "jsonl":
        return _jsonl_pairs(resolved.files[0], src, tgt)
    return _hf_pairs(spec, src, tgt)


def read_text_lines(path: str | Path, allow_empty: bool = False) -> list[str]:
    """All lines of one text file (plain or compressed), with the same strict decoding as
    corpora; for translation input, references and hypotheses."""
    path = Path(path)
    try:
        return [text for _, text in _iter_lines(path)]
    except DataError:
        if allow_empty and path.is_file() and path.stat().st_size == 0:
            return []
        raise


def iter_texts(spec: CorpusSpec) -> Iterator[str]:
    """Stream every sentence of both sides (source, target alternately), e.g. for tokenizers."""
    pairs = iter_pairs(spec)
    return (text for pair in pairs for text in pair)


def batched(items: Iterable[T], size: int) -> Iterator[list[T]]:
    """``items`` in lists of ``size`` (the last one shorter): a stream worked on a chunk at a
    time, never held in memory whole."""
    chunk: list[T] = []
    for item in items:
        chunk.append(item)
        if len(chunk) == size:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def _hash_file(path: Path) -> tuple[int, str]:
    """The size and sha256 of a file's raw bytes, read in 1 MiB chunks."""
    digest, size = hashlib.sha256(), 0
    try:
        with path.open("rb") as handle:
            while chunk := handle.read(1 << 20):
                digest.update(chunk)
                size += len(chunk)
    except OSError as err:
        raise DataError(f"{path}: cannot read ({err.strerror or err})") from err
    return size, digest.hexdigest()


def corpus_fingerprint(spec: CorpusSpec) -> str:
    """A sha256 hex digest of the corpus: its kind, languages and file names, sizes and bytes.

    It depends on content, not on mtimes or absolute paths, so a copied corpus keeps its
    fingerprint and any changed byte changes it. A hub dataset is identified by name,
    config and split.
    """
    resolved = resolve_corpus(spec)
    identity: dict[str, Any] = {"kind": resolved.kind, "src": resolved.src_lang,
                                "tgt": resolved.tgt_lang}
    if resolved.kind == "hf":
        identity["split"] = spec.split
    if resolved.kind == "hf" and not resolved.files:
        identity.update(name=spec.paths[0], config=spec.hf_config)
    else:
        folder = Path(spec.paths[0]).expanduser()
        root = folder if resolved.kind == "hf" and folder.is_dir() else None
        identity["files"] = [
            [str(f.relative_to(root)) if root else f.name, *_hash_file(f)]
            for f in resolved.files
        ]
    return hashlib.sha256(json.dumps(identity, sort_keys=True).encode("utf-8")).hexdigest()
