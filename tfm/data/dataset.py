"""A prepared dataset directory, read back: the splits' token ids as flat memory-mapped arrays.

``tfm prepare`` (tfm.data.prepare) writes the directory; training reads it through this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from tfm.data.language_marks import LanguageMarking
from tfm.errors import DataError, TfmError

PREPARE_FILE = "prepare.json"
# prepare.json's format. 2: control and zero-width characters removed; 3: directions (and,
# for a model of language codes or of a decoder-side tag, the marking and decoder starts).
# Older files read (their missing fields take the defaults below); a newer one is refused.
PREPARE_VERSION = 3


@dataclass
class PrepareInfo:
    """A prepared dataset's metadata (its prepare.json), written by tfm.data.prepare and read
    by training and the shortlist: what was prepared, from what, and how it is marked."""

    fingerprint: str  # of the inputs, the tokenizer and the options: up to date or not
    # each split's pairs (tfm.data.prepare.SplitReport as a dict), all directions together
    splits: dict[str, dict[str, Any]]
    src_lang: str | None = None  # a dataset of one direction's languages
    tgt_lang: str | None = None
    directions: list[str] = field(default_factory=list)  # "en-de", in the rows' index order
    tags: list[str] = field(default_factory=list)  # the tokenizer's target-language tags
    weights: list[float] | None = None  # each direction's sampling weight, if given
    inputs: dict[str, Any] = field(default_factory=dict)  # each split's files, as described
    clean: dict[str, Any] = field(default_factory=dict)  # the CleanConfig, as a dict
    # split -> direction -> its pairs (a SplitReport as a dict)
    direction_splits: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    # A model of language codes or of a decoder-side tag: its marking, and each direction's
    # forced decoder start, which training feeds (tfm.data.batching); None: BOS
    language_marking: LanguageMarking | None = None
    decoder_starts: list[tuple[int, ...]] | None = None
    # A dataset made by `tfm align --tag-augment` (tfm.data.tagged_dataset): its tokenizer's
    # inline-tag tokens, which training records in the model, and how the rows were drawn.
    inline_tags: list[str] = field(default_factory=list)
    tag_augment: dict[str, Any] = field(default_factory=dict)
    prepare_version: int = PREPARE_VERSION

    @property
    def direction_names(self) -> list[str]:
        """The dataset's directions, in the order its rows' direction indices count:
        ``["en-de"]`` for a bilingual one (``?`` for a language it does not record)."""
        if self.directions:
            return list(self.directions)
        return [f"{self.src_lang or '?'}-{self.tgt_lang or '?'}"]

    def to_json(self) -> dict[str, Any]:
        data = {f.name: getattr(self, f.name) for f in fields(self)}
        data.pop("prepare_version")
        data = {"prepare_version": self.prepare_version, **data}
        for name in ("language_marking", "decoder_starts"):
            if data[name] is None:
                del data[name]
        if self.language_marking is not None:
            data["language_marking"] = self.language_marking.to_json()
        if self.decoder_starts is not None:
            data["decoder_starts"] = [list(s) for s in self.decoder_starts]
        return data

    @classmethod
    def from_json(cls, data: Any, where: str) -> PrepareInfo:
        """prepare.json's contents, or one line naming ``where``: of a newer format, or not a
        prepared dataset's. Older formats read, their missing fields at the defaults."""
        again = "run `tfm prepare` again"
        if not isinstance(data, dict):
            raise DataError(f"{where}: unreadable prepared dataset (not an object); {again}")
        version = data.get("prepare_version", 1)
        if not isinstance(version, int) or version > PREPARE_VERSION:
            raise DataError(f"{where}: prepared-data format version {version} is newer than "
                            f"this tfm understands ({PREPARE_VERSION}); upgrade tfm, or {again}")
        missing = [k for k in ("fingerprint", "splits") if k not in data]
        if missing:
            raise DataError(f"{where}: unreadable prepared dataset (no {missing[0]}); {again}")
        known = {f.name for f in fields(cls)}
        try:
            info = cls(**{k: v for k, v in data.items() if k in known})
            marking, starts = data.get("language_marking"), data.get("decoder_starts")
            info.language_marking = None if not marking else LanguageMarking.from_json(marking)
            info.decoder_starts = None if starts is None else [
                tuple(int(i) for i in s) for s in starts]
        except (TypeError, ValueError, TfmError) as e:
            raise DataError(f"{where}: unreadable prepared dataset ({e}); {again}") from e
        return info


def read_prepare_info(directory: Path) -> PrepareInfo:
    """The prepare.json of the prepared dataset ``directory``, or one line naming it: missing,
    not JSON, of a newer format."""
    path = Path(directory) / PREPARE_FILE
    if not Path(directory).is_dir():
        raise DataError(f"{directory}: no such prepared dataset (make one with `tfm prepare`)")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise DataError(f"{directory}: not a prepared dataset (no {PREPARE_FILE}); "
                        "make one with `tfm prepare`") from e
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e}); run `tfm prepare` again") from e
    return PrepareInfo.from_json(data, str(path))


def write_prepare_info(directory: Path, info: PrepareInfo) -> None:
    """Write ``info`` as the prepare.json of ``directory``."""
    (Path(directory) / PREPARE_FILE).write_text(
        json.dumps(info.to_json(), indent=2, ensure_ascii=False) + "\n", encoding="utf-8")


@dataclass
class TokenizedSplit:
    """One split's token ids as flat arrays: row i of a column is values[offsets[i]:offsets[i+1]].

    The arrays view the memory-mapped Arrow files, so a corpus of millions of pairs costs
    almost no memory.
    """

    src_values: np.ndarray
    src_offsets: np.ndarray
    tgt_values: np.ndarray
    tgt_offsets: np.ndarray
    src_text: list[str] | None = None
    tgt_text: list[str] | None = None
    # row i's direction: an index into the dataset's directions (``dataset_directions``);
    # None: one direction, all rows 0
    direction: np.ndarray | None = None

    def __len__(self) -> int:
        return len(self.src_offsets) - 1

    @property
    def src_lengths(self) -> np.ndarray:
        return np.diff(self.src_offsets)

    @property
    def tgt_lengths(self) -> np.ndarray:
        return np.diff(self.tgt_offsets)

    @property
    def directions(self) -> np.ndarray:
        """Each row's direction index (zeros for a dataset of one direction)."""
        if self.direction is None:
            return np.zeros(len(self), dtype=np.int16)
        return self.direction

    def src(self, i: int) -> np.ndarray:
        return self.src_values[self.src_offsets[i]:self.src_offsets[i + 1]]

    def tgt(self, i: int) -> np.ndarray:
        return self.tgt_values[self.tgt_offsets[i]:self.tgt_offsets[i + 1]]


def load_split(directory: Path, split: str) -> TokenizedSplit:
    """A split of a prepared dataset directory.

    ``tfm prepare`` saves the splits with ``datasets``' ``save_to_disk`` (a directory per split:
    its ``state.json`` names the Arrow stream files, read here memory-mapped, as
    ``datasets.load_from_disk`` reads them). Read with pyarrow alone: importing ``datasets``
    was a large share of every ``tfm train``'s start (docs/BENCHMARKS.md, the test suite).
    """
    import pyarrow as pa

    read_prepare_info(directory)
    try:
        table = _read_table(Path(directory), split)
        src_values, src_offsets = _flat(table, "src_ids")
        tgt_values, tgt_offsets = _flat(table, "tgt_ids")
        direction = None
        if "direction" in table.column_names:  # (datasets prepared before directions have none)
            direction = _numpy(table.column("direction").combine_chunks())
    except (OSError, ValueError, KeyError, TypeError, pa.ArrowException) as e:
        raise DataError(f"{directory}: unreadable prepared dataset ({e}); "
                        "run `tfm prepare` again") from e
    texts = {}
    for column in ("src_text", "tgt_text"):
        if column in table.column_names:
            texts[column] = table.column(column).to_pylist()
    return TokenizedSplit(src_values, src_offsets, tgt_values, tgt_offsets,
                          texts.get("src_text"), texts.get("tgt_text"), direction)


def _read_table(folder: Path, split: str) -> Any:
    """The split's Arrow table, its stream files memory-mapped (DataError: no such split)."""
    import pyarrow as pa

    splits = json.loads((folder / "dataset_dict.json").read_text(encoding="utf-8"))["splits"]
    if split not in splits:
        raise DataError(f"{folder}: the prepared dataset has no {split!r} split")
    state = json.loads((folder / split / "state.json").read_text(encoding="utf-8"))
    tables = [pa.ipc.open_stream(pa.memory_map(str(folder / split / entry["filename"])))
              .read_all() for entry in state["_data_files"]]
    return pa.concat_tables(tables) if len(tables) != 1 else tables[0]


def _flat(table: Any, column: str) -> tuple[np.ndarray, np.ndarray]:
    """A list column as its flat values and int64 offsets (row i: values[offsets[i]:
    offsets[i+1]]); the offsets index into the whole child array, also for a sliced one."""
    array = table.column(column).combine_chunks()
    return _numpy(array.values), _numpy(array.offsets).astype(np.int64)


def _numpy(array: Any) -> np.ndarray:
    """An Arrow array of integers without nulls as a read-only numpy view of its data buffer,
    as ``Array.to_numpy`` gives it without importing pandas (which that method does first)."""
    if array.null_count:
        raise ValueError(f"{array.null_count} missing values")
    dtype = np.dtype(str(array.type))
    return np.frombuffer(array.buffers()[1], dtype=dtype, count=len(array),
                         offset=array.offset * dtype.itemsize)
