"""Specification of ``tfm distill`` (tfm.training.distill) and of the resumable corpus
translation under it (tfm.decoding.corpus_translation): a teacher's translations of its
corpus, kept and reused by a second student; the distillation filter; the student trained,
its shortlist and the report; a run killed in the translation or in the training goes on where
it stopped; bad input refused in one line with nothing written.

The teacher is a tiny model trained a few steps on a slice of the demo corpus: what is checked
is where every output comes from, not its quality."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import signal
from pathlib import Path

import pytest
import torch
from conftest import random_model_dir
from conftest import tfm as run_tfm

from tfm.config import SearchOptions
from tfm.decoding.corpus_translation import read_translations, translate_corpus
from tfm.decoding.engines import load_translator
from tfm.training.distill import filter_pairs

DEMO = Path(__file__).resolve().parent.parent / "data" / "demo"
PAIRS = 60  # of the demo corpus's training pairs: the distill runs' corpus
# The whole run exports the student (and the teacher) to CTranslate2 where it is installed.
EXPORT = ("--export", "ctranslate2") if importlib.util.find_spec("ctranslate2") else ()
MOSES = importlib.util.find_spec("sacremoses") is not None  # the papers' lc-tok BLEU
# The student: tiny, a few steps, a checkpoint every 2 (a killed run resumes from one).
STUDENT = ("--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--encoder-layers", "2",
           "--decoder-layers", "1", "--max-steps", "4", "--max-tokens", "512", "--warmup", "2",
           "--valid-every", "1000", "--save-every", "2", "--log-every", "1", "--precision", "fp32",
           "--threads", "1", "--device", "cpu")
# SIGKILL at training step $TFM_TEST_KILL_AT, or on the teacher's chunk $TFM_TEST_KILL_CHUNK
# (counted from 1, before it is written): run in the command's process (tests/forked.py).
HOOK = """
import os, signal
from tfm.training import loop
from tfm.decoding import corpus_translation

kill_at = int(os.environ.get("TFM_TEST_KILL_AT", 0))
kill_chunk = int(os.environ.get("TFM_TEST_KILL_CHUNK", 0))
step, chunk, chunks = loop._Trainer.step, corpus_translation._translate_chunk, [0]

def stopping_step(self, *args):
    stopped = step(self, *args)
    if self.run.step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    return stopped

def stopping_chunk(*args, **kwargs):
    chunks[0] += 1
    if chunks[0] == kill_chunk:
        os.kill(os.getpid(), signal.SIGKILL)
    return chunk(*args, **kwargs)

loop._Trainer.step = stopping_step
corpus_translation._translate_chunk = stopping_chunk
"""


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    """The first PAIRS pairs of the demo corpus, as ``corpus/train.{en,de}``; val and test as
    the demo's."""
    root = tmp_path_factory.mktemp("corpus")
    for lang in ("en", "de"):
        lines = (DEMO / f"train.{lang}").read_text(encoding="utf-8").splitlines()[:PAIRS]
        (root / f"train.{lang}").write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    return root


@pytest.fixture(scope="module")
def teacher(tmp_path_factory, dataset: Path) -> Path:
    """A tiny en->de teacher trained 6 steps on the demo dataset (conftest's ``dataset``),
    beam 2 by default."""
    from tfm.config import GenerationDefaults, ModelConfig, TrainConfig
    from tfm.model_info import read_model_info
    from tfm.training.loop import train

    out = tmp_path_factory.mktemp("teacher") / "teacher"
    train(dataset, out, ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1,
                                    d_ff=64, dropout=0.0, max_positions=64),
          TrainConfig(max_steps=6, max_tokens=1024, warmup_steps=2, lr=3e-3, valid_every=1000,
                      valid_bleu=False, precision="fp32", device="cpu"))
    info = read_model_info(out)
    info.generation = GenerationDefaults(beam=2, max_len_a=1.2, max_len_b=4)
    from tfm.checkpoint import save_model_info
    from tfm.layout import ModelDir

    save_model_info(ModelDir(out), info)
    return out


def distill(teacher: Path, corpus: Path, out: Path, *more: str, hook: bool = False, **env: str):
    """``tfm distill`` of ``teacher`` on ``corpus`` into ``out`` (the tiny student)."""
    args = ("distill", "--teacher", str(teacher), "--train", str(corpus / "train"),
            "--valid", str(DEMO / "valid"), "-o", str(out), "--chunk", "25",
            "--report-sentences", "8", *STUDENT, *more)
    if hook:
        env["TFM_TEST_PRELUDE"] = HOOK
    return run_tfm(*args, env=env or None)


@pytest.fixture(scope="module")
def distilled(tmp_path_factory, teacher: Path, corpus: Path) -> tuple[Path, object]:
    """One whole run, with a test set: its directory and the finished command."""
    out = tmp_path_factory.mktemp("distill") / "run"
    done = distill(teacher, corpus, out, "--test", str(DEMO / "test"), *EXPORT)
    assert done.returncode == 0, done.stderr
    return out, done


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


# --- the whole run ---------------------------------------------------------------------------

def test_the_teacher_translates_the_sources_as_tfm_translate_does(distilled, teacher, corpus,
                                                                  tmp_path):
    out, _ = distilled
    written = tmp_path / "translated.de"
    done = run_tfm("translate", "-m", str(teacher), "--input", str(corpus / "train.en"),
                   "--output", str(written))
    assert done.returncode == 0, done.stderr
    assert lines(out / "teacher" / "train.de") == lines(written)  # its beam, its defaults
    record = json.loads((out / "teacher" / "train.de.json").read_text())
    assert record["fingerprint"]["search"]["beam"] == 2
    assert record["sentences"] == PAIRS


def test_the_student_trains_on_the_pairs_the_filter_keeps(distilled, corpus):
    out, _ = distilled
    sources = lines(corpus / "train.en")
    texts, scores = read_translations(out / "teacher" / "train.de")
    kept, dropped = filter_pairs(sources, texts, scores, 2.0, 0.0)
    assert lines(out / "corpus" / "train.en") == [" ".join(sources[i].split()) for i in kept]
    assert lines(out / "corpus" / "train.de") == [" ".join(texts[i].split()) for i in kept]
    counts = json.loads((out / "corpus" / "filter.json").read_text())
    assert counts["kept"] == len(kept) and counts["dropped"] == dropped
    config = json.loads((out / "student-tiny" / "config.json").read_text())["model"]
    assert (config["encoder_layers"], config["decoder_layers"], config["d_model"]) == (2, 1, 32)
    deployed = Path(json.loads((out / "report-student-tiny.json").read_text())["student"]
                    ["deployed"])  # the student's best model or its average, by val
    assert (deployed / "shortlist.safetensors").is_file()
    tokenizer = (out / "data" / "tokenizer.json").read_text()
    assert tokenizer == (out / "student-tiny" / "tokenizer.json").read_text()


def test_the_report_has_teacher_and_student_greedy_and_beam_on_val_and_test(distilled):
    out, done = distilled
    report = json.loads((out / "report-student-tiny.json").read_text())
    for name in ("val", "test"):
        part = report["sets"][name]
        assert part["sentences"] == 8
        seen = {(r["model"], r["precision"], r["shortlist"], r["search"]) for r in part["rows"]}
        for model, precision, listed in (("teacher", "fp32", False), ("teacher", "int8", False),
                                         ("student", "fp32", False), ("student", "int8", False),
                                         ("student", "int8", True)):
            assert {(model, precision, listed, s) for s in ("greedy", "beam")} <= seen
        # Both models in CTranslate2 too, fp32 and int8: the student against the teacher as
        # the fastest runtime decodes it.
        in_ct2 = {(r["model"], r["precision"], r["search"]) for r in part["rows"]
                  if r["engine"] == "ctranslate2"}
        assert in_ct2 == ({(m, p, s) for m in ("teacher", "student") for p in ("fp32", "int8")
                           for s in ("greedy", "beam")} if EXPORT else set())
        for row in part["rows"]:
            assert row["sentences_per_s"] > 0 and 0 <= row["bleu"] <= 100
            # The Multi30k papers' lowercased, tokenized BLEU beside sacreBLEU's, where it
            # can be computed.
            assert (0 <= row["bleu_lc_tok"] <= 100) if MOSES else row["bleu_lc_tok"] is None
        # Each model's size on disk as deployed: here the student (2 + 1 layers) is the
        # teacher (1 + 1) with one layer more; its shortlist adds to it where it is used.
        disk = {(r["model"], r["engine"], r["shortlist"]): r["disk_mb"] for r in part["rows"]}
        weights = (out / "student-tiny" / "model.safetensors").stat().st_size / 1e6
        student = disk[("student", "tfm", False)]
        assert student > max(disk[("teacher", "tfm", False)], weights)
        assert disk[("student", "tfm", True)] > student
    assert report["deploy"]["tfm int8"]["bleu_change"] == pytest.approx(
        report["deploy"]["tfm int8"]["bleu"] - report["deploy"]["tfm fp32"]["bleu"], abs=0.02)
    # The printed table, into a pipe at its natural width: each row on a line, nothing cut.
    assert re.search(r"│ val +│ teacher +│ tfm fp32 +│ greedy +│", done.stdout)
    assert re.search(r"│ test +│ student +│ tfm int8 \+sl +│ beam 2 +│", done.stdout)


def test_the_report_decodes_the_whole_set_by_default(teacher, tmp_path):
    """(The whole run above is told 8 sentences of 50.)"""
    from tfm.data.corpus import CorpusSpec
    from tfm.training.distill_report import measure

    for lang in ("en", "de"):  # a set of 5 pairs
        (tmp_path / f"valid.{lang}").write_text("\n".join(lines(DEMO / f"valid.{lang}")[:5]) + "\n",
                                                encoding="utf-8")
    valid = [("val", CorpusSpec((str(tmp_path / "valid"),), "en", "de"))]
    assert measure(teacher, teacher, valid, 2, 0, "cpu")["sets"]["val"]["sentences"] == 5


def test_the_reports_lc_tok_bleu_is_the_papers_and_needs_the_target_language():
    from tfm.training.distill_report import _lc_tok

    hypotheses, references = ["Ein Hund läuft , schnell."], ["ein Hund läuft, schnell."]
    assert _lc_tok(hypotheses, references, None) is None
    if MOSES:
        from tfm.decoding.scoring import bleu_lc_tok

        # Case and the comma's spacing are the tokenizer's business: the same tokens, 100.
        assert _lc_tok(hypotheses, references, "de") == 100.0
        assert _lc_tok(["Eine Katze ."], references, "de") == round(
            bleu_lc_tok(["Eine Katze ."], references, "de").score, 2)


# --- the average of the last checkpoints, deployed where it scores higher on val -------------

def test_the_students_last_checkpoints_are_averaged_and_the_better_on_val_deployed(distilled):
    from safetensors.torch import load_file

    from tfm.data.corpus import CorpusSpec, iter_pairs
    from tfm.layout import ModelDir
    from tfm.training.distill_report import greedy_bleu

    out, done = distilled
    student = out / "student-tiny"
    average = json.loads((out / "stages.json").read_text())["student-tiny"]["average"]
    assert average["steps"] == [2, 4]  # --average 5, and 2 checkpoints were kept (every 2 of 4)
    mean = load_file(student / "averaged" / "model.safetensors")
    two, four = (load_file(ModelDir(student).checkpoint(n)) for n in (2, 4))
    name = "encoder_layers.0.ffn.fc1.weight"
    assert torch.allclose(mean[name], (two[name] + four[name]) / 2, atol=1e-6)
    # Each model's greedy BLEU on the report's 8 val sentences, as recorded; the higher wins.
    pairs = list(iter_pairs(CorpusSpec((str(DEMO / "valid"),), "en", "de")))[:8]
    bleu = average["val_bleu_greedy"]
    assert bleu == {"model": greedy_bleu(student, pairs, "cpu"),
                    "averaged": greedy_bleu(student / "averaged", pairs, "cpu")}
    chosen = student / "averaged" if bleu["averaged"] > bleu["model"] else student
    assert average["deployed"] == str(chosen) and f"{chosen} deployed" in done.stderr
    report = json.loads((out / "report-student-tiny.json").read_text())
    assert report["student"]["deployed"] == str(chosen)
    assert report["student"]["average"] == average


@pytest.mark.parametrize(("averaged", "model", "wins"), [(30.0, 20.0, True),
                                                         (20.0, 20.0, False)])
def test_the_average_replaces_the_model_only_where_its_val_bleu_is_higher(
        distilled, tmp_path, monkeypatch, averaged, model, wins):
    """And what was deployed of the other model before (its shortlist, export and report)
    is made again of the average."""
    from types import SimpleNamespace

    from tfm.config import DistillConfig
    from tfm.data.corpus import CorpusSpec
    from tfm.training import distill_report
    from tfm.training.distill import _averaged

    out = tmp_path / "run"
    shutil.copytree(distilled[0] / "student-tiny", out / "student-tiny")
    before = {"trained": {"step": 4}, "shortlist": True, "export": "x", "report": {"sets": []}}
    (out / "stages.json").write_text(json.dumps({"student-tiny": before}))
    monkeypatch.setattr(distill_report, "greedy_bleu",
                        lambda path, pairs, device: averaged if path.name == "averaged"
                        else model)
    plan = SimpleNamespace(corpora=SimpleNamespace(valid=CorpusSpec((str(DEMO / "valid"),),
                                                                    "en", "de")),
                           train=SimpleNamespace(device="cpu"))
    student = out / "student-tiny"
    deployed = _averaged(plan, out, DistillConfig(preset="student-tiny"), student, print)
    assert deployed == (student / "averaged" if wins else student)
    stages = json.loads((out / "stages.json").read_text())["student-tiny"]
    assert set(stages) == ({"trained", "average"} if wins else {*before, "average"})
    # Run again, the choice is kept, not made again.
    monkeypatch.setattr(distill_report, "greedy_bleu", None)
    assert _averaged(plan, out, DistillConfig(preset="student-tiny"), student, print) == deployed


def test_average_0_deploys_the_students_best_model(distilled, tmp_path):
    from tfm.config import DistillConfig
    from tfm.training.distill import _averaged

    out = tmp_path / "run"
    shutil.copytree(distilled[0] / "student-tiny", out / "student-tiny", ignore=shutil.
                    ignore_patterns("averaged"))
    config = DistillConfig(preset="student-tiny", average=0)
    assert _averaged(None, out, config, out / "student-tiny", print) == out / "student-tiny"
    assert not (out / "student-tiny" / "averaged").exists()


def test_the_report_is_measured_apart_from_what_the_run_held_before():
    """The report's peak memory is each model's as a deployment loads it: measured in a fresh
    process, not in the one whose training (here a held buffer) left memory resident."""
    from tfm.training.distill import _apart
    from tfm.training.distill_report import _peak_mb

    held = b"x" * (400 << 20)  # resident: 400 MB
    assert _apart(_peak_mb) < _peak_mb() - 300
    del held


# --- the translations kept, and reused ------------------------------------------------------

def test_a_second_student_reuses_the_teachers_translations(distilled, teacher, corpus):
    out, _ = distilled
    kept = out / "teacher" / "train.de"
    before = kept.stat().st_mtime_ns
    done = distill(teacher, corpus, out, "--decoder-self-attn", "ssru")
    assert done.returncode == 0, done.stderr
    assert f"{PAIRS} translated before, 0 now" in done.stderr
    assert kept.stat().st_mtime_ns == before
    config = json.loads((out / "student-tiny-ssru" / "config.json").read_text())["model"]
    assert config["decoder_self_attention"] == "ssru"
    assert (out / "report-student-tiny-ssru.json").is_file()


def test_a_student_can_start_from_the_teachers_weights_of_its_shape(distilled, teacher,
                                                                     corpus):
    """--teacher-init: the student's weights that the teacher has (same name and shape:
    here the embeddings and the first encoder and decoder layer) start as the teacher's; the
    second encoder layer, beyond the teacher's depth, as `tfm train` draws it with its
    residual branches' last projections zeroed."""
    from safetensors.torch import load_file

    out, _ = distilled
    done = distill(teacher, corpus, out, "--name", "tiny-init", "--teacher-init")
    assert done.returncode == 0, done.stderr
    start = load_file(out / "tiny-init.init" / "model.safetensors")
    theirs = load_file(teacher / "model.safetensors")
    for name in ("src_embed.token.weight", "encoder_layers.0.ffn.fc1.weight",
                 "decoder_layers.0.encoder_attn.q_proj.weight"):
        assert start[name].equal(theirs[name]), name
    assert "encoder_layers.1.ffn.fc1.weight" not in theirs
    assert start["encoder_layers.1.ffn.fc1.weight"].any()
    assert not start["encoder_layers.1.ffn.fc2.weight"].any()
    assert not start["encoder_layers.1.self_attn.out_proj.weight"].any()
    provenance = json.loads((out / "tiny-init" / "config.json").read_text())["provenance"]
    assert provenance["init_from"] == str(out / "tiny-init.init")
    copied = json.loads((out / "stages.json").read_text())["tiny-init"]["init_from_teacher"]
    assert 0 < copied["copied"] < copied["of"]
    # It is the default: the run without the option started its student so too.
    default = json.loads((out / "stages.json").read_text())["student-tiny"]
    assert default["init_from_teacher"] == copied


def test_a_layer_beyond_the_teachers_depth_starts_as_the_layernorm_of_the_layer_below():
    # A 3-layer encoder started from a 1-layer teacher's: layers 1 and 2 add nothing to their
    # input in either residual branch, so (post-norm) each returns its LayerNorms of the
    # layer below's output, and the teacher's layer's output reaches the decoder renormalised.
    import torch

    from tfm.config import ModelConfig
    from tfm.model import Transformer
    from tfm.model.attention import padding_mask
    from tfm.special_tokens import PAD_ID
    from tfm.training.distill import teacher_start_weights

    shape = dict(d_model=16, n_heads=2, d_ff=32, dropout=0.0, src_vocab_size=30,
                 tgt_vocab_size=30, decoder_layers=1)
    torch.manual_seed(0)
    small = Transformer(ModelConfig(encoder_layers=1, **shape)).eval()
    deep = Transformer(ModelConfig(encoder_layers=3, **shape)).eval()
    state, copied = teacher_start_weights(deep.state_dict(), small.state_dict(), (1, 1))
    deep.load_state_dict(state)
    assert copied == len(small.state_dict())
    src = torch.randint(4, 30, (2, 7))
    with torch.no_grad():
        x = small.encoder_layers[0](small.src_embed(src), padding_mask(src, PAD_ID))
        for layer in deep.encoder_layers[1:]:  # LayerNorm after each branch, added nothing
            for norm in (layer.self_attn_layer_norm, layer.final_layer_norm):
                x = norm(x)
        assert torch.allclose(deep.encode(src)[0], deep.encoder_norm(x), atol=1e-5)


def test_a_corpus_translation_killed_midway_goes_on_from_its_chunks(tmp_path, teacher):
    """A chunk is whole or absent: a run stopped in its third chunk keeps the first two, and
    the translation it then finishes is the one an unstopped run writes."""
    translator = load_translator(teacher, "cpu")
    options = translator.default_options()
    sources = lines(DEMO / "valid.en")[:20]
    whole = translate_corpus(translator, sources, tmp_path / "whole" / "t.de", options, chunk=6)

    class Stop(Exception):
        pass

    calls = []

    def progress(n: int) -> None:
        calls.append(n)
        if sum(calls) > 12:  # inside the third chunk's batches
            raise Stop

    target = tmp_path / "stopped" / "t.de"
    with pytest.raises(Stop):
        translate_corpus(translator, sources, target, options, chunk=6, progress=progress)
    parts = sorted(p.name for p in target.with_name("t.de.parts").iterdir())
    assert parts == ["chunk-000000.jsonl", "chunk-000001.jsonl", "fingerprint.json"]
    again = translate_corpus(translator, sources, target, options, chunk=6)
    assert (again.reused, again.translated) == (12, 8)
    assert read_translations(target) == read_translations(whole.path)
    assert not target.with_name("t.de.parts").exists()
    # Another search is another translation: nothing of the first reused.
    other = translate_corpus(translator, sources, target, SearchOptions(beam=1), chunk=6)
    assert other.reused == 0


# --- a killed run goes on --------------------------------------------------------------------

def test_a_run_killed_while_the_teacher_translates_goes_on_where_it_stopped(
        tmp_path, teacher, corpus, distilled):
    out = tmp_path / "run"
    killed = distill(teacher, corpus, out, hook=True, TFM_TEST_KILL_CHUNK="2")
    assert killed.returncode == -signal.SIGKILL
    assert not (out / "teacher" / "train.de").exists()
    done = distill(teacher, corpus, out)
    assert done.returncode == 0, done.stderr
    assert f"25 translated before, {PAIRS - 25} now" in done.stderr
    assert lines(out / "teacher" / "train.de") == lines(distilled[0] / "teacher" / "train.de")


def test_a_run_killed_while_the_student_trains_resumes_it(tmp_path, teacher, corpus):
    out = tmp_path / "run"
    killed = distill(teacher, corpus, out, hook=True, TFM_TEST_KILL_AT="3")
    assert killed.returncode == -signal.SIGKILL
    done = distill(teacher, corpus, out)
    assert done.returncode == 0, done.stderr
    assert f"{PAIRS} translated before, 0 now" in done.stderr
    records = [json.loads(x) for x in lines(out / "student-tiny" / "metrics.jsonl")]
    steps = [r["step"] for r in records if r["kind"] == "train"]
    assert steps[-1] == 4 and steps.count(3) == 2  # step 3 again: from the checkpoint of 2
    stages = json.loads((out / "stages.json").read_text())
    assert stages["student-tiny"]["trained"]["step"] == 4


# --- bad input: one line, nothing written ----------------------------------------------------

def refused(done, *words: str) -> None:
    assert done.returncode == 2, done.stderr
    message = done.stderr.strip()
    assert message.startswith("error:") and "\n" not in message, message
    for word in words:
        assert word in message, message


def test_a_teacher_of_the_other_direction_is_refused(tmp_path, teacher, corpus):
    out = tmp_path / "run"
    refused(distill(teacher, corpus, out, "-s", "de", "-t", "en"), "en→de", "other direction")
    assert not out.exists()


def test_a_prepared_dataset_of_another_tokenizer_is_refused(tmp_path, teacher, corpus,
                                                           tokenizer_path):
    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare

    other = tmp_path / "other-data"
    prepare(CorpusSpec((str(corpus / "train"),), "en", "de"), tokenizer_path, other)
    out = tmp_path / "run"
    refused(distill(teacher, corpus, out, "--data", str(other)), "another tokenizer")
    assert not out.exists()


def test_a_student_the_export_cannot_hold_is_refused(tmp_path, teacher, corpus):
    out = tmp_path / "run"
    refused(distill(teacher, corpus, out, "--decoder-self-attn", "ssru", "--export",
                    "ctranslate2"), "--export ctranslate2", "SSRU")
    assert not out.exists()


def test_a_directory_of_another_kind_of_run_is_refused(tmp_path, teacher, corpus, dataset):
    for other, kind in ((teacher, "a training run"), (dataset, "a prepared dataset")):
        before = sorted(p.name for p in other.iterdir())
        refused(distill(teacher, corpus, other), kind, "not a tfm distill run")
        assert sorted(p.name for p in other.iterdir()) == before


def test_a_distill_run_of_another_teacher_or_corpus_is_refused(tmp_path, distilled, teacher,
                                                              corpus):
    from tfm.data.tokenizer import load_vocabularies

    out, _ = distilled
    before = sorted(p.name for p in out.rglob("*"))
    tokenizer = load_vocabularies(teacher / "tokenizer.json").src
    other_teacher = random_model_dir(tmp_path / "other", tokenizer)
    refused(distill(other_teacher, corpus, out), "another teacher")
    fewer = tmp_path / "fewer"
    fewer.mkdir()
    for lang in ("en", "de"):
        shutil.copy(corpus / f"train.{lang}", fewer / f"train.{lang}")
        (fewer / f"train.{lang}").write_text("".join(
            x + "\n" for x in lines(corpus / f"train.{lang}")[:-1]), encoding="utf-8")
    refused(distill(teacher, fewer, out), "another training corpus")
    assert sorted(p.name for p in out.rglob("*")) == before


def test_the_filter_drops_empty_copied_and_disproportionate_pairs_then_the_least_certain():
    sources = ["a b c", "", "Das ist gut", "one two", "short", "x y z", "p q r", "m n o"]
    translations = ["A B C D", "leer", "das  ist GUT", "", "a translation far too long",
                    "X Y Z W", "P Q R S", "M N O P"]
    scores = [-0.5, -0.1, -0.2, -0.3, -0.4, -2.0, -0.1, -0.3]
    kept, dropped = filter_pairs(sources, translations, scores, 2.0, 0.0)
    assert kept == [0, 5, 6, 7]
    assert dropped == {"empty": 2, "copy": 1, "ratio": 1, "score": 0}
    kept, dropped = filter_pairs(sources, translations, scores, 2.0, 0.5)
    assert kept == [6, 7] and dropped["score"] == 2  # -2.0 and -0.5 go
    assert filter_pairs(sources, translations, scores, 0, 0.0)[0] == [0, 4, 5, 6, 7]
