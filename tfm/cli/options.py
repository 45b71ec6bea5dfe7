"""Command-line options shared by several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.errors import UsageError

CORPUS = "Corpus"  # --help's panel of the options that name the data

CorpusOpt = Annotated[list[str], typer.Option(
    "--train", help="Training corpus: PREFIX (with -s and -t), two files (--train twice), "
    ".tsv, .jsonl or a dataset.", show_default=False, rich_help_panel=CORPUS)]
SrcLangOpt = Annotated[Optional[str], typer.Option(
    "--src-lang", "-s", help="Source language code (e.g. en); inferred from file names "
    "like train.en.gz when possible.", rich_help_panel=CORPUS)]
TgtLangOpt = Annotated[Optional[str], typer.Option(
    "--tgt-lang", "-t", help="Target language code (e.g. de).", rich_help_panel=CORPUS)]
SplitOpt = Annotated[str, typer.Option(
    "--split", help="Split to read from a Hugging Face dataset.", rich_help_panel=CORPUS)]
HfConfigOpt = Annotated[Optional[str], typer.Option(
    "--hf-config", help="Configuration name of a hub dataset (e.g. de-en).",
    rich_help_panel=CORPUS)]
GlossaryOpt = Annotated[Optional[Path], typer.Option(
    "--glossary", help="A TSV file of terms (source, tab, target): each source term found "
    "makes its target term a constraint.", show_default=False, rich_help_panel="Constraints")]


def corpus_spec(paths: list[str], src_lang: str | None, tgt_lang: str | None, split: str,
          hf_config: str | None, option: str = "--train"):
    from tfm.data.corpus import CorpusSpec

    if not paths:
        raise UsageError(f"missing {option}: give a corpus (see --help)")
    if len(paths) > 2:
        raise UsageError(f"{option} was given {len(paths)} times; give it once (a prefix, TSV, "
                         "JSONL or dataset) or twice (source file, target file)")
    return CorpusSpec(tuple(paths), src_lang, tgt_lang, split, hf_config)


def run_corpora(corpora: list | None, train: list[str], valid: list[str], src_lang: str | None,
                tgt_lang: str | None, split: str, hf_config: str | None):
    """The corpora of a command: a run config's ``corpora:`` list, or the command line's one
    corpus (--train, --valid, --src-lang, --tgt-lang), never both."""
    from tfm.data.directions import corpora_from_config, single_corpus

    if corpora is not None:
        given = [o for o, v in (("--train", train), ("--valid", valid), ("--src-lang", src_lang),
                                ("--tgt-lang", tgt_lang)) if v]
        if given:
            raise UsageError(f"{given[0]} and the config's corpora: both name the data; give "
                             "the corpora in one place")
        return corpora_from_config(corpora, split, hf_config)
    train_spec = corpus_spec(train, src_lang, tgt_lang, split, hf_config)
    valid_spec = corpus_spec(valid, src_lang, tgt_lang,
                             "validation" if split == "train" else split, hf_config,
                             "--valid") if valid else None
    return single_corpus(train_spec, valid_spec, src_lang, tgt_lang)


def describe(corpora) -> str:
    """The corpora as a progress line names them."""
    from tfm.data.corpus import resolve_corpus

    if len(corpora.items) == 1:
        return resolve_corpus(corpora.items[0].train).description
    names = ", ".join(d.name for d in corpora.directions)
    return f"{len(corpora.items)} corpora ({names})"
