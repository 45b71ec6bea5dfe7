"""``tfm align DATA --tag-augment SHARE``: a new prepared dataset whose training pairs carry
inline-tag tokens in a drawn share of its rows (Hanneman and Dinu, WMT 2020), so that a model
trained on it learns to copy tags to where the word alignment puts them.

The input dataset is never changed: the output is a copy of it in which the split's drawn rows
have tag tokens around a consistent source span and its aligned target span
(tfm.data.tag_augment), the tokenizer has the tag tokens added (one id each, never split:
the vocabulary grows by ``len(TAG_TOKENS)``), the token alignments are moved with the tags (so
that ``--guided-alignment`` trains on it too), and prepare.json records the tag tokens, which
training writes into the model. A row is drawn, and tagged, by a pure function of (seed, row):
the same seed gives the same dataset, byte for byte. Written in a work directory beside the
output and renamed into place, as `tfm prepare` writes.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from tfm.atomic import write_error
from tfm.data.dataset import read_prepare_info, write_prepare_info
from tfm.data.tag_augment import TAG_TOKENS, draw_tags, place_tags, row_rng, tag_row
from tfm.data.tokenizer import (
    Vocabularies,
    load_vocabularies,
    save_vocabularies,
    segmenter_of,
    tokenizer_from_json,
)
from tfm.data.word_alignment import (
    TokenAlignments,
    WordSide,
    alignment_path,
    load_token_alignments,
    save_token_alignments,
)
from tfm.errors import UsageError
from tfm.layout import TOKENIZER_FILE


@dataclass
class AugmentReport:
    """What `tfm align --tag-augment` wrote: rows read, rows drawn, rows tagged (a drawn row
    with no consistent span stays as it was), tags put in, and the vocabulary's new size."""

    output: Path
    rows: int = 0
    drawn: int = 0
    tagged: int = 0
    pairs: int = 0
    empty: int = 0
    vocab_size: int = 0


def augment_prepared(data_dir: Path, output: Path, share: float, seed: int = 1,
                     split: str = "train") -> AugmentReport:
    """Write ``output``: the prepared dataset ``data_dir`` with ``share`` of the rows of
    ``split`` tagged (see the module). Refused in one line: a share outside (0, 1], an output
    that exists, a split not aligned yet, a dataset already augmented, a tokenizer that cuts
    text with SentencePiece or cannot hold a tag as one token."""
    from tfm.data.dataset import load_split

    data_dir, output = Path(data_dir), Path(output)
    if not 0 < share <= 1:
        raise UsageError(f"--tag-augment {share}: give the share of rows to tag, in (0, 1]")
    if output.exists():
        raise UsageError(f"--output {output} exists: give a new directory (the augmented "
                         "dataset is written whole)")
    info = read_prepare_info(data_dir)
    if info.inline_tags:
        raise UsageError(f"{data_dir} is tag-augmented already: augment the dataset it was "
                         "made from")
    aligned = alignment_path(data_dir, split)
    if not aligned.is_file():
        raise UsageError(f"{data_dir} has no word alignments of its {split} split: run "
                         f"`tfm align {data_dir}` first")
    vocabs = load_vocabularies(data_dir / TOKENIZER_FILE)
    tagged_vocabs, *ids = with_tag_tokens(vocabs, data_dir / TOKENIZER_FILE)
    rows = load_split(data_dir, split)
    links = load_token_alignments(aligned, len(rows))
    report = AugmentReport(output, vocab_size=tagged_vocabs.tgt.get_vocab_size())
    src, tgt, moved = _augment_rows(rows, links, vocabs, ids, share, seed, report)
    extra = {"share": share, "seed": seed, "split": split, "from": info.fingerprint}
    new_info = replace(info, inline_tags=list(TAG_TOKENS), tag_augment=extra,
                       fingerprint=_fingerprint(info.fingerprint, extra))
    _write(data_dir, output, split, (src, tgt, moved), tagged_vocabs, new_info)
    return report


def with_tag_tokens(vocabs: Vocabularies, where: Path
                    ) -> tuple[Vocabularies, dict[str, int], dict[str, int]]:
    """Copies of the tokenizers with ``TAG_TOKENS`` added (not normalised, not special: each
    one token wherever it is written, as the language tags are), and each tag's id on the
    source side and on the target side (the same ids for a joint vocabulary). Refused: a
    SentencePiece tokenizer (its segmenter cuts text before the vocabulary sees it), or one
    that still cuts a tag into several tokens."""
    from tokenizers import AddedToken

    if segmenter_of(vocabs.src) is not None or segmenter_of(vocabs.tgt) is not None:
        raise UsageError(f"{where}: a SentencePiece tokenizer cannot take inline-tag tokens; "
                         "tag augmentation needs a tokenizer of `tfm train-tokenizer`")
    copies = []
    for tok in ([vocabs.src] if vocabs.joint else [vocabs.src, vocabs.tgt]):
        copy = tokenizer_from_json(tok.to_str())
        copy.add_tokens([AddedToken(t, normalized=False, special=False) for t in TAG_TOKENS])
        for tag in TAG_TOKENS:
            pieces = copy.encode(f"a{tag}a", add_special_tokens=False).tokens
            if pieces.count(tag) != 1:
                raise UsageError(f"{where}: the tokenizer cuts the tag token {tag} into "
                                 f"{pieces}; it cannot hold inline tags")
        copies.append(copy)
    tagged = Vocabularies.shared(copies[0]) if len(copies) == 1 else Vocabularies(*copies)
    return (tagged, {t: tagged.src.token_to_id(t) for t in TAG_TOKENS},
            {t: tagged.tgt.token_to_id(t) for t in TAG_TOKENS})


def _augment_rows(rows: Any, links: TokenAlignments, vocabs: Vocabularies,
                  ids: list[dict[str, int]], share: float, seed: int, report: AugmentReport
                  ) -> tuple[list[list[int]], list[list[int]], list[list[tuple[int, int]]]]:
    """Each row's ids and token alignments, the drawn ones tagged."""
    src_side, tgt_side = WordSide(vocabs.src), WordSide(vocabs.tgt)
    sources, targets, moved = [], [], []
    for i in range(len(rows)):
        src, tgt = rows.src(i), rows.tgt(i)
        pairs = [(int(s), int(t)) for s, t in links.row(i)]
        rng = row_rng(seed, i)
        report.rows += 1
        if rng.random() < share:
            report.drawn += 1
            src_words, tgt_words = src_side.words(src)[0], tgt_side.words(tgt)[0]
            words = sorted({(src_words[s], tgt_words[t]) for s, t in pairs})
            drawn = draw_tags(words, max(src_words, default=-1) + 1, rng)
            if drawn:
                report.tagged += 1
                report.pairs += sum(d[0] == "pair" for d in drawn)
                report.empty += sum(d[0] == "empty" for d in drawn)
                placed = place_tags(drawn, src_words, tgt_words)
                src, tgt, pairs = tag_row(src, tgt, pairs, placed, *ids)
        sources.append([int(x) for x in src])
        targets.append([int(x) for x in tgt])
        moved.append(pairs)
    return sources, targets, moved


def _fingerprint(before: str, extra: dict[str, Any]) -> str:
    """The augmented dataset's fingerprint: its input's and how it was augmented."""
    text = json.dumps({"from": before, **extra, "tags": TAG_TOKENS}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _write(data_dir: Path, output: Path, split: str, rows: tuple[list, list, list],
           vocabs: Vocabularies, info: Any) -> None:
    """The output written in a work directory beside it (a copy of ``data_dir`` with the
    split, its alignments, the tokenizer and prepare.json replaced), then renamed into place:
    an error leaves no output."""
    try:
        output.parent.mkdir(parents=True, exist_ok=True)
        work = Path(tempfile.mkdtemp(prefix=f".{output.name}.", dir=output.parent))
    except OSError as e:
        raise (write_error(output, e, kept="nothing was written") or e) from e
    try:
        final = work / "dataset"
        shutil.copytree(data_dir, final)
        for stale in final.glob("*.align.npz"):  # alignments of the rows before tagging
            stale.unlink()
        _write_split(final, split, rows[0], rows[1])
        save_token_alignments(alignment_path(final, split), rows[2])
        for path in final.glob("tokenizer*.json"):
            path.unlink()
        save_vocabularies(vocabs, final / TOKENIZER_FILE)
        write_prepare_info(final, info)
        final.rename(output)
    except OSError as e:
        raise (write_error(output, e, kept="nothing was written") or e) from e
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _write_split(folder: Path, split: str, sources: list[list[int]],
                 targets: list[list[int]]) -> None:
    """The split's Arrow stream replaced by one of the new ids (the other columns as they
    were), and its state.json pointed at it, as ``datasets``' ``save_to_disk`` lays it out."""
    import pyarrow as pa

    from tfm.data.dataset import _read_table

    table = _read_table(folder, split)
    ids = pa.list_(pa.int32())
    table = table.set_column(table.column_names.index("src_ids"), "src_ids",
                             pa.array(sources, type=ids))
    table = table.set_column(table.column_names.index("tgt_ids"), "tgt_ids",
                             pa.array(targets, type=ids))
    state_path = folder / split / "state.json"
    state = json.loads(state_path.read_text(encoding="utf-8"))
    for entry in state["_data_files"]:
        (folder / split / entry["filename"]).unlink()
    name = "data-00000-of-00001.arrow"
    with pa.OSFile(str(folder / split / name), "wb") as sink, \
            pa.ipc.new_stream(sink, table.schema) as writer:
        writer.write_table(table)
    digest = hashlib.sha256(np.asarray([len(s) for s in sources]).tobytes()).hexdigest()
    state.update({"_data_files": [{"filename": name}], "_fingerprint": digest[:16]})
    state_path.write_text(json.dumps(state, indent=2) + "\n", encoding="utf-8")
