"""Decoding commands: ``tfm translate`` and ``tfm eval``."""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional, TextIO

import typer
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    ProgressColumn,
    Task,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text

from tfm.cli.app import app, check_output_file, err, out
from tfm.cli.fields import Fields, derive
from tfm.cli.options import GlossaryOpt
from tfm.cli.run_config import with_config
from tfm.config import EngineOptions, ScoreOptions, SearchOptions
from tfm.errors import UsageError

# --help's panels of the options declared here (the others are their fields').
IO, CONSTRAINTS, LANGUAGES = "Input and output", "Constraints", "Languages"

if TYPE_CHECKING:
    from tfm.data.language_marks import ResolvedLanguage
    from tfm.data.sentences import Passage
    from tfm.decoding.constraints import ConstraintSpec
    from tfm.decoding.glossary import Glossary
    from tfm.decoding.language_id import TargetLanguageCheck
    from tfm.decoding.translator import Source, Translation, Translator
    from tfm.documents.formats import Format


@app.command()
@with_config()
@derive(search=Fields(SearchOptions, given_only=True), engine=Fields(EngineOptions))
def translate(
    text: Annotated[Optional[list[str]], typer.Argument(
        help="Texts to translate, each cut into its sentences. Without any, reads --input "
        "or standard input, a line at a time.", show_default=False)] = None,
    input: Annotated[Optional[Path], typer.Option(
        "--input", "-i", help="File to translate: text a line at a time (or jsonl "
        "requests, one a line), or a document (docs/DOCUMENTS.md).",
        rich_help_panel=IO)] = None,
    input_format: Annotated[str, typer.Option(
        "--input-format", help="auto (by --input's extension: .jsonl[.gz] jsonl, a document "
        "format's that document, any other lines of text), text (lines), jsonl, or a document "
        "format: html, xml, markdown, srt, vtt, po, xliff, docx.", rich_help_panel=IO)
    ] = "auto",
    no_split: Annotated[bool, typer.Option(
        "--no-split", help="Translate each line (or text) whole, as one sentence: for a "
        "corpus already one sentence a line.", rich_help_panel=IO)] = False,
    glossary: GlossaryOpt = None,
    prefix: Annotated[Optional[str], typer.Option(
        "--prefix", help="Each translation starts with this text.", show_default=False,
        rich_help_panel=CONSTRAINTS)] = None,
    constraint: Annotated[Optional[list[str]], typer.Option(
        "--constraint", help="A phrase each translation must contain; repeat for more.",
        show_default=False, rich_help_panel=CONSTRAINTS)] = None,
    output: Annotated[Optional[Path], typer.Option(
        "--output", help="Write translations here instead of standard output (whole, once "
        "done: nothing on an error).", rich_help_panel=IO)] = None,
    fmt: Annotated[str, typer.Option(
        "--format", help="text, or jsonl: scores and n-best too.", rich_help_panel=IO)
    ] = "text",
    alignments: Annotated[bool, typer.Option(
        "--alignments", help="With --format jsonl: add word alignments.", rich_help_panel=IO)
    ] = False,
    show_attention: Annotated[bool, typer.Option(
        "--show-attention", help="For one sentence: draw its cross-attention on stderr.",
        rich_help_panel=IO)] = False,
    plot: Annotated[Optional[Path], typer.Option(
        "--plot", help="For one sentence: save its cross-attention as a PNG heatmap.",
        rich_help_panel=IO)] = None,
    target_lang: Annotated[Optional[str], typer.Option(
        "--target-lang", help="A model of several target languages: the one to translate "
        "into, by code or English name (e.g. fr or French; NLLB-200: deu_Latn or German).",
        show_default=False,
        rich_help_panel=LANGUAGES)] = None,
    source_lang: Annotated[Optional[str], typer.Option(
        "--source-lang", help="NLLB-200 and M2M100 models: the sentences' language, by the "
        "model's code or English name (e.g. eng_Latn or English).", show_default=False,
        rich_help_panel=LANGUAGES)] = None,
    *,
    search: dict[str, Any],  # SearchOptions' options, those given
    engine: EngineOptions,
) -> None:
    """Translate sentences with a trained model.

    Greedy or beam search; options in detail: docs/CLI.md#tfm-translate."""
    _check_options(text, input, fmt, alignments, show_attention, plot)
    check_output_file(output, "--output")
    check_output_file(plot, "--plot")
    document = _document_format(input, input_format, per_line=bool(
        fmt != "text" or alignments or constraint or prefix))
    if document is not None:
        _check_document_options(document, input, output, fmt, constraint, prefix, alignments)
    jsonl = document is None and _input_is_jsonl(input, input_format)
    terms = _load_glossary(glossary)
    translator, options = _load_decoder(
        engine, search, attention=alignments or show_attention or plot is not None)
    ask = _Asks(constraint, prefix, terms, _resolve(translator, target_lang, source_lang))
    # A line is cut into its sentences, unless it is one (--no-split, a jsonl request) or what
    # is asked of it holds for it whole (constraints, a prefix, its attention drawn).
    ask.split = not (no_split or jsonl or constraint or prefix or show_attention or plot)
    if document is not None:
        assert input is not None
        _translate_document(translator, options, ask, engine, document, input, output)
        return
    unmet = _translate_lines(translator, options, ask, engine, text, input, jsonl, output,
                             (fmt, alignments, show_attention, plot))
    if unmet:
        err.print(f"[yellow]warning[/]: {unmet} translation{'s' if unmet > 1 else ''} miss a "
                  "constraint: the phrases do not all fit the length limit (--max-len-a/b); "
                  "--format jsonl says which", highlight=False)


def _translate_lines(translator: Translator, options: SearchOptions, ask: _Asks,
                     engine: EngineOptions, text: list[str] | None, input: Path | None,
                     jsonl: bool, output: Path | None,
                     how: tuple[str, bool, bool, Path | None]) -> int:
    """The arguments, --input's lines or standard input's, each line translated sentence by
    sentence and written as a line (``how``: --format, --alignments, --show-attention,
    --plot); --output written whole at the end, so that an error or Ctrl-C leaves it as it
    was. Returns the number of sentences that miss a constraint."""
    import io

    from tfm.decoding.passages import rejoined

    # Everything read and checked before anything is written: bad input writes nothing.
    request = (_read_request(translator, options, ask, text, input, jsonl)
               if text or input is not None else None)
    sink = io.StringIO() if output else sys.stdout
    if request is None:  # standard input: translated line by line as it arrives
        results: Iterable[tuple[Translation, list[Translation]]] = _stream(
            translator, options, ask)
    else:
        passages, sources = request
        results = rejoined(passages, _translated(translator, sources, options, engine,
                                                 progress=not text))
    unmet = _write(results, sink, *how)
    if output:
        from tfm.atomic import atomic_write_bytes

        atomic_write_bytes(output, sink.getvalue().encode("utf-8"))
    return unmet


def _check_options(text: list[str] | None, input: Path | None, fmt: str, alignments: bool,
                   show_attention: bool, plot: Path | None) -> None:
    """Options of ``translate`` that contradict each other, refused before the model loads."""
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


def _load_glossary(path: Path | None) -> Glossary | None:
    if path is None:
        return None
    from tfm.decoding.glossary import load_glossary

    return load_glossary(path)


@dataclass
class _Asks:
    """What ``translate``'s options ask of every sentence: --constraint phrases (added to a
    jsonl line's own), --prefix (a jsonl line's own wins), --glossary terms, the languages of
    --target-lang and --source-lang, resolved once; whether a line is cut into its sentences
    (``split``)."""

    phrases: list[str] | None
    prefix: str | None
    glossary: Glossary | None
    language: ResolvedLanguage
    split: bool = True

    def passages(self, translator: Translator, texts: list[str]) -> list[Passage]:
        """The texts as the sentences to translate, cut by the rules of the source's language
        (--source-lang's, else the model's)."""
        from tfm.decoding.passages import cut

        return cut(texts, self.split, self.language.source or translator.info.src_lang)

    def of(self, own: list[ConstraintSpec | None]) -> list[ConstraintSpec | None]:
        """Each sentence's phrases and prefix, from its own request (``own``) and the
        options."""
        from tfm.decoding.constraints import ConstraintSpec

        return [ConstraintSpec([*(o.phrases if o else []), *(self.phrases or [])],
                               o.prefix if o is not None and o.prefix is not None
                               else self.prefix) for o in own]


def _read_request(translator: Translator, options: SearchOptions, ask: _Asks,
                  text: list[str] | None, input: Path | None, jsonl: bool
                  ) -> tuple[list[Passage], list[Source]]:
    """The texts given as arguments, or read from --input (lines of text or jsonl requests),
    cut into sentences and prepared with what they ask; a bad one is one line naming it."""
    from tfm.decoding.passages import sentences

    if text:
        lines, own = list(text), [None] * len(text)
    elif jsonl:
        from tfm.decoding.requests import read_requests

        lines, own = read_requests(input)
    else:
        lines = _read_lines(input, allow_empty=True)
        own = [None] * len(lines)
        _refuse_binary(input, lines)
    passages = ask.passages(translator, lines)
    # Each sentence asks what its line asks (a line with asks of its own is never cut).
    own = [o for o, p in zip(own, passages) for _ in p.sentences]
    line = [n for n, p in enumerate(passages, 1) for _ in p.sentences]
    sources = _prepared(translator, options, ask, sentences(passages), own,
                        lambda n: f"{input}, line {line[n - 1]}" if input is not None
                        else f"sentence {line[n - 1]}")
    return passages, sources


def _prepared(translator: Translator, options: SearchOptions, ask: _Asks, sentences: list[str],
              own: list[ConstraintSpec | None], where: Callable[[int], str],
              first: int = 0) -> list[Source]:
    """The sentences through the request path (tfm.decoding.requests); a constraint that
    cannot be used is one line naming ``where`` its sentence is."""
    from tfm.data.language_marks import LanguageError
    from tfm.decoding.constraints import ConstraintError
    from tfm.decoding.requests import prepare_request

    try:
        return prepare_request(translator, sentences, options, ask.of(own), ask.glossary,
                               ask.language, first)
    except ConstraintError as e:
        raise UsageError(f"{where((e.sentence or 0) + 1)}: {e}") from None
    except LanguageError as e:  # a sentence's tag: missing or misplaced
        raise UsageError(e.worded(OPTIONS[e.side])) from None


def _stream(translator: Translator, options: SearchOptions, ask: _Asks
            ) -> Iterator[tuple[Translation, list[Translation]]]:
    """Standard input translated as it arrives: a line typed is translated at once, and the
    lines of a file piped in, read while the previous ones are translated, go in batches."""
    from tfm.decoding.passages import rejoined, sentences

    n = 0
    for lines in arriving_lines(sys.stdin):
        passages = ask.passages(translator, [line.rstrip("\r\n") for line in lines])
        line = [n + k for k, p in enumerate(passages, 1) for _ in p.sentences]
        found = sentences(passages)
        sources = _prepared(translator, options, ask, found, [None] * len(found),
                            lambda k, line=line: f"standard input, line {line[k - 1]}")
        n += len(lines)
        yield from rejoined(passages, translator.translate_prepared(sources, options))


def arriving_lines(stream: TextIO, most: int = 512) -> Iterator[list[str]]:
    """The lines of ``stream`` as they arrive: each time, the next line (waited for) and every
    line read after it while the caller was busy, up to ``most``. A thread reads ahead; what it
    fails with (an undecodable byte) is raised here, in order."""
    import queue
    import threading

    lines: queue.Queue[str | BaseException | None] = queue.Queue(maxsize=4 * most)

    def read() -> None:
        try:
            for line in stream:
                lines.put(line)
            lines.put(None)
        except BaseException as e:  # noqa: B036 (handed to the caller's thread)
            lines.put(e)

    threading.Thread(target=read, name="tfm-stdin", daemon=True).start()
    ended = False
    while not ended:
        batch: list[str] = []
        item = lines.get()
        while True:
            if item is None or isinstance(item, BaseException):
                ended = True
                break
            batch.append(item)
            if len(batch) == most or lines.empty():
                break
            item = lines.get()
        if batch:
            yield batch
        if isinstance(item, BaseException):
            raise item


def _translated(translator: Translator, sources: list[Source], options: SearchOptions,
                engine: EngineOptions, progress: bool) -> list[Translation]:
    """The sources translated, with a progress bar and a summary line if ``progress``."""
    if not progress:
        return translator.translate_prepared(sources, options)
    with _translating(len(sources), _search_name(options, engine)) as advance:
        return translator.translate_prepared(sources, options, advance)


def _write(results: Iterable[tuple[Translation, list[Translation]]], sink: TextIO, fmt: str,
           alignments: bool, show_attention: bool, plot: Path | None) -> int:
    """Each line's translation written as it comes (a line of text, or its JSON record), its
    attention drawn or plotted if asked; the number of sentences that miss a constraint."""
    from tfm.decoding.passages import passage_record

    unmet = 0
    for r, parts in results:
        unmet += sum(p.constraints_met is False for p in parts)
        if r.truncated:
            err.print("[yellow]warning[/]: a sentence longer than the model's maximum "
                      "length was truncated")
        if fmt == "text":
            sink.write(r.text + "\n")
        else:
            record = passage_record(r, parts, alignments)
            sink.write(json.dumps(record, ensure_ascii=False) + "\n")
        sink.flush()
        if show_attention and r.attention:
            err.print(_attention_table(r))
        if plot is not None and r.attention:
            from tfm.plotting import plot_attention

            plot_attention(r.attention, _readable(r.source_symbols),
                           _readable(r.target_symbols), plot)
            err.print(f"Wrote {plot}")
    return unmet


# The options that name a language, by side: how a LanguageError is worded here.
OPTIONS = {"target": "--target-lang", "source": "--source-lang"}


def _resolve(translator: Translator, target_lang: str | None, source_lang: str | None
             ) -> ResolvedLanguage:
    """--target-lang and --source-lang resolved against the model, once, before anything is
    read: refused in one line naming the option where the model lacks the language or needs
    one (a model of source tags without --target-lang: each sentence's own tag, checked as
    it is read)."""
    from tfm.data.language_marks import LanguageError

    try:
        return translator.languages.resolve(target_lang, source_lang)
    except LanguageError as e:
        raise UsageError(e.worded(OPTIONS[e.side])) from None


def _input_is_jsonl(path: Path | None, input_format: str) -> bool:
    """Whether --input holds JSONL requests (``auto``: by its extension)."""
    if path is None:
        if input_format == "jsonl":
            raise UsageError("--input-format jsonl needs --input FILE")
        return False
    if input_format == "auto":
        return path.name.endswith((".jsonl", ".jsonl.gz"))
    return input_format == "jsonl"


def _document_format(path: Path | None, input_format: str, per_line: bool = False
                     ) -> Format | None:
    """The document format --input is read in, or None for lines of text or jsonl requests:
    one named by --input-format, or with ``auto`` the one of --input's extension. A file of
    no format tfm knows (``test.en``) is lines; a .txt file is a plain-text document (its line
    endings, a BOM, blank lines kept byte for byte), or lines where ``per_line`` options ask
    for a record, constraints or a prefix a line: the translation is the same."""
    from tfm.documents.formats import FORMATS, format_for, format_names

    names = {f.name for f in FORMATS} - {"text"}  # --input-format text: lines
    if input_format not in {"auto", "text", "jsonl", *names}:
        raise UsageError(f"--input-format {input_format}: choose auto, text, jsonl or a "
                         f"document format ({format_names()})")
    if input_format in names:
        if path is None:
            raise UsageError(f"--input-format {input_format} needs --input FILE")
        return format_for(None, input_format)
    if input_format != "auto" or path is None:
        return None
    suffix = path.suffix.lower()
    found = next((f for f in FORMATS if suffix in f.extensions), None)
    return None if found is None or (found.name == "text" and per_line) else found


def _check_document_options(document: Format, input: Path | None, output: Path | None,
                            fmt: str, constraint: list[str] | None, prefix: str | None,
                            alignments: bool) -> None:
    """Options that a document cannot take, refused before the model loads."""
    if fmt != "text" or alignments:
        raise UsageError(f"--format {fmt} and --alignments are for lines: a document is "
                         f"written in its own format ({document.name})")
    if constraint or prefix:
        raise UsageError("--constraint and --prefix are for sentences, not a document; "
                         "--glossary applies to every sentence of a document")
    if output is None and document.name in BINARY_FORMATS:
        raise UsageError(f"{input}: a {document.name} file is not text: write it to a file "
                         "with --output FILE")


BINARY_FORMATS = ("docx",)  # written to --output only, never to a terminal


def _translate_document(translator: Translator, options: SearchOptions, ask: _Asks,
                        engine: EngineOptions, document: Format, input: Path,
                        output: Path | None) -> None:
    """--input read as a document, translated sentence by sentence with a progress bar, and
    written in its format: to --output whole once done (an error or Ctrl-C leaves nothing
    half-written), or to standard output."""
    from tfm.atomic import atomic_write_bytes
    from tfm.data.language_marks import LanguageError
    from tfm.documents.translate import (
        DocumentWork,
        model_inline_tags,
        model_lexicon,
        model_target,
        translate_document,
    )
    from tfm.errors import DataError

    try:
        data = input.read_bytes()
    except OSError as e:
        raise DataError(f"{input}: cannot read ({e.strerror or e})") from None
    try:
        doc = document.read(data)
    except DataError as e:
        raise DataError(f"{input}: {e}") from None
    except ModuleNotFoundError as e:  # a format this installation lacks
        if not (e.name or "").startswith("tfm."):
            raise
        raise UsageError(f"{input}: this tfm cannot read {document.name} documents yet; "
                         "--input-format text reads it as lines") from None
    work = DocumentWork.of(doc, ask.split, ask.language.source or translator.info.src_lang,
                           ask.language.target or model_target(translator),
                           inline_tags=model_inline_tags(translator),
                           lexicon=model_lexicon(translator))
    try:
        with _translating(len(work.sentences), _search_name(options, engine)) as progress:
            written = translate_document(doc, translator, options, language=ask.language,
                                         glossary=ask.glossary, progress=progress, work=work)
    except LanguageError as e:  # a model of several targets asked none
        raise UsageError(e.worded(OPTIONS[e.side])) from None
    if output is not None:
        atomic_write_bytes(output, written)
    else:
        sys.stdout.buffer.write(written)
        sys.stdout.flush()


def _refuse_binary(path: Path | None, lines: list[str]) -> None:
    """A file that decodes as UTF-8 yet holds NUL bytes (UTF-16 text, a binary file) is not
    text to translate: refused in one line, naming the line."""
    from tfm.errors import DataError

    for number, line in enumerate(lines, 1):
        if "\0" in line:
            raise DataError(f"{path}, line {number}: a NUL byte: not a text file (a binary "
                            "file, or text in UTF-16?); tfm translates UTF-8 text")


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


def _load_decoder(engine: EngineOptions, search: dict[str, Any], **more: Any
                  ) -> tuple[Translator, SearchOptions]:
    """The translator of ``engine`` (--model, --ensemble, --device, --precision, --workers),
    the SearchOptions of the options given in ``search`` and ``more`` (the model's defaults
    fill the rest), and --reverse-model attached to rank the beam's hypotheses anew."""
    from tfm.decoding.engines import load_translator

    translator = load_translator(engine.model, engine.device, engine.precision,
                                 ensemble=engine.ensemble, workers=engine.workers,
                                 shortlist=engine.shortlist, exact_search=engine.exact_search,
                                 cuda_graphs=engine.cuda_graphs)
    options = translator.default_options(**search, **more)
    if engine.reverse_model:
        from tfm.decoding.rerank import attach_reverse_model

        attach_reverse_model(translator, engine.reverse_model, engine.reverse_weight,
                             engine.device, engine.precision, options.beam)
    return translator, options


def _read_lines(path: Path, allow_empty: bool = False) -> list[str]:
    from tfm.data.corpus import read_text_lines

    return read_text_lines(path, allow_empty)


@app.command("eval")
@with_config()
@derive(report=Fields(ScoreOptions),
        search=Fields(SearchOptions, given_only=True, exclude=("n_best",)),
        engine=Fields(EngineOptions))
def eval_cmd(
    src: Annotated[Optional[Path], typer.Option(
        "--src", help="Source file to translate (one sentence a line).",
        rich_help_panel=IO)] = None,
    ref: Annotated[Optional[Path], typer.Option(
        "--ref", help="Reference translations, aligned with --src.", rich_help_panel=IO)] = None,
    hyp: Annotated[Optional[Path], typer.Option(
        "--hyp", help="Score these translations instead of translating --src.",
        rich_help_panel=IO)] = None,
    save_hyp: Annotated[Optional[Path], typer.Option(
        "--save-hyp", help="Also write the translations to this file.",
        rich_help_panel=IO)] = None,
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print the scores as JSON.", rich_help_panel=IO)] = False,
    target_lang: Annotated[Optional[str], typer.Option(
        "--target-lang", help="The translations' language: --src's (a multilingual model "
        "translates into it), or --hyp's.", show_default=False,
        rich_help_panel=LANGUAGES)] = None,
    tgt_lang: Annotated[Optional[str], typer.Option(
        "--tgt-lang", hidden=True, help="--target-lang's earlier spelling.")] = None,
    source_lang: Annotated[Optional[str], typer.Option(
        "--source-lang", help="NLLB-200 and M2M100 models: the language of --src, by the "
        "model's code (e.g. eng_Latn).", show_default=False, rich_help_panel=LANGUAGES)] = None,
    no_split: Annotated[bool, typer.Option("--no-split", help="Translate each line of --src "
        "whole (else its sentences apart, joined back into the line).", rich_help_panel=IO)
    ] = False,
    *,
    report: ScoreOptions,  # which scores
    search: dict[str, Any],  # SearchOptions' options, those given
    engine: EngineOptions,
) -> None:
    """Score translations of --src (or --hyp) against --ref.

    BLEU, chrF and TER by sacrebleu; --lc-tok adds the lowercased, Moses-tokenized BLEU of the
    Multi30k papers, --off-target the share of translations in another language than the
    target. Options in detail: docs/CLI.md#tfm-eval."""
    from tfm.decoding.scoring import Score, bleu_lc_tok, score

    if tgt_lang is not None:
        if target_lang not in (None, tgt_lang):
            raise UsageError("--tgt-lang is --target-lang spelled as before: give one")
        target_lang = tgt_lang
    if hyp is not None:  # --target-lang names the language of translations made before
        report = replace(report, tgt_lang=target_lang)
    bleu_flag, chrf, ter, lc_tok = report.bleu, report.chrf, report.ter, report.lc_tok
    tgt_lang = report.tgt_lang
    metrics = [m for m, on in (("bleu", bleu_flag), ("chrf", chrf), ("ter", ter)) if on]
    # The options that need the translations' language.
    needs_lang = " and ".join(o for o, on in (("--lc-tok", lc_tok),
                                              ("--off-target", report.off_target)) if on)
    _check_eval_options(src, ref, hyp, save_hyp, engine, report, metrics, needs_lang,
                        source_lang)
    assert ref is not None
    references = _read_lines(ref)
    if hyp is not None:
        hypotheses = _read_lines(hyp)
        language_check = _language_check(report, tgt_lang)
    else:
        sources = _read_lines(src)
        if len(sources) != len(references):
            raise UsageError(f"{src} has {len(sources)} lines but {ref} has "
                             f"{len(references)}: they must be aligned line by line")
        hypotheses, tgt_lang, language_check = _eval_translations(
            sources, engine, search, report, target_lang, needs_lang, source_lang, not no_split)
        if save_hyp:
            from tfm.atomic import atomic_write_bytes

            atomic_write_bytes(save_hyp, "".join(h + "\n" for h in hypotheses).encode())
    scores = [score(m, hypotheses, references) for m in metrics]
    if lc_tok:  # right after the cased BLEU it sits beside
        scores.insert(int(bleu_flag), bleu_lc_tok(hypotheses, references, tgt_lang))
    if language_check is not None:
        off = language_check(hypotheses)
        scores.append(Score("off_target", off.rate, off.text, off.signature))
    if as_json:
        out.print_json(json.dumps([asdict(s) for s in scores]))
    else:
        for s in scores:  # one line each, never wrapped to the terminal's width
            out.print(s.text, highlight=False, soft_wrap=True)
            out.print(s.signature, highlight=False, soft_wrap=True)


def _check_eval_options(src: Path | None, ref: Path | None, hyp: Path | None,
                        save_hyp: Path | None, engine: EngineOptions, report: ScoreOptions,
                        metrics: list[str], needs_lang: str, source_lang: str | None) -> None:
    """``tfm eval``'s options that contradict each other, refused before anything is read
    (``source_lang``: --source-lang, which translates --src)."""
    if ref is None:
        raise UsageError("missing --ref: the reference translations to score against")
    if (src is None) == (hyp is None):
        raise UsageError("give --src (to translate with --model) or --hyp (to score), not both")
    if (engine.ensemble or engine.reverse_model or source_lang) and hyp is not None:
        raise UsageError("--ensemble, --reverse-model and --source-lang translate --src; "
                         "--hyp is scored as it is (--target-lang gives its language)")
    if not metrics and not needs_lang:
        raise UsageError("nothing to report: give --bleu, --chrf, --ter, --lc-tok or "
                         "--off-target")
    if hyp is not None and report.tgt_lang is not None and not needs_lang:
        raise UsageError("--target-lang with --hyp is only used by --lc-tok and --off-target")
    _require_scorers(report)
    check_output_file(save_hyp, "--save-hyp")
    if hyp is not None and needs_lang and report.tgt_lang is None:
        raise UsageError(f"{needs_lang} with --hyp needs --target-lang (the language of "
                         "the translations, e.g. de)")


def _eval_translations(sources: list[str], engine: EngineOptions, search: dict[str, Any],
                       report: ScoreOptions, target_lang: str | None, needs_lang: str,
                       source_lang: str | None = None, split: bool = True
                       ) -> tuple[list[str], str | None, TargetLanguageCheck | None]:
    """``tfm eval``'s translations of --src, through the request path as ``translate``'s;
    with the language they are scored in (--target-lang's, else the model's where --lc-tok
    or --off-target needs one) and --off-target's check of it, made (and an unknown language
    refused) before anything is translated. A model of one target language takes
    --target-lang as that language's name, refused where it records another. A line's
    sentences are translated apart (``split``) and joined back into that line."""
    from tfm.data.language_marks import LanguageError
    from tfm.data.tokenizer import lowercases
    from tfm.decoding.passages import cut, rejoined, sentences
    from tfm.decoding.requests import prepare_request

    translator, options = _load_decoder(engine, search)
    tgt_lang = None
    if target_lang is not None and not translator.languages.targets:
        tgt_lang, target_lang = _only_language(translator, target_lang), None
    language = _resolve(translator, target_lang, source_lang)
    if needs_lang and tgt_lang is None:
        tgt_lang = _target_language(translator, language.target if target_lang else None,
                                    needs_lang, engine)
    language_check = _language_check(report, tgt_lang)  # an unknown language: refused now
    if lowercases(translator.vocabs.tgt) and (report.bleu or report.chrf or report.ter):
        err.print(f"[yellow]note:[/] {engine.model} writes lowercased text (its tokenizer "
                  "lowercases): its cased scores compare that with the cased references; "
                  "--lc-tok scores it as the Multi30k papers do")
    passages = cut(sources, split, language.source or translator.info.src_lang)
    try:
        prepared = prepare_request(translator, sentences(passages), options, language=language)
    except LanguageError as e:  # a sentence's tag: missing or misplaced
        raise UsageError(e.worded(OPTIONS[e.side])) from None
    with _translating(len(prepared), _search_name(options, engine)) as progress:
        results = translator.translate_prepared(prepared, options, progress)
    hypotheses = [line.text for line, _ in rejoined(passages, results)]
    return hypotheses, tgt_lang, language_check


def _only_language(translator, target_lang: str) -> str:
    """--target-lang for a model of one target language: its name, refused in one line where
    the model records another."""
    from tfm.decoding.language_id import language_code

    own = translator.info.tgt_lang
    if own and language_code(own) != language_code(target_lang):
        raise UsageError(f"--target-lang {target_lang}: this model translates into {own} only")
    return language_code(target_lang)


def _require_scorers(report: ScoreOptions) -> None:
    """The optional packages the scores asked for need, checked before anything is read."""
    if report.lc_tok:
        from tfm.decoding.scoring import require_moses

        require_moses()
    if report.off_target:
        from tfm.decoding.language_id import require_langid

        require_langid()


def _target_language(translator, language: str | None, needs: str,
                     engine: EngineOptions) -> str:
    """The language of the translations eval makes: --target-lang's (``language``, as the
    model resolved it), else the one the model records, else a one-line refusal."""
    if language is not None:
        from tfm.decoding.language_id import language_code

        return language_code(language)
    if not translator.info.tgt_lang:
        raise UsageError(f"{needs}: the model in {engine.model} does not record its target "
                         "language: give --target-lang")
    return translator.info.tgt_lang


def _language_check(report: ScoreOptions, lang: str | None):
    """--off-target's language identifier for ``lang``, or None without --off-target."""
    if not report.off_target:
        return None
    from tfm.decoding.language_id import TargetLanguageCheck

    return TargetLanguageCheck(lang)


def _search_name(options: SearchOptions, engine: EngineOptions) -> str:
    """How the sentences are searched, as the summary line says it: 'beam 5, MBR by bleu'."""
    return (f"beam {options.beam}" + (f", MBR by {options.mbr}" if options.mbr else "")
            + (", reranked by the reverse model" if engine.reverse_model else "")
            + (", shortlist" if engine.shortlist else ""))


class _SentenceRate(ProgressColumn):
    """Sentences a second, once there is a rate to show."""

    def render(self, task: Task) -> Text:
        speed = task.finished_speed or task.speed
        return Text("" if speed is None else f"{speed:,.1f} sentences/s")


@contextmanager
def _translating(total: int, how: str) -> Iterator[Callable[[int], None]]:
    """Yields the ``progress`` callback of ``Translator.translate`` for ``total`` sentences.
    On a terminal, stderr shows a bar meanwhile (done, rate, elapsed, ETA); at the end, one
    line says how many sentences took how long (in a log too). Not printed on an error."""
    start = time.monotonic()
    bar = Progress(TextColumn("Translating"), MofNCompleteColumn(), BarColumn(bar_width=24),
                   _SentenceRate(), TimeElapsedColumn(), TextColumn("ETA"),
                   TimeRemainingColumn(), console=err, transient=True,
                   disable=not err.is_terminal)
    task = bar.add_task("translate", total=total)
    with bar:
        yield lambda done: bar.advance(task, done)
    seconds = time.monotonic() - start
    noun = "sentence" if total == 1 else "sentences"
    err.print(f"Translated {total} {noun} ({how}) in {seconds:.1f} s "
              f"({total / max(seconds, 1e-9):,.1f} sentences/s)", highlight=False)
