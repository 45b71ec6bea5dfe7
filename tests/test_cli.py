"""The command line as users meet it: help, the whole pipeline, and one-line errors.

Commands run in a subprocess (``python -m tfm``), exactly as from a shell, so that what reaches
stderr and the exit code are what a user sees.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import tfm

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "data" / "demo"
COMMANDS = ["train-tokenizer", "prepare", "train", "translate", "eval", "average", "plot-curve",
            "backtranslate", "export", "serve"]


def assert_user_error(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """A non-zero exit and one clear line on stderr, without a traceback."""
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert lines[0].startswith("error:")
    for fragment in fragments:
        assert fragment in lines[0], lines[0]


def test_help_lists_every_command() -> None:
    result = tfm("--help")
    assert result.returncode == 0
    for command in COMMANDS:
        assert command in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str) -> None:
    result = tfm(command, "--help")
    assert result.returncode == 0, result.stderr
    assert "--" in result.stdout and "Usage" in result.stdout


@pytest.mark.parametrize("command", COMMANDS)
def test_help_shows_bracketed_text_as_written(command: str) -> None:
    # --help is drawn by rich, which takes "[moses]" in "tfm[moses]" for a style and drops it
    # unless the bracket is escaped.

    import typer.main

    from tfm.cli.app import app
    click_command = typer.main.get_command(app).commands[command]
    written = [click_command.help or "", *(param.help or "" for param in click_command.params)]
    bracketed = {word.replace("\\[", "[") for text in written
                 for word in re.findall(r"\S*\[[^\]\s]*\]\S*", text)}
    shown = tfm(command, "--help", env={"COLUMNS": "1000"}).stdout
    assert [word for word in bracketed if word not in shown] == []


def train_demo_model(work: Path, tokenizer_options: tuple[str, ...] = (),
                     train_options: tuple[str, ...] = ()) -> Path:
    """The README's pipeline on the bundled corpus, trained only briefly (validated once, at
    the end): tokenizer, prepared data and model under ``work``; returns the model."""
    steps = [
        ("train-tokenizer", "--train", str(DEMO / "train"), "-s", "en", "-t", "de",
         "--vocab-size", "600", *tokenizer_options, "-o", str(work / "tok.json")),
        ("prepare", "--train", str(DEMO / "train"), "--valid", str(DEMO / "valid"),
         "-s", "en", "-t", "de", "--tokenizer", str(work / "tok.json"), "-o", str(work / "data")),
        ("train", "--data", str(work / "data"), "--output", str(work / "model"),
         "--preset", "tiny", "--max-steps", "30", "--valid-every", "30", "--max-tokens", "1024",
         "--warmup", "10", "--lr", "2e-3", "--precision", "fp32", *train_options),
    ]
    for args in steps:
        result = tfm(*args)
        assert result.returncode == 0, f"{args[0]} failed:\n{result.stderr}"
    return work / "model"


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The README's pipeline, with regularisation options given."""
    return train_demo_model(tmp_path_factory.mktemp("cli"), train_options=(
        "--attention-dropout", "0.05", "--activation-dropout", "0.15", "--weight-decay", "1e-6"))


def test_regularisation_options_reach_the_saved_configs(demo_model: Path) -> None:
    model = json.loads((demo_model / "config.json").read_text())["model"]
    assert (model["attention_dropout"], model["activation_dropout"]) == (0.05, 0.15)
    assert json.loads((demo_model / "train_config.json").read_text())["weight_decay"] == 1e-6


def test_training_from_a_trained_model_keeps_its_architecture(demo_model: Path,
                                                               tmp_path: Path) -> None:
    data = demo_model.parent / "data"
    result = tfm("train", "--data", str(data), "--output", str(tmp_path / "tuned"),
                 "--init-from", str(demo_model), "--dropout", "0.2", "--max-steps", "2",
                 "--valid-every", "2", "--precision", "fp32", "--max-tokens", "512")
    assert result.returncode == 0, result.stderr
    theirs = json.loads((demo_model / "config.json").read_text())["model"]
    mine = json.loads((tmp_path / "tuned" / "config.json").read_text())["model"]
    assert mine == {**theirs, "dropout": 0.2}
    # Architecture options may repeat the model's (a script's shared options), not change it.
    same = tfm("train", "--data", str(data), "--output", str(tmp_path / "same"),
               "--init-from", str(demo_model), "--preset", "tiny", "--d-model",
               str(theirs["d_model"]), "--max-steps", "1", "--valid-every", "1",
               "--precision", "fp32", "--max-tokens", "512")
    assert same.returncode == 0, same.stderr
    refused = tfm("train", "--data", str(data), "--output", str(tmp_path / "other"),
                  "--init-from", str(demo_model), "--d-model", "64", "--max-steps", "2")
    assert_user_error(refused, "--d-model 64 contradicts", "--init-from")
    refused = tfm("train", "--data", str(data), "--output", str(tmp_path / "other"),
                  "--init-from", str(demo_model), "--preset", "base", "--max-steps", "2")
    assert_user_error(refused, "--preset base contradicts")


def test_prepare_reports_kept_pairs(demo_model: Path) -> None:
    info = json.loads((demo_model.parent / "data" / "prepare.json").read_text())
    assert info["splits"]["train"]["read"] == 520
    assert info["splits"]["train"]["kept"] == 520
    assert info["splits"]["valid"]["kept"] == 50


def test_translate_from_arguments_file_and_stdin_agree(demo_model: Path, tmp_path: Path) -> None:
    sentences = ["The dog sleeps in the garden.", "My sister buys bread."]
    from_args = tfm("translate", "-m", str(demo_model), "-b", "2", *sentences)
    assert from_args.returncode == 0, from_args.stderr
    (tmp_path / "in.en").write_text("\n".join(sentences) + "\n")
    from_file = tfm("translate", "-m", str(demo_model), "-b", "2", "--input",
                    str(tmp_path / "in.en"), "--output", str(tmp_path / "out.de"))
    assert from_file.returncode == 0, from_file.stderr
    from_stdin = tfm("translate", "-m", str(demo_model), "-b", "2",
                     stdin="\n".join(sentences) + "\n")
    assert from_stdin.returncode == 0, from_stdin.stderr
    lines = from_args.stdout.splitlines()
    assert len(lines) == 2
    assert (tmp_path / "out.de").read_text().splitlines() == lines
    assert from_stdin.stdout.splitlines() == lines


def test_translating_a_file_says_how_many_sentences_took_how_long(
        demo_model: Path, tmp_path: Path) -> None:
    # A file can take minutes: a bar on a terminal, and in any case one line at the end.
    (tmp_path / "in.en").write_text("The dog sleeps. The cat eats.\n\nMy sister buys bread.\n")
    result = tfm("translate", "-m", str(demo_model), "-b", "2", "--input",
                 str(tmp_path / "in.en"), "--output", str(tmp_path / "out.de"))
    assert result.returncode == 0, result.stderr
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and re.fullmatch(
        r"Translated 3 sentences \(beam 2\) in \d+\.\d s \([\d,.]+ sentences/s\)",
        lines[0]), result.stderr
    assert len((tmp_path / "out.de").read_text().splitlines()) == 3
    from_args = tfm("translate", "-m", str(demo_model), "The dog sleeps.")
    assert from_args.returncode == 0 and from_args.stderr == ""  # a few sentences: no report


def test_translate_jsonl_carries_scores_and_n_best(demo_model: Path) -> None:
    result = tfm("translate", "-m", str(demo_model), "--beam", "3", "--n-best", "3",
                 "--format", "jsonl", "The cat eats.")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["source"] == "The cat eats."
    assert len(record["n_best"]) == 3
    scores = [h["score"] for h in record["n_best"]]
    assert scores == sorted(scores, reverse=True)
    assert record["translation"] == record["n_best"][0]["translation"]


def test_eval_prints_the_same_bleu_as_sacrebleu(demo_model: Path, tmp_path: Path) -> None:
    hyp = tmp_path / "hyp.de"
    # Greedy: the search is not what is compared here, and a beam costs several times as much
    # with a model this young, which seldom stops before its length limit.
    result = tfm("eval", "-m", str(demo_model), "--src", str(DEMO / "test.en"), "--ref",
                 str(DEMO / "test.de"), "--save-hyp", str(hyp), "--json", "--beam", "1")
    assert result.returncode == 0, result.stderr
    ours = json.loads(result.stdout)[0]
    reference = subprocess.run(
        [sys.executable, "-m", "sacrebleu", str(DEMO / "test.de"), "-i", str(hyp), "-b"],
        capture_output=True, text=True, check=True)
    assert f"{ours['score']:.1f}" == f"{float(reference.stdout.strip()):.1f}"
    assert ours["signature"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    rescored = tfm("eval", "--hyp", str(hyp), "--ref", str(DEMO / "test.de"), "--json")
    assert json.loads(rescored.stdout)[0]["score"] == ours["score"]


# --- lines of several sentences, and documents ------------------------------------------------

ONE, TWO = "The dog sleeps in the garden.", "My sister buys bread at the market."


def translations_apart(model: Path, *sentences: str) -> list[str]:
    """Each sentence's translation, translated alone."""
    result = tfm("translate", "-m", str(model), "-b", "1", *sentences)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")[:-1]
    assert len(lines) == len(sentences)
    return lines


def test_every_sentence_of_a_line_is_translated(demo_model: Path, tmp_path: Path) -> None:
    # The lost sentence: a line was one segment, and the model translated its first sentence.
    one, two = translations_apart(demo_model, ONE, TWO)
    together = tfm("translate", "-m", str(demo_model), "-b", "1", f"{ONE} {TWO}")
    assert together.returncode == 0, together.stderr
    assert together.stdout == f"{one} {two}\n"
    (tmp_path / "doc.en").write_text(f"{ONE}  {TWO}\n\n  {ONE}\n")
    expected = f"{one}  {two}\n\n  {one}\n"  # whitespace between and before sentences kept
    from_file = tfm("translate", "-m", str(demo_model), "-b", "1", "--input",
                    str(tmp_path / "doc.en"))
    assert from_file.returncode == 0, from_file.stderr
    assert from_file.stdout == expected
    assert "Translated 3 sentences" in from_file.stderr
    from_stdin = tfm("translate", "-m", str(demo_model), "-b", "1",
                     stdin=(tmp_path / "doc.en").read_text())
    assert from_stdin.stdout == expected
    record = json.loads(tfm("translate", "-m", str(demo_model), "-b", "1", "--format", "jsonl",
                            f"{ONE} {TWO}").stdout)
    assert record["translation"] == f"{one} {two}"
    assert [s["source"] for s in record["sentences"]] == [ONE, TWO]


def test_no_split_translates_a_line_whole(demo_model: Path) -> None:
    result = tfm("translate", "-m", str(demo_model), "-b", "1", "--no-split", "--format",
                 "jsonl", f"{ONE} {TWO}")
    assert result.returncode == 0, result.stderr
    record = json.loads(result.stdout)
    assert record["source"] == f"{ONE} {TWO}" and "sentences" not in record


def test_eval_keeps_a_line_a_line(demo_model: Path, tmp_path: Path) -> None:
    one, two = translations_apart(demo_model, ONE, TWO)
    (tmp_path / "src.en").write_text(f"{ONE} {TWO}\n{TWO}\n")
    (tmp_path / "ref.de").write_text("Der Hund schläft im Garten. Sie kauft Brot.\nBrot.\n")
    result = tfm("eval", "-m", str(demo_model), "-b", "1", "--src", str(tmp_path / "src.en"),
                 "--ref", str(tmp_path / "ref.de"), "--save-hyp", str(tmp_path / "hyp.de"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "hyp.de").read_text() == f"{one} {two}\n{two}\n"


def test_a_text_document_comes_back_byte_for_byte_but_its_words(demo_model: Path,
                                                                 tmp_path: Path) -> None:
    one, two = translations_apart(demo_model, ONE, TWO)
    doc = tmp_path / "doc.txt"  # a BOM, CRLF line ends, a line of spaces, indentation
    doc.write_bytes(f"\ufeff{ONE} {TWO}\r\n\r\n   \r\n\t{TWO}  \r\n".encode())
    result = tfm("translate", "-m", str(demo_model), "-b", "1", "--input", str(doc),
                 "--output", str(tmp_path / "doc.de.txt"))
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "doc.de.txt").read_bytes() == \
        f"\ufeff{one} {two}\r\n\r\n   \r\n\t{two}  \r\n".encode()
    assert "Translated 3 sentences" in result.stderr
    to_stdout = tfm("translate", "-m", str(demo_model), "-b", "1", "--input", str(doc),
                    "--no-split")
    assert to_stdout.returncode == 0, to_stdout.stderr
    assert to_stdout.stdout.count("\n") == 4 and "Translated 2 sentences" in to_stdout.stderr
    one_line = tmp_path / "one.txt"
    one_line.write_text(f"{ONE}\n", encoding="utf-8")
    single = tfm("translate", "-m", str(demo_model), "-b", "1", "--input", str(one_line))
    assert "Translated 1 sentence (" in single.stderr, single.stderr


def test_a_translated_page_names_the_target_language(demo_model: Path, tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_bytes(f'<html lang="en"><body><p>{ONE}</p></body></html>'.encode())
    result = tfm("translate", "-m", str(demo_model), "-b", "1", "--input", str(page),
                 "--output", str(tmp_path / "page.de.html"))
    assert result.returncode == 0, result.stderr
    target = json.loads((demo_model / "config.json").read_text())["tgt_lang"]
    assert f'<html lang="{target}">'.encode() in (tmp_path / "page.de.html").read_bytes()


def test_a_document_is_refused_what_only_lines_can_take(demo_model: Path,
                                                          tmp_path: Path) -> None:
    page = tmp_path / "page.html"
    page.write_text("<p>The dog sleeps.</p>")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--input", str(page),
                          "--format", "jsonl"), "own format (html)")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--input", str(page),
                          "--constraint", "Hund"), "--constraint")
    word = tmp_path / "doc.docx"
    word.write_bytes(b"PK\x03\x04")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--input", str(word)),
                      "--output")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--input", str(page),
                          "--input-format", "pdf"), "--input-format pdf", "html", "docx")


@pytest.mark.parametrize("name, data", [
    ("doc.txt", b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"),  # a document: binary
    ("doc.en", b"A line.\nB\x00\x01\x02 line.\n"),  # lines: text with a NUL
    ("doc.txt", "Ein Satz in Latin-1: Stra\u00dfe.\n".encode("latin-1")),  # not UTF-8
])
def test_a_binary_or_foreign_file_is_refused_and_nothing_written(
        demo_model: Path, tmp_path: Path, name: str, data: bytes) -> None:
    (tmp_path / name).write_bytes(data)
    out = tmp_path / "out.txt"
    out.write_text("before\n")
    result = tfm("translate", "-m", str(demo_model), "--input", str(tmp_path / name),
                 "--output", str(out))
    assert_user_error(result, name)
    assert out.read_text() == "before\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([name, "out.txt"])


# --- user errors: one line on stderr, a non-zero exit, no traceback --------------------------

def test_a_missing_corpus_file_is_one_clear_line(tmp_path: Path) -> None:
    result = tfm("train-tokenizer", "--train", str(tmp_path / "nope.en"),
                 "--train", str(tmp_path / "nope.de"), "-o", str(tmp_path / "t.json"))
    assert_user_error(result, "nope.en")


def test_misaligned_files_are_refused_with_both_line_counts(tmp_path: Path) -> None:
    (tmp_path / "a.en").write_text("one\ntwo\nthree\n")
    (tmp_path / "a.de").write_text("eins\nzwei\n")
    result = tfm("train-tokenizer", "--train", str(tmp_path / "a.en"),
                 "--train", str(tmp_path / "a.de"), "-o", str(tmp_path / "t.json"))
    assert_user_error(result, "3 lines", "2")
    assert result.returncode == 3


def test_an_unknown_model_directory_is_one_clear_line(tmp_path: Path) -> None:
    result = tfm("translate", "--model", str(tmp_path / "no-model"), "Hello.")
    assert_user_error(result, "no-model")
    assert result.returncode == 4


def test_a_directory_that_is_not_a_model_is_refused(tmp_path: Path) -> None:
    result = tfm("eval", "--model", str(tmp_path), "--src", str(DEMO / "test.en"),
                 "--ref", str(DEMO / "test.de"))
    assert_user_error(result, "not a tfm model directory")


def test_training_on_a_missing_dataset_is_refused(tmp_path: Path) -> None:
    result = tfm("train", "--data", str(tmp_path / "data"), "--output", str(tmp_path / "m"),
                 "--max-steps", "1")
    assert_user_error(result, "tfm prepare")


def test_an_impossible_option_is_refused(demo_model: Path) -> None:
    assert_user_error(tfm("translate", "-m", str(demo_model), "--beam", "0", "Hi."), "--beam")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--format", "xml", "Hi."),
                      "--format")


def test_eval_refuses_references_of_another_length(demo_model: Path, tmp_path: Path) -> None:
    (tmp_path / "ref.de").write_text("Ein Satz.\n")
    result = tfm("eval", "-m", str(demo_model), "--src", str(DEMO / "test.en"),
                 "--ref", str(tmp_path / "ref.de"))
    assert_user_error(result, "50 lines", "1")


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = tfm("--debug", "translate", "--model", str(tmp_path / "no-model"), "Hi.")
    assert result.returncode != 0
    assert "Traceback" in result.stderr


def test_empty_and_blank_lines_translate_to_empty_lines(demo_model: Path) -> None:
    result = tfm("translate", "-m", str(demo_model), "-b", "2",
                 stdin="The cat eats.\n\n   \nThe dog runs.\n")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.split("\n")
    assert lines[1] == "" and lines[2] == ""
    assert lines[0] and lines[3]


def test_a_command_line_syntax_error_shows_usage_not_an_internal_error() -> None:
    result = tfm("train", "unexpected-argument")
    assert result.returncode == 2
    assert "internal error" not in result.stderr
    assert "unexpected extra argument" in result.stderr


def test_alignments_and_attention_pictures(demo_model: Path, tmp_path: Path) -> None:
    result = tfm("translate", "-m", str(demo_model), "--format", "jsonl", "--alignments",
                 "The dog sleeps.")
    assert result.returncode == 0, result.stderr
    alignment = json.loads(result.stdout)["alignment"]
    assert alignment and all("-" in pair for pair in alignment.split())
    picture = tmp_path / "attention.png"
    shown = tfm("translate", "-m", str(demo_model), "--show-attention", "--plot", str(picture),
                "The dog sleeps.")
    assert shown.returncode == 0, shown.stderr
    assert "cross-attention" in shown.stderr
    assert picture.read_bytes().startswith(b"\x89PNG")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--alignments", "Hi."),
                      "--format jsonl")
    assert_user_error(tfm("translate", "-m", str(demo_model), "--show-attention", "A.", "B."),
                      "one sentence")


def test_a_model_trained_with_a_lowercasing_tokenizer_writes_lowercase(tmp_path: Path) -> None:
    """`train-tokenizer --lowercase` (as the Multi30k papers train): whatever the input's case,
    the model reads and writes lowercase, and `eval` says its cased score means little."""
    model = train_demo_model(tmp_path, tokenizer_options=("--lowercase",))
    out = tfm("translate", "-m", str(model), "THE DOG SLEEPS.", "The dog sleeps.")
    assert out.returncode == 0, out.stderr
    upper, lower = out.stdout.splitlines()
    assert upper == lower == lower.lower()
    (tmp_path / "src.en").write_text("The dog sleeps.\n")
    (tmp_path / "ref.de").write_text("Der Hund schläft.\n")
    scored = tfm("eval", "-m", str(model), "--src", str(tmp_path / "src.en"),
                 "--ref", str(tmp_path / "ref.de"))
    assert scored.returncode == 0, scored.stderr
    assert "writes lowercased text" in scored.stderr


def test_standard_input_is_read_ahead_in_batches_and_in_order() -> None:
    """A file piped in: the lines read while the caller is busy come as one batch."""
    import io
    import time

    from tfm.cli.decoding import arriving_lines

    text = "".join(f"line {i}\n" for i in range(300))
    batches = []
    for batch in arriving_lines(io.StringIO(text), most=128):
        batches.append(batch)
        time.sleep(0.05)  # translating: the reader goes on meanwhile
    assert [line for batch in batches for line in batch] == text.splitlines(keepends=True)
    assert max(map(len, batches)) == 128  # batches, not a line at a time


def test_a_line_typed_is_given_at_once_without_waiting_for_more() -> None:
    import os
    import threading

    from tfm.cli.decoding import arriving_lines

    read_end, write_end = os.pipe()
    writer = os.fdopen(write_end, "w")
    writer.write("first\n")
    writer.flush()
    lines = arriving_lines(os.fdopen(read_end))
    got: list[list[str]] = []
    reader = threading.Thread(target=lambda: got.append(next(lines)))
    reader.start()
    reader.join(timeout=10)  # the pipe is still open: no end of input yet
    assert got == [["first\n"]]
    writer.write("second\n")
    writer.close()
    assert list(lines) == [["second\n"]]


def test_what_reading_standard_input_fails_with_comes_after_the_lines_before_it() -> None:
    from tfm.cli.decoding import arriving_lines

    def lines():
        yield "a\n"
        yield "b\n"
        raise UnicodeDecodeError("utf-8", b"\xff", 0, 1, "invalid start byte")

    got = []
    with pytest.raises(UnicodeDecodeError):
        for batch in arriving_lines(lines()):
            got += batch
    assert got == ["a\n", "b\n"]


def test_translate_and_eval_decode_in_int8_on_a_cpu(demo_model: Path, tmp_path: Path) -> None:
    from tfm.decoding.engines import load_translator

    # What the library decodes in int8 and in fp32: this briefly trained model's int8
    # translations differ from fp32's, in scores and in some texts; the commands must give
    # int8's, so that --precision int8 dropped on the way is seen.
    sources, references = ((DEMO / f"test.{lang}").read_text(encoding="utf-8").splitlines()[:10]
                           for lang in ("en", "de"))

    def library(precision: str) -> list:
        translator = load_translator(demo_model, "cpu", precision, workers=1)
        return translator.translate(sources, translator.default_options())

    int8, fp32 = library("int8"), library("fp32")
    assert [t.hypotheses[0][1] for t in int8] != pytest.approx(
        [t.hypotheses[0][1] for t in fp32], abs=1e-4)
    assert [t.text for t in int8] != [t.text for t in fp32]

    translated = tfm("translate", "-m", str(demo_model), "--precision", "int8",
                     "--format", "jsonl", *sources)
    assert translated.returncode == 0, translated.stderr
    records = [json.loads(line) for line in translated.stdout.splitlines()]
    assert [r["translation"] for r in records] == [t.text for t in int8]
    assert [r["score"] for r in records] == pytest.approx(
        [t.hypotheses[0][1] for t in int8], abs=1e-4)
    (tmp_path / "src").write_text("".join(s + "\n" for s in sources), encoding="utf-8")
    (tmp_path / "ref").write_text("".join(s + "\n" for s in references), encoding="utf-8")
    scored = tfm("eval", "-m", str(demo_model), "--precision", "int8", "--src",
                 str(tmp_path / "src"), "--ref", str(tmp_path / "ref"), "--save-hyp",
                 str(tmp_path / "hyp"))
    assert scored.returncode == 0, scored.stderr
    assert "BLEU" in scored.stdout + scored.stderr
    assert (tmp_path / "hyp").read_text(encoding="utf-8").splitlines() == [t.text for t in int8]


def test_version_is_printed_without_a_command() -> None:
    from tfm import __version__

    for args in (["--version"], ["--debug", "--version"]):
        result = tfm(*args)
        assert result.returncode == 0, result.stderr
        assert result.stdout == f"tfm {__version__}\n"
