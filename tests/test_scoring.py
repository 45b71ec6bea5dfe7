"""Scores reported by ``tfm eval``: the Multi30k papers' BLEU (lowercased, Moses-normalised and
-tokenized text, BLEU on tokens) beside sacrebleu's cased one.

The expected token strings below are written out by hand; each was checked against the Moses
scripts that made the official ``*.lc.norm.tok`` files (multi30k/dataset, Moses snapshot 3a0631a:
``lowercase.perl | normalize-punctuation.perl -l L | tokenizer.perl -l L``).
"""

from __future__ import annotations

import json
import logging
import math
import subprocess
import sys
from collections import Counter
from importlib.metadata import version
from pathlib import Path

import pytest
import torch
from conftest import tfm
from sacrebleu.metrics import BLEU
from tokenizers import Tokenizer
from typer.testing import CliRunner

from tfm.checkpoint import save_model_dir
from tfm.cli import app
from tfm.config import ModelConfig
from tfm.decoding.scoring import LC_TOK_METRIC, MosesLcTokenizer, bleu, bleu_lc_tok
from tfm.errors import DataError, UsageError
from tfm.model import Transformer
from tfm.model_info import ModelInfo

HYPOTHESES = [
    "Ein Mann sagt: „Hallo“ & lacht.",
    "Zwei Hunde spielen im Schnee.",
    "Die Frau liest ein Buch über «Katzen».",
]
REFERENCES = [
    "Ein Mann sagt: „Hallo!“ und lacht.",
    "Zwei Hunde spielen draußen im Schnee.",
    "Eine Frau liest ein Buch über „Katzen“.",
]
HYPOTHESIS_TOKENS = [
    "ein mann sagt : &quot; hallo &quot; &amp; lacht .",
    "zwei hunde spielen im schnee .",
    "die frau liest ein buch über &quot; katzen &quot; .",
]
REFERENCE_TOKENS = [
    "ein mann sagt : &quot; hallo ! &quot; und lacht .",
    "zwei hunde spielen draußen im schnee .",
    "eine frau liest ein buch über &quot; katzen &quot; .",
]


def plain_corpus_bleu(hypotheses: list[str], references: list[str]) -> float:
    """multi-bleu.perl's BLEU: clipped 1-4-gram precisions over the corpus, geometric mean,
    brevity penalty, no smoothing (0 when some order has no match). Tokens split on spaces."""
    correct, total = [0] * 4, [0] * 4
    hyp_len = ref_len = 0
    for hyp_line, ref_line in zip(hypotheses, references):
        hyp, ref = hyp_line.split(), ref_line.split()
        hyp_len, ref_len = hyp_len + len(hyp), ref_len + len(ref)
        for n in range(1, 5):
            hyp_grams = Counter(tuple(hyp[i:i + n]) for i in range(len(hyp) - n + 1))
            ref_grams = Counter(tuple(ref[i:i + n]) for i in range(len(ref) - n + 1))
            correct[n - 1] += sum(min(k, ref_grams[g]) for g, k in hyp_grams.items())
            total[n - 1] += max(len(hyp) - n + 1, 0)
    if min(correct) == 0:
        return 0.0
    brevity = 1.0 if hyp_len >= ref_len else math.exp(1 - ref_len / hyp_len)
    return 100 * brevity * math.exp(sum(math.log(c / t) for c, t in zip(correct, total)) / 4)


# --- the tokenization: as the official files have it ------------------------------------------

@pytest.mark.parametrize(("lang", "raw", "tokens"), [
    ("de", HYPOTHESES[0], HYPOTHESIS_TOKENS[0]),  # „ “ become &quot;, & becomes &amp;
    ("de", HYPOTHESES[2], HYPOTHESIS_TOKENS[2]),  # « » too
    # German style: a full stop inside the quotes at the end of the line moves outside
    # (Perl sees the newline after it); English moves commas and full stops inside.
    ("de", 'Er sagte "Tschüss."', "er sagte &quot; tschüss &quot; ."),
    ("en", 'Er sagte "Tschüss."', "er sagte &quot; tschüss . &quot;"),
    ("en", 'He said "hello," and left.', "he said &quot; hello , &quot; and left ."),
    # The snapshot turns a curly single quote that is not between letters into a double quote.
    ("en", "It’s the dogs’ ‘ball’.", "it &apos;s the dogs &quot; &quot; ball . &quot;"),
    # French: non-breaking spaces inside « » go, the apostrophe stays on the article.
    ("fr", "Il dit\u00a0«\u00a0oui\u00a0» à l’homme.",
     "il dit &quot; oui &quot; à l&apos; homme ."),
    # A non-breaking space between digits is a thousands separator: "," in German, "." in English.
    ("de", "Preis: 3\u00a0000 Euro", "preis : 3,000 euro"),
    ("en", "Preis: 3\u00a0000 Euro", "preis : 3.000 euro"),
    # ... ASCII digits only: the snapshot's normaliser reads bytes (here Arabic-Indic 3 and 0).
    ("de", "Zahl \u0663\u00a0\u0660 und 3\u00a04", "zahl \u0663 \u0660 und 3,4"),
    # lowercase.perl lowers character by character: no Greek final sigma.
    ("de", "Ο ΣΟΦΟΣ", "ο σοφοσ"),
    ("en", "A <b>bold</b> [test] | pipe",
     "a &lt; b &gt; bold &lt; / b &gt; &#91; test &#93; &#124; pipe"),
])
def test_text_is_lowercased_normalised_tokenized_and_escaped_as_multi30k_has_it(
        lang: str, raw: str, tokens: str) -> None:
    assert MosesLcTokenizer(lang)(raw) == tokens


# --- the score --------------------------------------------------------------------------------

def test_lc_tok_bleu_is_plain_corpus_bleu_on_the_moses_tokens() -> None:
    tokenize = MosesLcTokenizer("de")
    assert [tokenize(h) for h in HYPOTHESES] == HYPOTHESIS_TOKENS
    assert [tokenize(r) for r in REFERENCES] == REFERENCE_TOKENS
    expected = plain_corpus_bleu(HYPOTHESIS_TOKENS, REFERENCE_TOKENS)
    result = bleu_lc_tok(HYPOTHESES, REFERENCES, "de")
    assert result.metric == LC_TOK_METRIC
    assert 0 < expected < 100
    assert abs(result.score - expected) < 1e-9
    assert result.text.startswith(f"BLEU-lc-tok = {expected:.2f} ")
    # Not the cased, detokenised score: "Die"/"Eine" and the quotes count differently there.
    assert abs(bleu(HYPOTHESES, REFERENCES).score - expected) > 1


def test_case_alone_does_not_lower_the_lc_tok_score() -> None:
    upper = [h.upper() for h in HYPOTHESES]
    assert bleu_lc_tok(upper, REFERENCES, "de").score == \
        bleu_lc_tok(HYPOTHESES, REFERENCES, "de").score
    assert bleu(upper, REFERENCES).score < bleu(HYPOTHESES, REFERENCES).score


def test_lc_tok_bleu_is_not_smoothed() -> None:
    """No 4-gram in common: multi-bleu.perl says 0, sacrebleu's default smoothing does not."""
    hypotheses, references = ["Der Hund rennt weg ."], ["Der Hund läuft schnell weg ."]
    assert bleu_lc_tok(hypotheses, references, "de").score == 0.0
    assert BLEU(tokenize="none").corpus_score(hypotheses, [references]).score > 0


def test_scoring_tokens_does_not_warn_about_tokenized_input(
        caplog: pytest.LogCaptureFixture) -> None:
    """sacrebleu warns when 100 lines end in " ."; here the tokens are the point."""
    lines = [f"Satz {i} ist kurz." for i in range(120)]
    with caplog.at_level(logging.WARNING):
        assert bleu_lc_tok(lines, lines, "de").score == pytest.approx(100)
    assert "detokenize" not in caplog.text


def test_the_signature_names_the_scheme() -> None:
    signature = bleu_lc_tok(HYPOTHESES, REFERENCES, "de").signature
    fields = dict(part.split(":", 1) for part in signature.split("|"))
    assert fields["nrefs"] == "1"
    assert fields["case"] == "lc"
    assert fields["tok"] == "moses-norm-de"
    assert fields["smooth"] == "none"
    assert fields["version"] == f"{version('sacrebleu')}+sacremoses-{version('sacremoses')}"


def test_misaligned_lines_are_refused() -> None:
    with pytest.raises(DataError, match="2 hypotheses but 3 references"):
        bleu_lc_tok(HYPOTHESES[:2], REFERENCES, "de")


def test_without_sacremoses_the_error_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "sacremoses", None)  # makes `import sacremoses` fail
    with pytest.raises(UsageError, match=r'pip install "tfm\[moses\]"'):
        bleu_lc_tok(HYPOTHESES, REFERENCES, "de")


# --- tfm eval --lc-tok ---------------------------------------------------------------------------

def one_error_line(result: subprocess.CompletedProcess) -> str:
    assert result.returncode != 0
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("".join(h + "\n" for h in HYPOTHESES), encoding="utf-8")
    ref.write_text("".join(r + "\n" for r in REFERENCES), encoding="utf-8")
    return hyp, ref


def test_eval_lc_tok_prints_both_scores(files: tuple[Path, Path]) -> None:
    hyp, ref = files
    result = tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de", "--lc-tok")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4
    assert lines[0] == bleu(HYPOTHESES, REFERENCES).text
    assert lines[1].startswith("nrefs:1|case:mixed|eff:no|tok:13a|smooth:exp")
    lc_tok = bleu_lc_tok(HYPOTHESES, REFERENCES, "de")
    assert lines[2] == lc_tok.text and lines[2].startswith("BLEU-lc-tok = ")
    assert lines[3] == lc_tok.signature and "case:lc" in lines[3]

    as_json = tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de", "--lc-tok",
                  "--json")
    records = json.loads(as_json.stdout)
    assert [r["metric"] for r in records] == ["bleu", LC_TOK_METRIC]
    assert records[1]["score"] == pytest.approx(plain_corpus_bleu(HYPOTHESIS_TOKENS,
                                                                  REFERENCE_TOKENS), abs=1e-9)


def test_eval_lc_tok_of_hypothesis_files_needs_their_language(files: tuple[Path, Path]) -> None:
    hyp, ref = files
    line = one_error_line(tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--lc-tok"))
    assert "--target-lang" in line
    line = one_error_line(tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de"))
    assert "--lc-tok" in line and "--off-target" in line


def tiny_model_dir(path: Path, tokenizer: Tokenizer, tgt_lang: str | None) -> Path:
    """An untrained one-layer model: what it translates does not matter here, only its
    recorded target language."""
    vocab = tokenizer.get_vocab_size()
    torch.manual_seed(0)
    config = ModelConfig(src_vocab_size=vocab, tgt_vocab_size=vocab, d_model=16, n_heads=2,
                         encoder_layers=1, decoder_layers=1, d_ff=32, max_positions=64)
    save_model_dir(path, Transformer(config), tokenizer,
                   ModelInfo(config, src_lang="en", tgt_lang=tgt_lang))
    return path


def eval_record_and_refusal(tmp_path: Path, tokenizer: Tokenizer, ref: Path, flag: str
                            ) -> tuple[dict, str]:
    """``tfm eval FLAG --json``'s last record on a model that records its target language
    (de), and the one error line on a model that records none."""
    src = tmp_path / "src.en"
    src.write_text("A man says hello.\nTwo dogs play.\nA woman reads.\n", encoding="utf-8")
    model = tiny_model_dir(tmp_path / "de-model", tokenizer, "de")
    result = tfm("eval", "-m", str(model), "--src", str(src), "--ref", str(ref), "--beam", "1",
                 "--max-len-b", "4", flag, "--json", "--device", "cpu")
    assert result.returncode == 0, result.stderr
    unknown = tiny_model_dir(tmp_path / "model", tokenizer, None)
    line = one_error_line(tfm("eval", "-m", str(unknown), "--src", str(src), "--ref", str(ref),
                              flag, "--device", "cpu"))
    return json.loads(result.stdout)[-1], line


def test_eval_lc_tok_takes_the_target_language_from_the_model(
        tmp_path: Path, tokenizer: Tokenizer, files: tuple[Path, Path]) -> None:
    record, line = eval_record_and_refusal(tmp_path, tokenizer, files[1], "--lc-tok")
    assert record["metric"] == LC_TOK_METRIC and "tok:moses-norm-de" in record["signature"]
    assert "--target-lang" in line


# --- tfm eval --off-target -----------------------------------------------------------------------

GERMAN_AND_ENGLISH = [
    "Zwei Hunde spielen im Schnee.",
    "A man rides his bicycle through the city.",
    "Die Frau liest ein Buch über Katzen.",
    "Kinder spielen auf der Straße vor dem Haus.",
]


@pytest.fixture
def mixed(tmp_path: Path) -> tuple[Path, Path]:
    """Translations into German of which one is English, and their references."""
    hyp, ref = tmp_path / "hyp.de", tmp_path / "ref.de"
    hyp.write_text("".join(h + "\n" for h in GERMAN_AND_ENGLISH), encoding="utf-8")
    ref.write_text("".join(r + "\n" for r in REFERENCES + REFERENCES[:1]), encoding="utf-8")
    return hyp, ref


def test_eval_off_target_prints_the_share_not_in_the_target_language(
        mixed: tuple[Path, Path]) -> None:
    hyp, ref = mixed
    result = tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de",
                 "--off-target")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 4 and lines[0].startswith("BLEU = ")
    assert lines[2] == ("off-target 25.0% (1 of 4 not identified as de; 0 empty, "
                        "0 unidentifiable)")
    assert lines[3].startswith("langid:py3langid-") and lines[3].endswith(
        "|lang:de|candidates:all")

    as_json = tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--tgt-lang", "de",
                  "--off-target", "--no-bleu", "--json")
    assert as_json.returncode == 0, as_json.stderr
    (record,) = json.loads(as_json.stdout)
    assert record == {"metric": "off_target", "score": 25.0, "text": lines[2],
                      "signature": lines[3]}


def test_eval_off_target_of_hypothesis_files_needs_their_language(
        mixed: tuple[Path, Path]) -> None:
    hyp, ref = mixed
    line = one_error_line(tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--off-target"))
    assert "--off-target with --hyp needs --target-lang" in line
    # --target-lang and --tgt-lang are one option: the translations' language.
    spelled = [tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--off-target", option, "de")
               for option in ("--target-lang", "--tgt-lang")]
    assert spelled[0].returncode == 0 and spelled[0].stdout == spelled[1].stdout
    line = one_error_line(tfm("eval", "--hyp", str(hyp), "--ref", str(ref), "--off-target",
                              "--tgt-lang", "xx"))
    assert "language xx: py3langid does not know it" in line


def test_eval_off_target_without_py3langid_names_the_extra(
        mixed: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    hyp, ref = mixed
    monkeypatch.setitem(sys.modules, "py3langid", None)  # makes `import py3langid` fail
    result = CliRunner().invoke(app, ["eval", "--hyp", str(hyp), "--ref", str(ref),
                                      "--tgt-lang", "de", "--off-target"])
    assert isinstance(result.exception, UsageError)
    assert 'pip install "tfm[langid]"' in str(result.exception)
    assert "\n" not in str(result.exception)


def test_eval_off_target_takes_the_target_language_from_the_model(
        tmp_path: Path, tokenizer: Tokenizer, files: tuple[Path, Path]) -> None:
    record, line = eval_record_and_refusal(tmp_path, tokenizer, files[1], "--off-target")
    assert record["metric"] == "off_target" and "|lang:de|" in record["signature"]
    assert "--target-lang" in line


def test_eval_target_lang_of_a_bilingual_model_names_its_language_or_is_refused(
        tmp_path: Path, tokenizer: Tokenizer, files: tuple[Path, Path]) -> None:
    src = tmp_path / "src.en"
    src.write_text("A man says hello.\nTwo dogs play.\nA woman reads.\n", encoding="utf-8")
    unknown = tiny_model_dir(tmp_path / "model", tokenizer, None)
    german = tiny_model_dir(tmp_path / "de-model", tokenizer, "de")
    common = ("--src", str(src), "--ref", str(files[1]), "--beam", "1", "--max-len-b", "4",
              "--off-target", "--json", "--device", "cpu")
    result = tfm("eval", "-m", str(unknown), *common, "--target-lang", "de")
    assert result.returncode == 0, result.stderr  # the model records none: --target-lang tells
    assert "|lang:de|" in json.loads(result.stdout)[-1]["signature"]
    line = one_error_line(tfm("eval", "-m", str(german), *common, "--tgt-lang", "fr"))
    assert "--target-lang fr: this model translates into de only" in line
