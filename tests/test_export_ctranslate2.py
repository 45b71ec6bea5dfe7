"""Specifications of ``tfm export --to ctranslate2`` and of decoding its output with CTranslate2.

Two tiny models are trained for a few seconds on the 40 pairs of the test corpus, until they
translate most of them: one post-norm with a joint vocabulary (tied embeddings), one pre-norm
with separate vocabularies and an untied output projection. Their CTranslate2 exports (float32)
must compute what tfm computes: the same log-probabilities of a forced target, the same greedy
and beam search outputs token for token, scored the same, through the library and through the
command line.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from conftest import PAIRS

from tfm.checkpoint import save_model_dir
from tfm.config import ModelConfig, SearchOptions
from tfm.data.tokenizer import (
    BOS_ID,
    EOS_ID,
    PAD_ID,
    UNK_ID,
    Vocabularies,
    encode_batch,
    train_tokenizer,
)
from tfm.decoding.ctranslate2_engine import CTranslate2Translator, is_export
from tfm.decoding.engines import load_translator
from tfm.decoding.torch_engine import TorchTranslator
from tfm.interop.ctranslate2 import export_ctranslate2
from tfm.model import Transformer
from tfm.model_info import ModelInfo
from tfm.training.objective import label_smoothed_loss

pytest.importorskip("ctranslate2")

SOURCES = [s for s, _ in PAIRS[:12]] + ["A dog is reading the newspaper .", "Two cats ."]


def pad(rows: list[list[int]]) -> torch.Tensor:
    batch = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
    for i, row in enumerate(rows):
        batch[i, : len(row)] = torch.tensor(row)
    return batch


def train_tiny_model(directory: Path, joint: bool, norm_first: bool, steps: int = 100) -> Path:
    """A small model trained on PAIRS (full batch, Adam) until it translates most of them."""
    src_tok = train_tokenizer([s for s, _ in PAIRS] + ([t for _, t in PAIRS] if joint else []),
                              vocab_size=1000)
    tgt_tok = src_tok if joint else train_tokenizer([t for _, t in PAIRS], vocab_size=1000)
    torch.manual_seed(0)
    config = ModelConfig(src_vocab_size=src_tok.get_vocab_size(),
                         tgt_vocab_size=tgt_tok.get_vocab_size(), d_model=32, n_heads=4,
                         encoder_layers=2, decoder_layers=2, d_ff=64, dropout=0.1,
                         max_positions=128, norm_first=norm_first, share_embeddings=joint,
                         tie_output=joint)
    model = Transformer(config)
    src = pad([ids + [EOS_ID] for ids in encode_batch(src_tok, [s for s, _ in PAIRS])])
    targets = encode_batch(tgt_tok, [t for _, t in PAIRS])
    tgt_in = pad([[BOS_ID] + ids for ids in targets])
    tgt_out = pad([ids + [EOS_ID] for ids in targets])
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2, fused=True)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # a model this small trains fastest on one thread
    try:
        model.train()
        for _ in range(steps):
            loss, _ = label_smoothed_loss(model(src, tgt_in), tgt_out, 0.1)
            optimizer.zero_grad()
            (loss / (tgt_out != PAD_ID).sum()).backward()
            optimizer.step()
    finally:
        torch.set_num_threads(threads)
    model.eval()
    save_model_dir(directory, model, Vocabularies(src_tok, tgt_tok),
                   ModelInfo(config, src_lang="en", tgt_lang="de"))
    return directory


@pytest.fixture(scope="module")
def joint_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model directory, its CTranslate2 export): post-norm, joint vocabulary, tied weights."""
    root = tmp_path_factory.mktemp("joint")
    model = train_tiny_model(root / "model", joint=True, norm_first=False)
    return model, export_ctranslate2(model, root / "ct2")


@pytest.fixture(scope="module")
def separate_model(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(model directory, its CTranslate2 export): pre-norm, one vocabulary per language,
    separate output projection."""
    root = tmp_path_factory.mktemp("separate")
    model = train_tiny_model(root / "model", joint=False, norm_first=True)
    return model, export_ctranslate2(model, root / "ct2")


@pytest.fixture(scope="module", params=["joint", "separate"])
def translators(request: pytest.FixtureRequest) -> tuple[TorchTranslator, CTranslate2Translator]:
    """tfm's translator and CTranslate2's (float32) for the same model."""
    model, export = request.getfixturevalue(f"{request.param}_model")
    return (TorchTranslator(model, "cpu"),
            CTranslate2Translator(export, "cpu", "fp32", exact=True))


def assert_same_translations(tfm_results, ct2_results, ranks: int | None = None) -> None:
    """The same hypotheses, scored the same: all of them, or the first ``ranks`` of each
    n-best list (the lists are as long in both)."""
    for ours, theirs in zip(tfm_results, ct2_results, strict=True):
        assert len(theirs.hypotheses) == len(ours.hypotheses), ours.source
        assert theirs.hypotheses[:ranks] == [
            (text, pytest.approx(score, abs=1e-4)) for text, score in ours.hypotheses[:ranks]], \
            f"{ours.source}\ntfm: {ours.hypotheses}\nCTranslate2: {theirs.hypotheses}"
        assert theirs.target_tokens == ours.target_tokens


# --- the export --------------------------------------------------------------------------------

def test_export_holds_the_model_the_tokenizer_and_what_was_exported(joint_model, separate_model
                                                                    ) -> None:
    for (model, export), tokenizers in ((joint_model, ["tokenizer.json"]),
                                        (separate_model, ["tokenizer.src.json",
                                                          "tokenizer.tgt.json"])):
        names = {p.name for p in export.iterdir()}
        assert {"model.bin", "config.json", "tfm_export.json", *tokenizers} <= names
        for name in tokenizers:
            assert (export / name).read_bytes() == (model / name).read_bytes()
        info = json.loads((export / "tfm_export.json").read_text())
        assert info["format"] == "ctranslate2"
        assert info["source_model"] == "model"
        assert (info["src_lang"], info["tgt_lang"]) == ("en", "de")
        assert info["quantization"] == "float32"
        config = json.loads((export / "config.json").read_text())
        # tfm's source already ends with </s>: CTranslate2 must add nothing; decoding from <s>
        assert config["add_source_bos"] is False and config["add_source_eos"] is False
        assert config["decoder_start_token"] == "<s>"
        assert is_export(export) and not is_export(model)


def test_the_trained_models_translate_their_training_sentences(translators) -> None:
    tfm_translator, _ = translators
    results = tfm_translator.translate([s for s, _ in PAIRS[:12]], SearchOptions(beam=1))
    correct = sum(r.text == t for r, (_, t) in zip(results, PAIRS[:12]))
    assert correct >= 8  # the parity below is checked on meaningful sentences


# --- parity ------------------------------------------------------------------------------------

def test_log_probs_of_a_forced_target_match_tfm(translators) -> None:
    tfm_translator, ct2_translator = translators
    model, vocabs = tfm_translator.model, tfm_translator.vocabs
    sources = [ids + [EOS_ID] for ids in encode_batch(vocabs.src, [s for s, _ in PAIRS[:8]])]
    targets = encode_batch(vocabs.tgt, [t for _, t in PAIRS[8:16]])  # not the references
    theirs = ct2_translator.forced_log_probs(sources, targets)
    with torch.no_grad():
        logits = model(pad(sources), pad([[BOS_ID] + t for t in targets])).double()
    log_probs = torch.log_softmax(logits, dim=-1)
    for row, (target, scored) in enumerate(zip(targets, theirs)):
        expected = [log_probs[row, i, token].item() for i, token in enumerate(target + [EOS_ID])]
        assert scored == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize("options", [
    dict(beam=1),
    dict(beam=1, max_len_a=0.5, max_len_b=2),  # most sentences reach the length limit
    dict(beam=1, min_len=12),  # EOS forbidden for a while
], ids=["greedy", "greedy-length-limit", "greedy-min-len"])
def test_greedy_search_matches_tfm_token_for_token(translators, options) -> None:
    tfm_translator, ct2_translator = translators
    o = SearchOptions(**options)
    assert_same_translations(tfm_translator.translate(SOURCES, o),
                             ct2_translator.translate(SOURCES, o))


@pytest.mark.parametrize("options", [
    dict(beam=4, length_penalty=0.0),
    # With a length penalty, tfm's --stop-early ends a sentence before CTranslate2 would
    # (README, tfm export): the search itself is the same when both wait for the beam.
    dict(beam=4, length_penalty=1.0, stop_early=False),
    dict(beam=4, length_penalty=0.0, n_best=2),
    # An n-best list with a length penalty: the best the same; below it, each search keeps
    # the finished hypotheses it met before deciding that the sentence is done, and these
    # may differ, either scoring higher (docs/CLI.md).
    dict(beam=4, length_penalty=0.6, n_best=2, stop_early=False, ranks=1),
], ids=["beam-raw", "beam-lp1", "beam-nbest2-raw", "beam-nbest2-lp0.6"])
def test_beam_search_matches_tfm_token_for_token(translators, options) -> None:
    tfm_translator, ct2_translator = translators
    options = dict(options)  # the parameter is shared by both models' runs
    ranks = options.pop("ranks", None)
    o = SearchOptions(**options)
    assert_same_translations(tfm_translator.translate(SOURCES, o),
                             ct2_translator.translate(SOURCES, o), ranks)


@pytest.mark.parametrize("options", [
    dict(beam=1), dict(beam=1, max_len_a=0.5, max_len_b=2), dict(beam=4, length_penalty=0.0),
], ids=["greedy", "greedy-length-limit", "beam-raw"])
def test_ctranslate2s_own_search_finds_tfms_best_in_one_pass(translators, options) -> None:
    """Without --exact-search: where CTranslate2's stopping rule is tfm's (greedy search; a
    beam without a length penalty), the same translations; and each sentence's translation
    is the one it gets alone."""
    tfm_translator, exact = translators
    one_pass = CTranslate2Translator(exact.path, "cpu", "fp32")
    assert one_pass.describe()["search"] == "CTranslate2's"
    o = SearchOptions(**options)
    together = one_pass.translate(SOURCES, o)
    assert [t.text for t in together] == [t.text for t in tfm_translator.translate(SOURCES, o)]
    assert [one_pass.translate([s], o)[0].text for s in SOURCES] == [t.text for t in together]


def test_every_hypothesis_is_scored_as_tfm_scores_it(translators) -> None:
    """Whatever CTranslate2 finds (also at the length limit and with a minimum length), its
    score is tfm's: log P(tokens + EOS) / (tokens + 1) ** length_penalty."""
    tfm_translator, ct2_translator = translators
    vocabs = ct2_translator.vocabs
    o = SearchOptions(beam=4, n_best=4, length_penalty=0.8, min_len=3, max_len_a=1.0,
                      max_len_b=2)
    sources = [ids + [EOS_ID] for ids in encode_batch(vocabs.src, SOURCES)]
    for src, hyps in zip(sources, ct2_translator.search(sources, o)):
        assert hyps and [h.score for h in hyps] == sorted((h.score for h in hyps),
                                                          reverse=True)
        forced = ct2_translator.forced_log_probs([src] * len(hyps), [h.tokens for h in hyps])
        for h, log_probs in zip(hyps, forced):
            assert not {PAD_ID, UNK_ID, BOS_ID} & set(h.tokens)
            assert h.log_prob == pytest.approx(sum(log_probs), abs=1e-4)
            assert h.score == pytest.approx(sum(log_probs) / (len(h.tokens) + 1) ** 0.8,
                                            abs=1e-4)
            assert 3 <= len(h.tokens) < 1.0 * len(src) + 2


def test_cross_attention_and_alignments_match_tfm(translators) -> None:
    tfm_translator, ct2_translator = translators
    o = SearchOptions(beam=4, attention=True)
    for ours, theirs in zip(tfm_translator.translate(SOURCES[:4], o),
                            ct2_translator.translate(SOURCES[:4], o)):
        assert theirs.text == ours.text
        assert torch.tensor(theirs.attention) == pytest.approx(torch.tensor(ours.attention),
                                                               abs=1e-4)
        assert theirs.alignment == ours.alignment


def test_unk_and_bos_are_never_emitted_even_where_the_model_prefers_them(separate_model,
                                                                         tmp_path,
                                                                         monkeypatch) -> None:
    """A model that scores <unk> above "." and <s> above "Ein" wherever those are likely:
    like tfm, the export never emits them, takes the next best token and scores it as tfm
    does."""
    from tfm.checkpoint import load_model_dir

    model, vocabs, info = load_model_dir(separate_model[0])
    weight = model.output_proj.weight  # (V, D), untied in this model
    with torch.no_grad():
        for special, token in ((UNK_ID, "Ġ."), (BOS_ID, "ĠEin")):
            weight[special] = 1.2 * weight[vocabs.tgt.token_to_id(token)]
    save_model_dir(tmp_path / "model", model, vocabs, info)
    export = export_ctranslate2(tmp_path / "model", tmp_path / "ct2")
    tfm_translator = TorchTranslator(tmp_path / "model", "cpu")
    ct2_translator = CTranslate2Translator(export, "cpu", "fp32", exact=True)
    passes = []
    first_pass = CTranslate2Translator._translate

    def spy(self, sources, limit, o, flags, *prefixes):
        passes.append(flags)
        return first_pass(self, sources, limit, o, flags, *prefixes)

    monkeypatch.setattr(CTranslate2Translator, "_translate", spy)
    sources = [s for s, _ in PAIRS[:6]]
    for o in (SearchOptions(beam=1), SearchOptions(beam=3, length_penalty=0.0)):
        ours = tfm_translator.translate(sources, o)
        assert sum(r.text.endswith(" .") for r in ours) >= 3  # "." is still chosen
        assert_same_translations(ours, ct2_translator.translate(sources, o))
    assert any(flags.suppress for flags in passes)  # decoded again with them disabled


def test_an_int8_export_loads_and_translates(joint_model, tmp_path) -> None:
    model, _ = joint_model
    export = export_ctranslate2(model, tmp_path / "int8", quantization="int8")
    translator = load_translator(export, "cpu")
    assert translator.describe()["precision"] == "int8_float32"  # integer weights kept
    assert json.loads((export / "tfm_export.json").read_text())["quantization"] == "int8"
    assert (export / "model.bin").stat().st_size < 0.5 * (model / "model.safetensors"
                                                           ).stat().st_size
    results = translator.translate([s for s, _ in PAIRS[:4]], SearchOptions(beam=2))
    assert sum(r.text == t for r, (_, t) in zip(results, PAIRS[:4])) >= 2


def test_a_model_s_alignment_lexicon_goes_with_its_export(joint_model, tmp_path) -> None:
    # The lexicon places a document's tags by the words: an export translates documents as
    # the model does, so it carries it (and a model without one exports without one).
    from test_lexical_alignment import counted

    from tfm.data.lexical_alignment import LEXICON_FILE

    model, plain_export = joint_model
    assert not (plain_export / LEXICON_FILE).exists()
    assert load_translator(plain_export, "cpu").lexicon is None
    with_lexicon = tmp_path / "model"
    shutil.copytree(model, with_lexicon)
    counted().save(with_lexicon / LEXICON_FILE)
    export = export_ctranslate2(with_lexicon, tmp_path / "ct2")
    assert (export / LEXICON_FILE).read_bytes() == (with_lexicon / LEXICON_FILE).read_bytes()
    lexicon = load_translator(export, "cpu").lexicon
    assert lexicon is not None and lexicon.align(["The", "dog"], ["Der", "Hund"]) == [(0, 0),
                                                                                        (1, 1)]


# --- the command line ----------------------------------------------------------------------------

def run_tfm(monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    """``tfm ARGS`` through the CLI's entry point, in this process: (exit code, stdout,
    stderr)."""
    from tfm.cli import run

    monkeypatch.setattr(sys, "argv", ["tfm", *args])
    with pytest.raises(SystemExit) as exited:
        run()
    captured = capsys.readouterr()
    return exited.value.code or 0, captured.out, captured.err


def assert_refused(result: tuple[int, str, str], *fragments: str) -> None:
    code, _, stderr = result
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code != 0
    assert len(lines) == 1 and lines[0].startswith("error:"), stderr
    for fragment in fragments:
        assert fragment in lines[0]


def assert_nothing_written(output: Path) -> None:
    assert not output.exists()
    assert not [p for p in output.parent.iterdir() if p.name.startswith(f".{output.name}")]


def test_translate_decodes_an_export_as_it_decodes_the_model(joint_model, monkeypatch,
                                                            capsys) -> None:
    model, export = joint_model
    args = ["translate", "The girl is eating an apple .", "Two cats .", "--format", "jsonl",
            "--beam", "4", "--n-best", "2", "--length-penalty", "0", "--device", "cpu"]
    outputs = []
    for directory, more in ((model, ()), (export, ()), (export, ("--exact-search",))):
        code, out, err = run_tfm(monkeypatch, capsys, *args, "--model", str(directory), *more)
        assert code == 0, err
        outputs.append([json.loads(line) for line in out.splitlines()])
    ours, one_pass, exact = outputs
    assert one_pass[0]["translation"] == "Das Mädchen isst einen Apfel ."
    # CTranslate2's own search, in one pass: the same best hypothesis without a length
    # penalty, its score by tfm's formula over CTranslate2's log-probabilities (normalised
    # over the tokens that may be emitted); below it, it stops by its own rule.
    assert [r["translation"] for r in one_pass] == [r["translation"] for r in ours]
    assert [r["score"] for r in one_pass] == pytest.approx([r["score"] for r in ours],
                                                           abs=1e-2)
    # --exact-search: tfm's search, the whole n-best list.
    assert [[h["translation"] for h in r["n_best"]] for r in exact] == [
        [h["translation"] for h in r["n_best"]] for r in ours]
    assert [r["score"] for r in exact] == pytest.approx([r["score"] for r in ours], abs=1e-4)


def test_translate_help_says_it_takes_an_export(monkeypatch, capsys) -> None:
    code, out, _ = run_tfm(monkeypatch, capsys, "translate", "--help")
    assert code == 0 and "CTranslate2" in out


def test_eval_scores_an_export_as_it_scores_the_model(joint_model, tmp_path, monkeypatch,
                                                      capsys) -> None:
    model, export = joint_model
    src, ref = tmp_path / "test.en", tmp_path / "test.de"
    src.write_text("".join(s + "\n" for s, _ in PAIRS[:10]), encoding="utf-8")
    ref.write_text("".join(t + "\n" for _, t in PAIRS[:10]), encoding="utf-8")
    scores = []
    for directory in (model, export):
        code, out, err = run_tfm(monkeypatch, capsys, "eval", "--model", str(directory),
                                 "--src", str(src), "--ref", str(ref), "--beam", "1",
                                 "--chrf", "--json", "--device", "cpu")
        assert code == 0, err
        scores.append(json.loads(out))
    assert scores[1] == scores[0]


def test_export_command_writes_a_directory_translate_can_use(joint_model, tmp_path,
                                                            monkeypatch, capsys) -> None:
    model, _ = joint_model
    out = tmp_path / "out"
    code, _, err = run_tfm(monkeypatch, capsys, "export", str(model), "--to", "ctranslate2",
                           "-o", str(out), "--quantization", "int8")
    assert code == 0, err
    assert "Exported" in err and str(out) in err and "int8" in err
    assert is_export(out)
    code, stdout, err = run_tfm(monkeypatch, capsys, "translate", "--model", str(out),
                                "The children are laughing .", "--beam", "1")
    assert code == 0, err
    assert stdout.strip()


# --- bad input ---------------------------------------------------------------------------------

def test_exporting_a_directory_that_is_not_a_model_is_refused(tmp_path, monkeypatch,
                                                              capsys) -> None:
    (tmp_path / "notes").mkdir()
    out = tmp_path / "out"
    assert_refused(run_tfm(monkeypatch, capsys, "export", str(tmp_path / "notes"), "--to",
                           "ctranslate2", "-o", str(out)), "not a tfm model directory")
    assert_nothing_written(out)


def test_an_architecture_the_export_does_not_know_is_refused(joint_model, tmp_path,
                                                             monkeypatch, capsys) -> None:
    """A model option the export has not learnt to write (here: as if the activation were
    new) is refused, not exported into a CTranslate2 model that computes something else."""
    import tfm.interop.ctranslate2 as ct2

    model, _ = joint_model
    monkeypatch.setattr(ct2, "_EXPORTED_FIELDS", ct2._EXPORTED_FIELDS - {"activation"})
    out = tmp_path / "out"
    assert_refused(run_tfm(monkeypatch, capsys, "export", str(model), "--to", "ctranslate2",
                           "-o", str(out)), "activation")
    assert_nothing_written(out)


def test_a_missing_ctranslate2_names_the_extra_to_install(joint_model, tmp_path, monkeypatch,
                                                         capsys) -> None:
    model, export = joint_model
    monkeypatch.setitem(sys.modules, "ctranslate2", None)  # import ctranslate2 fails
    out = tmp_path / "out"
    assert_refused(run_tfm(monkeypatch, capsys, "export", str(model), "--to", "ctranslate2",
                           "-o", str(out)), 'tfm[export]')
    assert_nothing_written(out)
    assert_refused(run_tfm(monkeypatch, capsys, "translate", "--model", str(export), "Hello ."),
                   'tfm[export]')


def test_an_existing_output_is_replaced_only_with_overwrite(joint_model, tmp_path, monkeypatch,
                                                            capsys) -> None:
    model, _ = joint_model
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    assert_refused(run_tfm(monkeypatch, capsys, "export", str(model), "--to", "ctranslate2",
                           "-o", str(out)), "--overwrite")
    assert [p.name for p in out.iterdir()] == ["keep.txt"]
    assert not [p for p in tmp_path.iterdir() if p.name.startswith(".out")]
    code, _, err = run_tfm(monkeypatch, capsys, "export", str(model), "--to", "ctranslate2",
                           "-o", str(out), "--overwrite")
    assert code == 0, err
    assert is_export(out) and not (out / "keep.txt").exists()


@pytest.mark.skipif(__import__("ctranslate2").get_cuda_device_count() > 0,
                    reason="this machine has a GPU")
def test_decoding_on_cuda_without_a_gpu_is_refused(joint_model) -> None:
    from tfm.errors import UsageError

    with pytest.raises(UsageError, match="--device cuda"):
        load_translator(joint_model[1], "cuda")


def test_bad_options_are_refused_before_anything_is_written(joint_model, tmp_path, monkeypatch,
                                                            capsys) -> None:
    model, _ = joint_model
    out = tmp_path / "out"
    for args, fragment in (
            (["--to", "onnx"], "--to onnx"),
            (["--to", "ctranslate2", "--quantization", "int4"], "--quantization int4"),
            (["--to", "marian", "--quantization", "int8"], "--quantization is for"),
    ):
        assert_refused(run_tfm(monkeypatch, capsys, "export", str(model), "-o", str(out),
                               *args), fragment)
        assert_nothing_written(out)


def test_an_export_is_translated_without_importing_torch(joint_model) -> None:
    """A CTranslate2 export needs no torch: `tfm translate` on one never imports it (import
    torch takes seconds on some CPUs; an export is how one deploys without it)."""
    _, export = joint_model
    code = ("import sys; from tfm.cli import run\n"
            f"sys.argv = ['tfm', 'translate', '--model', {str(export)!r}, 'Two cats .']\n"
            "try:\n    run()\nexcept SystemExit as e:\n    assert not e.code, e.code\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip()


def test_precision_int8_computes_a_float_export_with_int8_weights(joint_model) -> None:
    _, export = joint_model
    translator = load_translator(export, "cpu", "int8")
    assert translator.describe()["precision"] == "int8_float32"
    results = translator.translate([s for s, _ in PAIRS[:4]], SearchOptions(beam=2))
    assert sum(r.text == t for r, (_, t) in zip(results, PAIRS[:4])) >= 2


def test_sampling_reaches_ctranslate2(translators) -> None:
    # rules.StepRule.SAMPLING_TOP_K is mapped to CTranslate2's own sampling options (its
    # draws, in its own threads, are not seeded by tfm); top-k 1 is greedy search.
    _, ct2 = translators
    sources = [s for s, _ in PAIRS[:12]]

    def texts(**options) -> list[str]:
        return [r.text for r in ct2.translate(sources, SearchOptions(beam=1, **options))]

    greedy = texts()
    assert texts(sampling_topk=0, sampling_temp=3.0) != greedy  # draws leave the best path
    assert texts(sampling_topk=1) == greedy
