"""A prepared dataset directory, read back: the splits' token ids as flat memory-mapped arrays.

``tfm prepare`` (tfm.data.prepare) writes the directory; training reads it through this module.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from tfm.errors import DataError

PREPARE_FILE = "prepare.json"


def read_prepare_info(directory: Path) -> dict[str, Any]:
    path = Path(directory) / PREPARE_FILE
    if not Path(directory).is_dir():
        raise DataError(f"{directory}: no such prepared dataset (make one with `tfm prepare`)")
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError as e:
        raise DataError(f"{directory}: not a prepared dataset (no {PREPARE_FILE}); "
                        "make one with `tfm prepare`") from e
    except json.JSONDecodeError as e:
        raise DataError(f"{path}: not valid JSON ({e}); run `tfm prepare` again") from e


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


def dataset_directions(info: dict[str, Any]) -> list[str]:
    """The directions of a prepared dataset (its prepare.json), in the order its rows'
    direction indices count: ``["en-de"]`` for a bilingual one."""
    if info.get("directions"):
        return list(info["directions"])
    return [f"{info.get('src_lang') or '?'}-{info.get('tgt_lang') or '?'}"]
