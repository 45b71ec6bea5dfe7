"""Data commands: ``tfm train-tokenizer``, ``tfm prepare`` and ``tfm align``."""

from __future__ import annotations

import contextlib
import inspect
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.table import Table

from tfm.cli.app import app, err, writing_into
from tfm.cli.fields import Fields, derive
from tfm.cli.options import (
    CORPUS,
    CorpusOpt,
    HfConfigOpt,
    SplitOpt,
    SrcLangOpt,
    TgtLangOpt,
    describe,
    run_corpora,
)
from tfm.cli.run_config import with_config
from tfm.config import CleanConfig, SearchOptions
from tfm.data.tokenizer import train_tokenizer
from tfm.errors import UsageError

if TYPE_CHECKING:
    from tfm.data.directions import Corpora
    from tfm.data.monolingual import Backtranslation

TOKENIZER, OUTPUT, TAGS = "Tokenizer", "Output", "Tag augmentation"  # --help's panels of
# the options declared here

# The BPE trainer's defaults, read from its signature so that they are written once.
_BPE = {name: p.default for name, p in inspect.signature(train_tokenizer).parameters.items()}


@app.command("train-tokenizer")
@with_config(only=("corpora",))
def train_tokenizer_cmd(
    train: CorpusOpt = [],  # noqa: B006 (typer reads the default)
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Where to write the tokenizer (HF tokenizers JSON).",
        rich_help_panel=TOKENIZER)] = Path("tokenizer.json"),
    vocab_size: Annotated[int, typer.Option(
        "--vocab-size", help="Vocabulary size, special tokens included.", min=260,
        rich_help_panel=TOKENIZER)] = _BPE["vocab_size"],
    min_frequency: Annotated[int, typer.Option(
        "--min-frequency", help="Minimum count of a pair of symbols to be merged.", min=1,
        rich_help_panel=TOKENIZER)] = _BPE["min_frequency"],
    separate: Annotated[bool, typer.Option(
        "--separate/--joint", help="One vocabulary per language (NAME.src.json, "
        "NAME.tgt.json), or one joint vocabulary.", rich_help_panel=TOKENIZER)] = False,
    lowercase: Annotated[bool, typer.Option(
        "--lowercase", help="Lowercase all it encodes, as the Multi30k papers train "
        "(score with `tfm eval --lc-tok`).", rich_help_panel=TOKENIZER)] = False,
    src_lang: SrcLangOpt = None,
    tgt_lang: TgtLangOpt = None,
    split: SplitOpt = "train",
    hf_config: HfConfigOpt = None,
    corpora: list | None = None,  # a run config's corpora (tfm.data.directions)
) -> None:
    """Train a byte-level BPE tokenizer on a parallel corpus.

    One joint vocabulary of both sides (default) or one per language (--separate). Special
    tokens: <pad>=0, <unk>=1, <s>=2 (begin), </s>=3 (end of sentence). Wherever a
    tokenizer is asked for (--tokenizer NAME.json), separate ones are found as NAME.src.json
    and NAME.tgt.json. With several corpora (a run config's corpora:, each language read
    once) that translate into more than one language, the vocabulary also gets a
    target-language tag per target language (>>de<<), one token each.
    """
    from tfm.data.prepare import train_vocabularies
    from tfm.data.tokenizer import save_vocabularies

    runs = run_corpora(corpora, train, [], src_lang, tgt_lang, split, hf_config)
    start = time.monotonic()
    with err.status(f"Training BPE on {describe(runs)} ..."):
        vocabs = train_vocabularies(runs, vocab_size, min_frequency, separate, lowercase)
    files = save_vocabularies(vocabs, output)
    sizes = [vocabs.src.get_vocab_size()] if vocabs.joint else [
        vocabs.src.get_vocab_size(), vocabs.tgt.get_vocab_size()]
    written = ", ".join(f"{f} ({n} entries)" for f, n in zip(files, sizes))
    tags = f"; target-language tags {' '.join(runs.tags)}" if runs.tags else ""
    err.print(f"[green]Wrote[/] {written}{tags} in {time.monotonic() - start:.1f} s",
              highlight=False)


@app.command()
@with_config(only=("corpora",))
@derive(clean=Fields(CleanConfig))
def prepare(
    train: CorpusOpt = [],  # noqa: B006
    tokenizer: Annotated[Path, typer.Option(
        "--tokenizer", help="Tokenizer from `tfm train-tokenizer`.", rich_help_panel=OUTPUT)
    ] = Path("tokenizer.json"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Directory for the prepared dataset.", rich_help_panel=OUTPUT)
    ] = Path("data-bin"),
    valid: Annotated[list[str], typer.Option(
        "--valid", help="Validation corpus, in any form --train accepts.",
        show_default=False, rich_help_panel=CORPUS)] = [],  # noqa: B006
    src_lang: SrcLangOpt = None,
    tgt_lang: TgtLangOpt = None,
    force: Annotated[bool, typer.Option(
        "--force", help="Prepare again even if the output is up to date.",
        rich_help_panel=OUTPUT)] = False,
    num_proc: Annotated[int, typer.Option(
        "--num-proc", help="Worker processes that tokenize in parallel (the same result).",
        min=1, rich_help_panel=OUTPUT)] = 1,
    split: SplitOpt = "train",
    hf_config: HfConfigOpt = None,
    language_token: Annotated[str, typer.Option(
        "--language-token", help="A multilingual run: the target-language tag before the "
        "source, as the decoder's forced first token, or both (source, decoder, both).",
        rich_help_panel=CORPUS)] = "source",
    synthetic_tag: Annotated[Optional[str], typer.Option(
        "--synthetic-tag", help="A token before each source of the synthetic corpora "
        "(synthetic: true), e.g. <BT>.", show_default=False, rich_help_panel=CORPUS)] = None,
    *,
    clean: CleanConfig,  # which pairs to keep: its options
    corpora: list | None = None,  # a run config's corpora (tfm.data.directions)
) -> None:
    """Clean and tokenize a parallel corpus for `tfm train`.

    Drops empty pairs, over-long pairs and pairs of extreme length ratio, and reports how many
    were kept. The output is a Hugging Face dataset on disk (memory-mapped Arrow) with a copy of
    the tokenizer; preparing the same input again is instant. Several corpora and directions
    (a multilingual model) are listed in a run config (--config, corpora:); each pair keeps its
    direction, and where the tokenizer has target-language tags each source starts with its
    own. Back-translated pairs (`tfm backtranslate`) are a corpus marked synthetic: true:
    never validated on, their sources tagged with --synthetic-tag; a corpus's upsample: N
    writes its pairs N times. A corpus of one language (tgt_lang: and reverse_model:) is
    back-translated first, resumably, into OUTPUT.bt/ (docs/BACKTRANSLATION.md).
    """
    from tfm.data.prepare import prepare as run_prepare

    start = time.monotonic()
    with writing_into(output, "tfm prepare"):
        runs = run_corpora(corpora, train, valid, src_lang, tgt_lang, split, hf_config)
        if runs.monolingual:
            runs = _backtranslated(runs, tokenizer, output, language_token, synthetic_tag)
        with err.status("Preparing ..."):
            report = run_prepare(runs, tokenizer, output, None, clean, force, num_proc,
                                 language_token, synthetic_tag)
    if report.up_to_date:
        err.print(f"{output} is up to date (same input, tokenizer and options); "
                  "use --force to prepare again")
    table = Table(title=f"Prepared {output}", title_justify="left")
    for col in ("split", "read", "kept", "empty", "too long", "ratio", "duplicate",
                "src tokens", "tgt tokens"):
        table.add_column(col, justify="right" if col != "split" else "left")
    rows = [(name, r) for name, r in report.splits.items()]
    if len(runs.directions) > 1:  # each direction's row, then the split's
        rows = [(f"{name} {d}", r) for name, by in report.directions.items()
                for d, r in by.items()] + rows
    for name, r in rows:
        table.add_row(name, f"{r.read:,}", f"{r.kept:,}",
                      *(f"{r.dropped[k]:,}" for k in ("empty", "too long", "length ratio",
                                                      "duplicate")),
                      f"{r.src_tokens:,}", f"{r.tgt_tokens:,}")
    err.print(table)
    for name, r in report.splits.items():
        if r.invisible_removed:
            err.print(f"{name}: removed control or zero-width characters from "
                      f"{r.invisible_removed:,} pairs")
    err.print(f"in {time.monotonic() - start:.1f} s")


def _backtranslated(runs: Corpora, tokenizer: Path, output: Path, language_token: str,
                    synthetic_tag: str | None) -> Corpora:
    """The run's monolingual corpora back-translated (tfm.decoding.backtranslation), with
    a bar and a line each on stderr, after prepare's own checks: a mistake costs no work."""
    from tfm.cli.backtranslation import progress_bar
    from tfm.data.prepare import check_prepare
    from tfm.decoding.backtranslation import backtranslate_corpora, work_directory

    check_prepare(runs, tokenizer, output, language_token, synthetic_tag)

    @contextlib.contextmanager
    def progress(bt: Backtranslation, total: int, options: SearchOptions) -> Iterator[Any]:
        err.print(f"Back-translating {bt.where}: {bt.text} ({total:,} lines, {bt.lang} -> "
                  f"{bt.into}) with {bt.reverse_model}, kept in {work_directory(output)}",
                  highlight=False)
        with progress_bar(total, options) as advance:
            yield advance

    runs, reports = backtranslate_corpora(runs, tokenizer, output, progress)
    for report in reports:
        dropped = ", ".join(f"{n:,} {why}" for why, n in report.dropped.items() if n)
        err.print(f"[green]Back-translated[/] {report.written:,} pairs of {report.read:,} "
                  f"lines ({report.reused:,} found done) to {report.files[0]}"
                  + (f"; dropped {dropped}" if dropped else ""), highlight=False)
    return runs


@app.command()
def align(
    data: Annotated[Path, typer.Argument(help="A prepared dataset (from `tfm prepare`).")],
    split: Annotated[str, typer.Option(
        "--split", help="The split to align.", rich_help_panel=OUTPUT)] = "train",
    iterations: Annotated[int, typer.Option(
        "--iterations", help="eflomal's sampling iterations per model (0: its choice by the "
        "corpus size).", min=0, rich_help_panel=OUTPUT)] = 0,
    tag_augment: Annotated[Optional[float], typer.Option(
        "--tag-augment", help="Instead of aligning: write a new dataset (--output) with "
        "inline-tag tokens around aligned spans in this share of the split's rows, from the "
        "alignments stored by a plain `tfm align` (docs/DOCUMENTS.md).", min=0.0, max=1.0,
        show_default=False, rich_help_panel=TAGS)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="With --tag-augment: the new dataset's directory (DATA-tags "
        "by default); DATA is left as it is.", show_default=False,
        rich_help_panel=TAGS)] = None,
    tag_seed: Annotated[int, typer.Option(
        "--tag-seed", help="With --tag-augment: the seed that draws the rows and their "
        "spans (the same seed, the same dataset).", rich_help_panel=TAGS)] = 1,
) -> None:
    """Word-align prepared data (eflomal), or tag-augment it.

    For `tfm train --guided-alignment`.
    Both directions are aligned and symmetrised (grow-diag-final-and); the word alignments are
    mapped onto the tokens training reads and stored beside the split (<split>.align.npz).
    Those of train are also counted into DATA/alignment_lexicon.json.gz, which `tfm train`
    copies into the model: it places a document's inline tags by the words.

    With --tag-augment SHARE (after a plain `tfm align DATA`): a new dataset whose drawn rows
    carry inline-tag tokens (<g1>..</g1>, <x1/>) around a source span and its aligned target
    span, for a model that copies a document's tags (Hanneman and Dinu, 2020).
    """
    start = time.monotonic()
    if tag_augment is None:
        if output is not None:
            raise UsageError("--output is for --tag-augment: `tfm align` stores its "
                             "alignments inside DATA")
        from tfm.data.word_alignment import align_prepared

        with writing_into(data, "tfm align"), err.status(f"Aligning {data} {split} ..."):
            path = align_prepared(data, split, iterations or None)
        err.print(f"wrote {path} in {time.monotonic() - start:.1f} s")
        return
    from tfm.data.tagged_dataset import augment_prepared

    output = output or data.with_name(f"{data.name}-tags")
    with writing_into(output, "tfm align --tag-augment"), \
            err.status(f"Tagging {tag_augment:g} of {data} {split} ..."):
        r = augment_prepared(data, output, tag_augment, tag_seed, split)
    err.print(f"wrote {output}: {r.tagged:,} of {r.rows:,} rows tagged ({r.drawn:,} drawn; "
              f"{r.pairs:,} tag pairs, {r.empty:,} empty tags); vocabulary {r.vocab_size:,} "
              f"in {time.monotonic() - start:.1f} s", highlight=False)
