"""Command-line options shared by several commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from tfm.config import GenerationDefaults
from tfm.errors import UsageError

CorpusOpt = Annotated[list[str], typer.Option(
    "--train", help="Training corpus: PREFIX (with --src-lang/--tgt-lang: PREFIX.en[.gz] + "
    "PREFIX.de[.gz]), two aligned files (give --train twice), a .tsv or .jsonl file, a saved "
    "Hugging Face dataset folder, a .parquet/.csv file, or a hub dataset name.",
    show_default=False)]
SrcLangOpt = Annotated[Optional[str], typer.Option(
    "--src-lang", "-s", help="Source language code (e.g. en); inferred from file names "
    "like train.en.gz when possible.")]
TgtLangOpt = Annotated[Optional[str], typer.Option(
    "--tgt-lang", "-t", help="Target language code (e.g. de).")]
SplitOpt = Annotated[str, typer.Option(
    "--split", help="Split to read from a Hugging Face dataset.")]
HfConfigOpt = Annotated[Optional[str], typer.Option(
    "--hf-config", help="Configuration name of a hub dataset (e.g. de-en).")]
DeviceOpt = Annotated[str, typer.Option(
    "--device", help="auto (CUDA if available, else CPU), cpu or cuda.")]
PrecisionOpt = Annotated[str, typer.Option(
    "--precision", help="Weights for decoding: fp32, bf16, fp16 (CUDA) or auto (bf16 on CUDA "
    "and on CPUs with native bf16, else fp32).")]


def search_options(translator, beam, length_penalty, max_len_a, max_len_b, min_len, n_best,
                    stop_early, attention=False, mbr=None):
    return translator.default_options(beam=beam, length_penalty=length_penalty,
                                      max_len_a=max_len_a, max_len_b=max_len_b,
                                      min_len=min_len, n_best=n_best, stop_early=stop_early,
                                      attention=attention, mbr=mbr)


def rerank_with(translator, options, reverse_models, weight, device, precision) -> None:
    """--reverse-model: the translator's beam hypotheses ranked anew by that model."""
    if reverse_models:
        from tfm.decoding.rerank import attach_reverse_model

        attach_reverse_model(translator, reverse_models, weight, device, precision,
                             options.beam)


_G = GenerationDefaults  # the defaults a model directory starts with


def default(value: object) -> str:
    """The help text's default note, for Optional options whose default is decided later
    (from a config dataclass or the model directory): typer cannot show those itself."""
    return f"  \\[default: {value}]"


ModelOpt = Annotated[Path, typer.Option(
    "--model", "-m", help="A model directory written by `tfm train` (or `tfm average`), or a "
    "CTranslate2 export from `tfm export --to ctranslate2`, decoded with CTranslate2.")]
EnsembleOpt = Annotated[Optional[list[Path]], typer.Option(
    "--ensemble", help="Another model directory (same tokenizer) to decode together with "
    "--model, their probabilities averaged at every step; repeat for more.",
    show_default=False)]
WorkersOpt = Annotated[Optional[int], typer.Option(
    "--workers", help="Batches decoded at once (tfm's search), each by a thread with its share "
    "of the CPU threads: on 2 cores, two 1-thread workers translated 1.1-1.2x (greedy) and 1.3x "
    "(beam 5) as fast as one with 2 threads. The output is the same whatever the number."
    + default("2 on a CPU with 2 threads or more, else 1"), show_default=False)]
BeamOpt = Annotated[Optional[int], typer.Option(
    "--beam", "-b", help="Beam size; 1 is greedy decoding." + default(f"the model's, {_G.beam}"))]
LenPenOpt = Annotated[Optional[float], typer.Option(
    "--length-penalty", help="Beam search: scores are divided by length ** this."
    + default(f"the model's, {_G.length_penalty}"))]
MaxLenAOpt = Annotated[Optional[float], typer.Option(
    "--max-len-a", help="Maximum output length is a * source length + b."
    + default(f"the model's, {_G.max_len_a}"))]
MaxLenBOpt = Annotated[Optional[int], typer.Option(
    "--max-len-b", help="See --max-len-a." + default(f"the model's, {_G.max_len_b}"))]
MbrOpt = Annotated[Optional[str], typer.Option(
    "--mbr", help="Beam search: output the hypothesis the beam's other hypotheses agree with "
    "most (minimum Bayes risk, each weighted by its probability), by this sentence-level "
    "metric: bleu or chrf. Usually a little higher BLEU / chrF than the best-scoring "
    "hypothesis, at a larger beam (e.g. --beam 8).", show_default=False)]
ReverseModelOpt = Annotated[Optional[list[Path]], typer.Option(
    "--reverse-model", help="Beam search: rank each sentence's hypotheses anew with a tfm "
    "model of the other direction (e.g. de->en for an en->de model): each scored by how well "
    "it lets that model read the source back (see --reverse-weight). Repeat for an ensemble. "
    "Most useful with --mbr.", show_default=False)]
ReverseWeightOpt = Annotated[float, typer.Option(
    "--reverse-weight", help="With --reverse-model: hypothesis score + this x the reverse "
    "model's log-probability of the source per source token (chosen on Multi30k's val).")]
GlossaryOpt = Annotated[Optional[Path], typer.Option(
    "--glossary", help="A TSV file of terms (source term, a tab, target term): in each "
    "sentence, every source term found (whole words; a lowercase term in any case) makes its "
    "target term a constraint of the translation (docs/CONSTRAINTS.md). Needs beam search.",
    show_default=False)]
StopEarlyOpt = Annotated[bool, typer.Option(
    "--stop-early/--no-stop-early", help="Beam search: end a sentence once its --n-best best "
    "hypotheses have ended (as OpenNMT-py and CTranslate2 do), or wait for --beam of them (as "
    "fairseq does: slower, sometimes slightly higher BLEU).")]


def corpus_spec(paths: list[str], src_lang: str | None, tgt_lang: str | None, split: str,
          hf_config: str | None, option: str = "--train"):
    from tfm.data.corpus import CorpusSpec

    if not paths:
        raise UsageError(f"missing {option}: give a corpus (see --help)")
    if len(paths) > 2:
        raise UsageError(f"{option} was given {len(paths)} times; give it once (a prefix, TSV, "
                         "JSONL or dataset) or twice (source file, target file)")
    return CorpusSpec(tuple(paths), src_lang, tgt_lang, split, hf_config)
