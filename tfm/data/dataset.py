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
    """A split of a prepared dataset directory."""
    import datasets

    read_prepare_info(directory)
    try:
        dataset = datasets.load_from_disk(str(directory))[split]
    except KeyError as e:
        raise DataError(f"{directory}: the prepared dataset has no {split!r} split") from e
    except (FileNotFoundError, ValueError) as e:
        raise DataError(f"{directory}: unreadable prepared dataset ({e}); "
                        "run `tfm prepare` again") from e
    table = dataset.data.table

    def flat(column: str) -> tuple[np.ndarray, np.ndarray]:
        array = table.column(column).combine_chunks()
        offsets = array.offsets.to_numpy().astype(np.int64)
        # Offsets index into the whole child array, also for a sliced list array.
        return array.values.to_numpy(), offsets

    src_values, src_offsets = flat("src_ids")
    tgt_values, tgt_offsets = flat("tgt_ids")
    texts = {}
    for column in ("src_text", "tgt_text"):
        if column in table.column_names:
            texts[column] = table.column(column).to_pylist()
    direction = None
    if "direction" in table.column_names:  # (datasets prepared before directions have none)
        direction = table.column("direction").to_numpy()
    return TokenizedSplit(src_values, src_offsets, tgt_values, tgt_offsets,
                          texts.get("src_text"), texts.get("tgt_text"), direction)


def dataset_directions(info: dict[str, Any]) -> list[str]:
    """The directions of a prepared dataset (its prepare.json), in the order its rows'
    direction indices count: ``["en-de"]`` for a bilingual one."""
    if info.get("directions"):
        return list(info["directions"])
    return [f"{info.get('src_lang') or '?'}-{info.get('tgt_lang') or '?'}"]
