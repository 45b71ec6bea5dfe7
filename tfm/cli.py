"""The ``tfm`` command line: options -> one library call -> rich output. No ML logic here."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from tfm import __version__
from tfm.errors import EXIT_INTERRUPTED, TfmError, UsageError

app = typer.Typer(
    name="tfm",
    help="Train and use Transformer translation models.\n\n"
    "Typical run: train-tokenizer -> prepare -> train -> translate / eval.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)
out = Console()  # results go to stdout
# Progress, reports and errors go to stderr. Written to a file or a pipe (a log), tables get
# room to show whole numbers instead of rich's 80 columns (COLUMNS, if set, still decides).
err = Console(stderr=True, soft_wrap=True,
              width=None if sys.stderr.isatty() or "COLUMNS" in os.environ else 160)

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


@app.callback()
def main(
    ctx: typer.Context,
    debug: Annotated[bool, typer.Option(
        "--debug", help="Show full tracebacks on errors.")] = False,
    version: Annotated[bool, typer.Option(
        "--version", help="Print the version and exit.")] = False,
) -> None:
    """Train and use Transformer translation models."""
    if version:
        out.print(f"tfm {__version__}")
        raise typer.Exit()
    ctx.obj = {"debug": debug}


def _spec(paths: list[str], src_lang: str | None, tgt_lang: str | None, split: str,
          hf_config: str | None, option: str = "--train"):
    from tfm.corpus import CorpusSpec

    if not paths:
        raise UsageError(f"missing {option}: give a corpus (see --help)")
    if len(paths) > 2:
        raise UsageError(f"{option} was given {len(paths)} times; give it once (a prefix, TSV, "
                         "JSONL or dataset) or twice (source file, target file)")
    return CorpusSpec(tuple(paths), src_lang, tgt_lang, split, hf_config)


@app.command("train-tokenizer")
def train_tokenizer_cmd(
    train: CorpusOpt = [],  # noqa: B006 (typer reads the default)
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Where to write the tokenizer (HF tokenizers JSON).")] = Path(
        "tokenizer.json"),
    vocab_size: Annotated[int, typer.Option(
        "--vocab-size", help="Vocabulary size, special tokens included.", min=260)] = 8000,
    min_frequency: Annotated[int, typer.Option(
        "--min-frequency", help="Minimum count of a pair of symbols to be merged.", min=1)] = 2,
    separate: Annotated[bool, typer.Option(
        "--separate/--joint", help="One vocabulary per language, written as NAME.src.json and "
        "NAME.tgt.json beside --output NAME.json, instead of one joint vocabulary (needed to "
        "share embeddings).")] = False,
    src_lang: SrcLangOpt = None,
    tgt_lang: TgtLangOpt = None,
    split: SplitOpt = "train",
    hf_config: HfConfigOpt = None,
) -> None:
    """Train a byte-level BPE tokenizer on the source and target sides of a corpus: one joint
    vocabulary (default) or one per language (--separate).

    Special tokens: <pad>=0, <unk>=1, <s>=2 (begin), </s>=3 (end of sentence). Wherever a
    tokenizer is asked for (--tokenizer NAME.json), separate ones are found as NAME.src.json
    and NAME.tgt.json.
    """
    from tfm.corpus import resolve_corpus
    from tfm.data import train_vocabularies
    from tfm.tokenizer import save_vocabularies

    spec = _spec(train, src_lang, tgt_lang, split, hf_config)
    resolved = resolve_corpus(spec)
    start = time.monotonic()
    with err.status(f"Training BPE on {resolved.description} ..."):
        vocabs = train_vocabularies(spec, vocab_size, min_frequency, separate)
    files = save_vocabularies(vocabs, output)
    sizes = [vocabs.src.get_vocab_size()] if vocabs.joint else [
        vocabs.src.get_vocab_size(), vocabs.tgt.get_vocab_size()]
    written = ", ".join(f"{f} ({n} entries)" for f, n in zip(files, sizes))
    err.print(f"[green]Wrote[/] {written} in {time.monotonic() - start:.1f} s")


@app.command()
def prepare(
    train: CorpusOpt = [],  # noqa: B006
    tokenizer: Annotated[Path, typer.Option(
        "--tokenizer", help="Tokenizer from `tfm train-tokenizer`.")] = Path("tokenizer.json"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Directory for the prepared dataset.")] = Path("data-bin"),
    valid: Annotated[list[str], typer.Option(
        "--valid", help="Validation corpus, in any form --train accepts.",
        show_default=False)] = [],  # noqa: B006
    src_lang: SrcLangOpt = None,
    tgt_lang: TgtLangOpt = None,
    max_tokens: Annotated[int, typer.Option(
        "--max-tokens", help="Drop pairs with a side longer than this many BPE tokens.",
        min=1)] = 250,
    max_ratio: Annotated[float, typer.Option(
        "--max-ratio", help="Drop pairs whose length ratio (tokens+1) exceeds this; 0: keep "
        "all.", min=0)] = 3.0,
    dedup: Annotated[bool, typer.Option(
        "--dedup/--no-dedup", help="Drop repeated pairs.")] = False,
    force: Annotated[bool, typer.Option(
        "--force", help="Prepare again even if the output is up to date.")] = False,
    num_proc: Annotated[int, typer.Option(
        "--num-proc", help="Worker processes that normalise and tokenize chunks of 20,000 "
        "pairs in parallel; 1 tokenizes in this process (the tokenizers library still uses "
        "every core). The result is the same for any value.", min=1)] = 1,
    split: SplitOpt = "train",
    hf_config: HfConfigOpt = None,
) -> None:
    """Clean and tokenize a parallel corpus into a dataset for `tfm train`.

    Drops empty pairs, over-long pairs and pairs of extreme length ratio, and reports how many
    were kept. The output is a Hugging Face dataset on disk (memory-mapped Arrow) with a copy of
    the tokenizer; preparing the same input again is instant.
    """
    from tfm.data import CleanConfig
    from tfm.data import prepare as run_prepare

    train_spec = _spec(train, src_lang, tgt_lang, split, hf_config)
    valid_spec = _spec(valid, src_lang, tgt_lang, "validation" if split == "train" else split,
                       hf_config, "--valid") if valid else None
    start = time.monotonic()
    with err.status("Preparing ..."):
        report = run_prepare(train_spec, tokenizer, output, valid_spec,
                             CleanConfig(max_tokens, max_ratio, dedup), force, num_proc)
    if report.up_to_date:
        err.print(f"{output} is up to date (same input, tokenizer and options); "
                  "use --force to prepare again")
    table = Table(title=f"Prepared {output}", title_justify="left")
    for col in ("split", "read", "kept", "empty", "too long", "ratio", "duplicate",
                "src tokens", "tgt tokens"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for name, r in report.splits.items():
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


@app.command()
def train(
    data: Annotated[Path, typer.Option(
        "--data", "-d", help="Prepared dataset directory from `tfm prepare`.")] = Path(
        "data-bin"),
    output: Annotated[Path, typer.Option(
        "--output", "-o", help="Model directory to write (config, tokenizer, weights, "
        "training state, metrics).")] = Path("model"),
    preset: Annotated[str, typer.Option(
        "--preset", help="Model size: base (the paper's), big, small (Multi30k-sized), tiny.")
    ] = "small",
    resume: Annotated[bool, typer.Option(
        "--resume", help="Continue the run in --output where it stopped.")] = False,
    overwrite: Annotated[bool, typer.Option(
        "--overwrite", help="Start afresh, deleting the run already in --output.")] = False,
    d_model: Annotated[Optional[int], typer.Option(
        help="Override the preset's model width.")] = None,
    n_heads: Annotated[Optional[int], typer.Option(help="Override: attention heads.")] = None,
    encoder_layers: Annotated[Optional[int], typer.Option(
        help="Override: encoder layers.")] = None,
    decoder_layers: Annotated[Optional[int], typer.Option(
        help="Override: decoder layers.")] = None,
    d_ff: Annotated[Optional[int], typer.Option(help="Override: feed-forward width.")] = None,
    dropout: Annotated[Optional[float], typer.Option(help="Override: dropout.")] = None,
    norm_first: Annotated[Optional[bool], typer.Option(
        "--pre-norm/--post-norm", help="LayerNorm before each sub-layer (pre-norm) or after "
        "the residual add (post-norm, as in the paper). Default: the preset's (post-norm).")
    ] = None,
    max_tokens: Annotated[Optional[int], typer.Option(
        help="Batch size in padded token positions.  \\[default: 4096]")] = None,
    update_freq: Annotated[Optional[int], typer.Option(
        help="Batches per optimizer step (gradient accumulation).  \\[default: 1]")] = None,
    lr: Annotated[Optional[float], typer.Option(
        help="Peak learning rate, reached after warmup.  \\[default: 7e-4]")] = None,
    warmup: Annotated[Optional[int], typer.Option(
        "--warmup", help="Linear warmup steps, then the --lr-schedule decay.  \\[default: 4000]")
    ] = None,
    lr_schedule: Annotated[Optional[str], typer.Option(
        "--lr-schedule", help="After warmup: inverse-sqrt (the paper's), or linear / cosine "
        "decay to 0 at the end of the budget (--max-steps, --max-epochs or --max-time, "
        "whichever runs out first).  \\[default: inverse-sqrt]")] = None,
    label_smoothing: Annotated[Optional[float], typer.Option(
        help="Label smoothing epsilon.  \\[default: 0.1]")] = None,
    clip_norm: Annotated[Optional[float], typer.Option(
        help="Clip the gradient norm to this; 0 disables.  \\[default: 1.0]")] = None,
    max_steps: Annotated[Optional[int], typer.Option(
        help="Stop after this many optimizer steps (0: no limit).")] = None,
    max_epochs: Annotated[Optional[int], typer.Option(
        help="Stop after this many epochs (0: no limit).")] = None,
    max_time: Annotated[Optional[float], typer.Option(
        help="Stop after this many minutes of training (0: no limit).")] = None,
    valid_every: Annotated[Optional[int], typer.Option(
        help="Validate every N steps (and at each epoch end).  \\[default: 1000]")] = None,
    patience: Annotated[Optional[int], typer.Option(
        help="Stop after N validations without a better BLEU (0: never).")] = None,
    save_every: Annotated[Optional[int], typer.Option(
        help="Save the training state every N steps.  \\[default: 1000]")] = None,
    keep_last: Annotated[Optional[int], typer.Option(
        help="Numbered checkpoints to keep.  \\[default: 5]")] = None,
    log_every: Annotated[Optional[int], typer.Option(
        help="Log training metrics every N steps.  \\[default: 50]")] = None,
    seed: Annotated[Optional[int], typer.Option(help="Random seed.  \\[default: 1]")] = None,
    device: Annotated[Optional[str], typer.Option(
        help="auto (CUDA if available, else CPU), cpu or cuda.  \\[default: auto]")] = None,
    precision: Annotated[Optional[str], typer.Option(
        help="auto, fp32, bf16 or fp16. auto: bf16 autocast on CUDA (fp16 where bf16 is not "
        "supported), fp32 on CPUs (bf16 autocast is not reliably faster there: --precision "
        "bf16 to try it).  \\[default: auto]")] = None,
    threads: Annotated[Optional[int], typer.Option(
        "--threads", help="CPU threads for torch (0: torch's default).")] = None,
    compile_model: Annotated[Optional[bool], typer.Option(
        "--compile/--no-compile", help="Compile the model with torch.compile (slower start, "
        "often faster steps on GPUs).  \\[default: no-compile]")] = None,
    tensorboard: Annotated[Optional[Path], typer.Option(
        "--tensorboard", help="Also log train/valid scalars as TensorBoard events in this "
        "directory (needs `pip install tensorboard`).")] = None,
) -> None:
    """Train an encoder-decoder Transformer on a prepared dataset.

    Under torchrun (`torchrun --nproc_per_node=N -m tfm train ...`) the N processes train
    together with DistributedDataParallel: gloo on CPU, NCCL on CUDA (one GPU per process).
    """
    from tfm.config import TrainConfig, model_config_from_preset
    from tfm.train import train as run_train

    given = {
        "max_tokens": max_tokens, "update_freq": update_freq, "lr": lr,
        "warmup_steps": warmup, "lr_schedule": lr_schedule,
        "label_smoothing": label_smoothing, "clip_norm": clip_norm,
        "max_steps": max_steps, "max_epochs": max_epochs, "max_time": max_time,
        "valid_every": valid_every, "patience": patience, "save_every": save_every,
        "keep_last": keep_last, "log_every": log_every, "seed": seed, "device": device,
        "precision": precision, "num_threads": threads, "compile": compile_model,
    }
    explicit = {k for k, v in given.items() if v is not None}
    config = TrainConfig(**{k: v for k, v in given.items() if v is not None})
    model_config = None
    if not resume:
        model_config = model_config_from_preset(
            preset, d_model=d_model, n_heads=n_heads, encoder_layers=encoder_layers,
            decoder_layers=decoder_layers, d_ff=d_ff, dropout=dropout, norm_first=norm_first)
    from tfm.progress import RichTrainReporter

    if resume and overwrite:
        raise UsageError("--resume and --overwrite contradict each other; give one")
    result = run_train(data, output, model_config, config, resume, explicit,
                       RichTrainReporter(err), overwrite, tensorboard)
    if not result.is_main:  # another process of a torchrun job: rank 0 reports
        if result.stopped.startswith("interrupted"):
            raise typer.Exit(EXIT_INTERRUPTED)
        return
    best = f", best valid BLEU {result.best_bleu:.2f} at step {result.best_step}" \
        if result.best_bleu is not None else ""
    if result.stopped.startswith("interrupted"):
        launcher = f"torchrun --nproc_per_node={result.processes} -m tfm" \
            if result.processes > 1 else "tfm"
        err.print(f"[yellow]Stopped[/]: {result.stopped} at step {result.step}; checkpoint "
                  f"saved. Continue with: {launcher} train --data {data} --output {output} "
                  "--resume")
        raise typer.Exit(EXIT_INTERRUPTED)
    err.print(f"[green]Done[/]: {result.stopped} at step {result.step} "
              f"({result.elapsed / 60:.1f} min){best}. Model: {result.output}")


@app.command()
def average(
    model: Annotated[Path, typer.Option(
        "--model", "-m", help="Model directory of a training run (with checkpoints/).")
    ] = Path("model"),
    last: Annotated[int, typer.Option(
        "--last", "-n", help="Average this many of the latest numbered checkpoints.", min=1)
    ] = 5,
    output: Annotated[Optional[Path], typer.Option(
        "--output", "-o", help="Model directory to write (default: MODEL/averaged).",
        show_default=False)] = None,
) -> None:
    """Average the weights of the last N numbered checkpoints into a new model directory.

    The average of the last few checkpoints of a run usually translates a little better than
    any one of them. Train with --keep-last N (default 5) to keep N checkpoints.
    """
    from tfm.average import average_checkpoints

    result = average_checkpoints(model, last, output)
    steps = ", ".join(str(s) for s in result.steps)
    err.print(f"[green]Averaged[/] {len(result.steps)} checkpoints (steps {steps}) into "
              f"{result.output}", highlight=False)


@app.command("plot-curve")
def plot_curve(
    model: Annotated[Path, typer.Argument(
        help="Model directory of a training run (with metrics.jsonl).")] = Path("model"),
) -> None:
    """Draw MODEL/learning_curve.png from MODEL/metrics.jsonl.

    Training draws it when it ends; this redraws it, e.g. while a run goes on.
    """
    from tfm.plotting import plot_learning_curve
    from tfm.train import CURVE_FILE, METRICS_FILE

    plot_learning_curve(model / METRICS_FILE, model / CURVE_FILE)
    err.print(f"[green]Wrote[/] {model / CURVE_FILE}", highlight=False)


def _search_options(translator, beam, length_penalty, max_len_a, max_len_b, min_len, n_best,
                    stop_early, attention=False):
    return translator.default_options(beam=beam, length_penalty=length_penalty,
                                      max_len_a=max_len_a, max_len_b=max_len_b,
                                      min_len=min_len, n_best=n_best, stop_early=stop_early,
                                      attention=attention)


ModelOpt = Annotated[Path, typer.Option(
    "--model", "-m", help="Model directory written by `tfm train`.")]
BeamOpt = Annotated[Optional[int], typer.Option(
    "--beam", "-b", help="Beam size; 1 is greedy decoding.  \\[default: the model's, 5]")]
LenPenOpt = Annotated[Optional[float], typer.Option(
    "--length-penalty", help="Scores are divided by length ** this.  \\[default: 1.0]")]
MaxLenAOpt = Annotated[Optional[float], typer.Option(
    "--max-len-a", help="Maximum output length is a * source length + b.  \\[default: 1.5]")]
MaxLenBOpt = Annotated[Optional[int], typer.Option(
    "--max-len-b", help="See --max-len-a.  \\[default: 10]")]
StopEarlyOpt = Annotated[bool, typer.Option(
    "--stop-early/--no-stop-early", help="Beam search: end a sentence once its --n-best best "
    "hypotheses have ended (as OpenNMT-py and CTranslate2 do), or wait for --beam of them (as "
    "fairseq does: slower, sometimes slightly higher BLEU).")]


@app.command()
def translate(
    text: Annotated[Optional[list[str]], typer.Argument(
        help="Sentences to translate. Without any, reads --input or standard input, one "
        "sentence a line.", show_default=False)] = None,
    model: ModelOpt = Path("model"),
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="File to translate, one sentence a line.")] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", help="Write translations here instead of standard output.")] = None,
    beam: BeamOpt = None,
    length_penalty: LenPenOpt = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    min_len: Annotated[int, typer.Option(
        "--min-len", help="Minimum output length in tokens.")] = 0,
    n_best: Annotated[int, typer.Option(
        "--n-best", help="Hypotheses per sentence (jsonl shows them all).")] = 1,
    stop_early: StopEarlyOpt = True,
    fmt: Annotated[str, typer.Option(
        "--format", help="text: one translation a line; jsonl: scores and n-best too.")
    ] = "text",
    alignments: Annotated[bool, typer.Option(
        "--alignments", help="With --format jsonl: add attention-based word alignments "
        "('i-j': source word i, target word j, from 0).")] = False,
    show_attention: Annotated[bool, typer.Option(
        "--show-attention", help="For one sentence: draw the cross-attention matrix in the "
        "terminal (on stderr).")] = False,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="For one sentence: save the cross-attention as a heatmap picture "
        "(PNG).")] = None,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
) -> None:
    """Translate sentences with a trained model (greedy or beam search)."""
    from tfm.translate import Translator

    if fmt not in ("text", "jsonl"):
        raise UsageError(f"--format {fmt}: choose text or jsonl")
    if alignments and fmt != "jsonl":
        raise UsageError("--alignments needs --format jsonl")
    if (show_attention or plot) and len(text or []) != 1:
        raise UsageError("--show-attention and --plot take exactly one sentence, given as an "
                         "argument")
    if text and input:
        raise UsageError("give sentences as arguments or --input, not both")
    if input is not None and not input.is_file():
        raise UsageError(f"--input {input}: no such file")
    translator = Translator(model, device, precision=precision)
    options = _search_options(translator, beam, length_penalty, max_len_a, max_len_b, min_len,
                              n_best, stop_early,
                              attention=alignments or show_attention or plot is not None)
    sink = open(output, "w", encoding="utf-8") if output else sys.stdout  # noqa: SIM115
    try:
        if text:
            results = translator.translate(list(text), options)
        elif input is not None:
            results = translator.translate(_read_lines(input, allow_empty=True), options)
        else:  # standard input: translate line by line as it arrives (pipes, interactive)
            results = translator.translate_stream(sys.stdin, options, chunk=1)
        for r in results:
            if r.truncated:
                err.print("[yellow]warning[/]: a sentence longer than the model's maximum "
                          "length was truncated")
            if fmt == "text":
                sink.write(r.text + "\n")
            else:
                record = {"source": r.source, "translation": r.text,
                          "score": r.hypotheses[0][1],
                          "n_best": [{"translation": t, "score": s} for t, s in r.hypotheses]}
                if alignments and r.alignment is not None:
                    from tfm.alignment import pharaoh

                    record["alignment"] = pharaoh(r.alignment)
                sink.write(json.dumps(record, ensure_ascii=False) + "\n")
            sink.flush()
            if show_attention and r.attention:
                err.print(_attention_table(r))
            if plot is not None and r.attention:
                from tfm.plotting import plot_attention

                plot_attention(r.attention, _readable(r.source_symbols),
                               _readable(r.target_symbols), plot)
                err.print(f"Wrote {plot}")
    finally:
        if output:
            sink.close()


def _readable(symbols: list[str] | None) -> list[str]:
    """Byte-level BPE symbols as text for display, a leading space shown as '▁' (a symbol
    holding part of a multi-byte character shows as '�')."""
    from tokenizers import decoders

    decoder = decoders.ByteLevel()
    texts = []
    for symbol in symbols or []:
        text = symbol if symbol.startswith("<") else decoder.decode([symbol])
        texts.append("▁" + text[1:] if text.startswith(" ") else text)
    return texts


def _attention_table(result) -> Table:
    """The cross-attention of one translation: target symbols down, source symbols across,
    each cell shaded by its weight."""
    table = Table(title="cross-attention (last decoder layer, mean over heads)",
                  title_justify="left", show_lines=False, pad_edge=False)
    table.add_column("")
    for symbol in _readable(result.source_symbols):
        table.add_column(symbol, justify="center", no_wrap=True)
    for symbol, row in zip(_readable(result.target_symbols), result.attention):
        cells = []
        for weight in row:
            level = int(255 - 200 * weight)
            cells.append(f"[on rgb({level},{level},255)]{weight:.2f}[/]")
        table.add_row(symbol, *cells)
    return table


def _read_lines(path: Path, allow_empty: bool = False) -> list[str]:
    from tfm.corpus import read_text_lines

    return read_text_lines(path, allow_empty)


@app.command("eval")
def eval_cmd(
    src: Annotated[Optional[Path], typer.Option(
        "--src", help="Source file to translate (one sentence a line).")] = None,
    ref: Annotated[Optional[Path], typer.Option(
        "--ref", help="Reference translations, aligned with --src.")] = None,
    hyp: Annotated[Optional[Path], typer.Option(
        "--hyp", help="Score these existing translations instead of translating --src.")
    ] = None,
    model: ModelOpt = Path("model"),
    bleu_flag: Annotated[bool, typer.Option("--bleu/--no-bleu", help="Report BLEU.")] = True,
    chrf: Annotated[bool, typer.Option("--chrf", help="Also report chrF.")] = False,
    ter: Annotated[bool, typer.Option("--ter", help="Also report TER.")] = False,
    beam: BeamOpt = None,
    length_penalty: LenPenOpt = None,
    max_len_a: MaxLenAOpt = None,
    max_len_b: MaxLenBOpt = None,
    stop_early: StopEarlyOpt = True,
    save_hyp: Annotated[Optional[Path], typer.Option(
        "--save-hyp", help="Also write the translations to this file.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the scores as JSON.")] = False,
    device: DeviceOpt = "auto",
    precision: PrecisionOpt = "fp32",
) -> None:
    """Translate --src and score it against --ref with sacrebleu (or score --hyp)."""
    from tfm.evaluate import score
    from tfm.translate import Translator

    if ref is None:
        raise UsageError("missing --ref: the reference translations to score against")
    if (src is None) == (hyp is None):
        raise UsageError("give --src (to translate with --model) or --hyp (to score), not both")
    references = _read_lines(ref)
    if hyp is not None:
        hypotheses = _read_lines(hyp)
    else:
        sources = _read_lines(src)
        if len(sources) != len(references):
            raise UsageError(f"{src} has {len(sources)} lines but {ref} has "
                             f"{len(references)}: they must be aligned line by line")
        translator = Translator(model, device, precision=precision)
        options = _search_options(translator, beam, length_penalty, max_len_a, max_len_b, 0, 1,
                                  stop_early)
        start = time.monotonic()
        with err.status(f"Translating {len(sources)} sentences (beam {options.beam}) ..."):
            hypotheses = [t.text for t in translator.translate(sources, options)]
        err.print(f"Translated {len(sources)} sentences in {time.monotonic() - start:.1f} s")
        if save_hyp:
            from tfm.atomic import atomic_write_bytes

            atomic_write_bytes(save_hyp, "".join(h + "\n" for h in hypotheses).encode())
    metrics = [m for m, on in (("bleu", bleu_flag), ("chrf", chrf), ("ter", ter)) if on]
    if not metrics:
        raise UsageError("nothing to report: give --bleu, --chrf or --ter")
    scores = [score(m, hypotheses, references) for m in metrics]
    if as_json:
        out.print_json(json.dumps([asdict(s) for s in scores]))
    else:
        for s in scores:
            out.print(s.text, highlight=False)
            out.print(s.signature, highlight=False)


def _is_click_error(e: Exception) -> bool:
    """Click's own errors, from click or from the copy of click that newer typer vendors."""
    import click

    vendored = getattr(getattr(typer, "_click", None), "exceptions", None)
    types = (click.ClickException,) + ((vendored.ClickException,) if vendored else ())
    return isinstance(e, types)


def run() -> None:
    """Entry point: user errors become one line on stderr and an exit code."""
    debug = "--debug" in sys.argv[1:]
    try:
        code = app(standalone_mode=False)
    except TfmError as e:
        if debug:
            raise
        err.print(f"[bold red]error[/]: {e}", highlight=False, soft_wrap=True)
        sys.exit(e.exit_code)
    except KeyboardInterrupt:
        if debug:
            raise
        err.print("interrupted")
        sys.exit(EXIT_INTERRUPTED)
    except typer.Exit as e:
        sys.exit(e.exit_code)
    except typer.Abort:
        err.print("aborted")
        sys.exit(EXIT_INTERRUPTED)
    except Exception as e:  # click usage errors and the like
        if _is_click_error(e):  # bad command-line syntax: click prints usage and the error
            e.show()
            sys.exit(e.exit_code)
        if isinstance(e, MemoryError):
            err.print("[bold red]error[/]: out of memory; lower --max-tokens")
            sys.exit(5)
        if debug:
            raise
        err.print(f"[bold red]internal error[/]: {type(e).__name__}: {e} "
                  "(run again with --debug for the traceback, and please report it)")
        sys.exit(70)
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "run"]
