"""The recipes in recipes/ run end to end, as a user runs them, on a tiny Multi30k-shaped corpus
(the models are made tiny and trained a few steps by the extra `tfm train` options every recipe
passes on): each writes its translations and prints its scores."""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import forked
import pytest
from conftest import PAIRS, session_pids
from datasets import load_from_disk

ROOT = Path(__file__).resolve().parent.parent
# A 1+1-layer model of d_model 32, a few steps: the recipes' own options come first, these win.
TINY = ["--d-model", "32", "--n-heads", "2", "--encoder-layers", "1", "--decoder-layers", "1",
        "--d-ff", "64", "--max-steps", "6", "--valid-every", "3"]


@pytest.fixture
def multi30k_like(tmp_path: Path) -> Path:
    """{train,val,test_2016_flickr}.{en,de}.gz as Multi30k ships them."""
    data = tmp_path / "data"
    data.mkdir()
    splits = {"train": PAIRS * 3, "val": PAIRS[:8], "test_2016_flickr": PAIRS[8:14]}
    for split, pairs in splits.items():
        for side, lang in enumerate(("en", "de")):
            with gzip.open(data / f"{split}.{lang}.gz", "wt", encoding="utf-8") as f:
                f.writelines(pair[side] + "\n" for pair in pairs)
    return data


# A bound that only catches a hung recipe: these runs take seconds to a minute or two.
HANG = 900


def recipe_env(**env: str) -> dict[str, str]:
    """The environment with this Python's tfm first on PATH, and ``env``."""
    path = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    return {**os.environ, "PATH": path, **env}


@pytest.fixture
def run_recipe(spawn):
    """``run_recipe(NAME, ARGS..., **ENV)``: bash recipes/NAME ARGS to its end, which must be
    a success; the recipe and every run it started end with the test (``spawn``). Its ``tfm``
    commands are forked from the test worker's preloader (tests/forked.py: the same commands,
    without torch's import each time); the Ctrl-C test below runs the real one."""
    def run(name: str, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
        environment = recipe_env(**env)
        environment.update(forked.script_environment(environment["PATH"]))
        recipe = spawn(["bash", str(ROOT / "recipes" / name), *args], cwd=ROOT,
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env=environment)
        try:
            stdout, stderr = recipe.communicate(timeout=HANG)
        except subprocess.TimeoutExpired:
            pytest.fail(f"recipes/{name} had not ended after {HANG} s: hung")
        assert recipe.returncode == 0, stdout[-3000:] + stderr[-3000:]
        return subprocess.CompletedProcess(recipe.args, recipe.returncode, stdout, stderr)

    return run


def lines(path: Path) -> list[str]:
    return path.read_text(encoding="utf-8").splitlines()


def test_the_quick_recipe_trains_and_scores_val_and_test(multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "quick"
    result = run_recipe("multi30k.sh", str(multi30k_like), "en", "de", str(out), *TINY)
    assert (out / "model" / "model.safetensors").exists()
    assert len(lines(out / "val.hyp")) == 8
    assert len(lines(out / "test_2016_flickr.hyp")) == 6
    assert result.stdout.count("BLEU = ") >= 2  # val and test
    # The papers' lc-tok BLEU too, exactly where sacremoses is installed (recipes/lib.sh).
    assert ("BLEU-lc-tok = " in result.stdout) == (importlib.util.find_spec("sacremoses")
                                                   is not None)
    # One head trained towards eflomal's word alignments (documents place inline tags by it),
    # exactly where eflomal is installed (the align extra).
    config = json.loads((out / "model" / "config.json").read_text())
    assert (config["model"].get("alignment_layer") is not None) == (
        importlib.util.find_spec("eflomal") is not None)
    assert (out / "data" / "train.align.npz").exists() == (
        importlib.util.find_spec("eflomal") is not None)


def test_a_recipe_budgets_minutes_on_a_cpu_and_the_reference_cpus_steps_on_a_gpu() -> None:
    def budget(*args: str) -> str:
        done = subprocess.run(["bash", "-c", f"source recipes/lib.sh; budget {' '.join(args)}"],
                              cwd=ROOT, capture_output=True, text=True, env=recipe_env(),
                              check=True)
        return done.stdout.strip()

    assert budget("45", "166", "''", "--device", "cpu") == "--max-time 45"
    # On CUDA the minutes become the steps the reference CPU trains in them (166 a minute);
    # the learning rate then decays to zero at that step. STEPS wins on any device.
    assert budget("45", "166", "''", "--device", "cuda") == "--max-steps 7470 --max-time 0"
    assert budget("45", "166", "''", "--device=cuda:0") == "--max-steps 7470 --max-time 0"
    assert budget("45", "166", "300", "--device", "cpu") == "--max-steps 300 --max-time 0"
    if not Path("/dev/nvidia0").exists():
        assert budget("45", "166", "''") == "--max-time 45"  # auto, and no GPU here


def test_the_distillation_recipe_trains_the_teachers_on_with_their_translations(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "distill"
    result = run_recipe("multi30k-distill.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                        TEACHER_MINUTES="5", STUDENT_MINUTES="5")
    for model in ("teachers/member1", "teachers/member2", "student3", "student4"):
        assert (out / model / "model.safetensors").exists(), model
    train = len(PAIRS) * 3
    assert len(lines(out / "train.distilled.de")) == train  # every training source translated
    with gzip.open(out / "corpus" / "train.de.gz", "rt", encoding="utf-8") as f:
        assert len(f.read().splitlines()) == 2 * train  # the references, then the translations
    for seed, teacher in ((3, "member1"), (4, "member2")):  # each student starts as a teacher
        provenance = json.loads((out / f"student{seed}" / "config.json").read_text())[
            "provenance"]
        assert provenance["init_from"] == str(out / "teachers" / teacher)
    assert len(lines(out / "val.hyp")) == 8
    assert len(lines(out / "test_2016_flickr.hyp")) == 6
    # Both candidates scored on val, the better one decoding test.
    assert "== val, the 2 students together" in result.stdout
    assert "== val, the 2 students and the 2 teachers together" in result.stdout
    assert "chosen on val" in result.stdout
    # Stopped in the students' training, run again: the teachers and the translations are
    # kept, the student whose run did not finish goes on from its checkpoint, without
    # --init-from (it has its own weights), to the longer budget given now.
    (out / "student3.done").unlink()
    teacher = (out / "teachers" / "member1" / "model.safetensors").read_bytes()
    result = run_recipe("multi30k-distill.sh", str(multi30k_like), "en", "de", str(out),
                        *TINY, "--max-steps", "9", TEACHER_MINUTES="5", STUDENT_MINUTES="5")
    assert "member 1: trained before" in result.stdout
    assert "translated before" in result.stdout
    assert "student 3 (teacher 1 trained on): resuming" in result.stdout
    assert "student 4 (teacher 2 trained on): trained before" in result.stdout
    assert (out / "teachers" / "member1" / "model.safetensors").read_bytes() == teacher
    assert logged_steps(out / "student3", "valid") == [3, 6, 9]
    assert logged_steps(out / "student4", "valid") == [3, 6]
    assert "chosen on val" in result.stdout


def test_more_distillation_rounds_train_each_rounds_students_on_from_the_last_ones(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "rounds"
    result = run_recipe("multi30k-distill.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                        MEMBERS="1", ROUNDS="3", TEACHER_MINUTES="5", STUDENT_MINUTES="5")
    # teacher 1 -> student 2 -> (round 2) student 3 -> (round 3) student 4, each trained on
    # from the one before with the originals plus its predecessor's translations.
    chain = [out / "teachers" / "member1", out / "student2", out / "round2" / "student3",
             out / "round3" / "student4"]
    for before, after in zip(chain, chain[1:]):
        provenance = json.loads((after / "config.json").read_text())["provenance"]
        assert provenance["init_from"] == str(before)
    for round_dir in (out / "round2", out / "round3"):
        assert len(lines(round_dir / "train.distilled.de")) == len(PAIRS) * 3
    assert "student 4 (student 3 trained on): training" in result.stdout
    assert "== val, the 1 students together" in result.stdout  # the last round's students
    assert len(lines(out / "test_2016_flickr.hyp")) == 6


def test_the_distillation_recipe_both_ways_back_translates_and_ranks_with_the_reverse_teacher(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "both-ways"
    result = run_recipe("multi30k-distill.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                        TEACHER_MINUTES="5", STUDENT_MINUTES="5", BOTH_WAYS="1")
    for model in ("teachers/member1", "reverse/member1", "student3", "student4"):
        assert (out / model / "model.safetensors").exists(), model
    assert not (out / "teachers" / "member2").exists()  # one teacher each way
    teacher_log = (out / "teachers.log").read_text()
    assert "== val, member 1, --mbr bleu" in teacher_log  # a lone member is named as one
    assert "members together" not in teacher_log
    reverse = json.loads((out / "reverse" / "member1" / "config.json").read_text())
    assert (reverse["src_lang"], reverse["tgt_lang"]) == ("de", "en")
    train = len(PAIRS) * 3
    assert len(lines(out / "train.distilled.de")) == train  # the sources translated
    assert len(lines(out / "train.back.en")) == train  # the targets translated back
    with gzip.open(out / "corpus" / "train.en.gz", "rt", encoding="utf-8") as f:
        sources = f.read().splitlines()
    with gzip.open(out / "corpus" / "train.de.gz", "rt", encoding="utf-8") as f:
        targets = f.read().splitlines()
    # The original pairs, the sources with their translations, the back-translations with
    # the targets they were translated from: three times the pairs, aligned.
    assert len(sources) == len(targets) == 3 * train
    assert sources[2 * train:] == lines(out / "train.back.en")
    assert targets[train:2 * train] == lines(out / "train.distilled.de")
    assert targets[2 * train:] == targets[:train]
    for seed in (3, 4):  # both students start as the one en→de teacher
        provenance = json.loads((out / f"student{seed}" / "config.json").read_text())[
            "provenance"]
        assert provenance["init_from"] == str(out / "teachers" / "member1")
    assert "== val, the 2 students together, the de→en teacher ranking their beam of 12" \
        in result.stdout
    assert "chosen on val" in result.stdout
    assert len(lines(out / "test_2016_flickr.hyp")) == 6


def logged_steps(model_dir: Path, kind: str) -> list[int]:
    """The steps at which a training run logged ``kind`` ("train", "valid"), in order."""
    records = [json.loads(line) for line in lines(model_dir / "metrics.jsonl")]
    return [r["step"] for r in records if r["kind"] == kind]


def test_a_stopped_recipe_run_again_resumes_its_training_and_keeps_what_it_finished(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "quick"
    # A run that stopped at step 3 of 6 before the recipe could mark it finished (as a
    # machine that went away leaves it): its checkpoint and no model.done.
    run_recipe("multi30k.sh", str(multi30k_like), "en", "de", str(out), *TINY,
               "--max-steps", "3")
    (out / "model.done").unlink()
    result = run_recipe("multi30k.sh", str(multi30k_like), "en", "de", str(out), *TINY)
    # Validated at its stop and at its end; trained from step 1 once: went on, not again.
    assert logged_steps(out / "model", "valid") == [3, 6]
    assert logged_steps(out / "model", "train").count(1) == 1
    assert (out / "model.done").exists()
    assert "BLEU = " in result.stdout
    # Run again once finished: nothing is trained again, the scores are given again.
    weights = (out / "model" / "model.safetensors").read_bytes()
    result = run_recipe("multi30k.sh", str(multi30k_like), "en", "de", str(out), *TINY)
    assert "trained before" in result.stdout
    assert (out / "model" / "model.safetensors").read_bytes() == weights
    assert logged_steps(out / "model", "valid") == [3, 6]
    assert "BLEU = " in result.stdout


def test_ctrl_c_stops_the_side_by_side_runs_with_a_checkpoint_each_and_a_rerun_resumes_them(
        multi30k_like, tmp_path, run_recipe, spawn):
    import signal
    import time

    out = tmp_path / "ens"
    # Runs that would go on for long, saving only when stopped.
    long = [*TINY, "--max-steps", "100000", "--save-every", "1000000", "--valid-every",
            "1000000", "--log-every", "1"]
    output = tmp_path / "recipe.out"
    # SIGINT at its default in the recipe, as a shell in a terminal starts it: pytest run in
    # the background (`pytest &`, nohup, some CI runners) ignores SIGINT, its children inherit
    # that, and bash cannot trap a signal ignored when it started: the recipe never heard the
    # Ctrl-C and its runs trained on (the failure on the Xeon without AMX, and here).
    with output.open("w") as sink:
        recipe = spawn(["bash", str(ROOT / "recipes" / "multi30k-ensemble.sh"),
                        str(multi30k_like), "en", "de", str(out), *long], cwd=ROOT,
                       stdout=sink, stderr=subprocess.STDOUT, env=recipe_env(),
                       preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))

    def state() -> str:  # what a failure shows: the recipe's output and each run's log
        logs = [output, *(out / f"member{s}.log" for s in (1, 2))]
        return "\n".join(f"--- {log.name}:\n{log.read_text()[-1500:]}" for log in logs
                         if log.exists())

    # Stopped once training has begun (a step logged): a run stopped while it loads has
    # nothing to save, and before its handler is set a signal ends it at once. (The bounds
    # below only catch a hang; how soon the runs start and stop is the machine's.)
    deadline = time.monotonic() + HANG
    while not all(_logged_a_step(out / f"member{s}.log") for s in (1, 2)):
        assert recipe.poll() is None, "the recipe ended before its runs started\n" + state()
        assert time.monotonic() < deadline, f"the runs had not started after {HANG} s\n" + \
            state()
        time.sleep(0.2)
    # Ctrl-C in a terminal: SIGINT to the foreground process group, the recipe's.
    os.killpg(recipe.pid, signal.SIGINT)
    try:
        recipe.wait(timeout=HANG)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the recipe had not stopped {HANG} s after Ctrl-C\n" + state())
    assert recipe.returncode != 0
    left = session_pids(recipe.pid)  # the runs it started ended with it
    assert not left, f"still running after the recipe ended: {left}\n" + state()
    stopped = {}
    for seed in (1, 2):
        log = (out / f"member{seed}.log").read_text()
        assert "checkpoint saved" in log, log[-2000:]  # asked once: saved, then stopped
        assert (out / f"member{seed}" / "train_state.pt").exists()
        assert not (out / f"member{seed}.done").exists()
        stopped[seed] = logged_steps(out / f"member{seed}", "train")[-1]
    # Run again, with a budget that ends soon after: each goes on from its own step.
    budget = max(stopped.values()) + 2
    result = run_recipe("multi30k-ensemble.sh", str(multi30k_like), "en", "de", str(out),
                        *TINY, "--max-steps", str(budget), "--valid-every", "1000000")
    assert "member 1: resuming" in result.stdout and "member 2: resuming" in result.stdout
    for seed in (1, 2):
        steps = logged_steps(out / f"member{seed}", "valid")
        assert steps == [budget]
        assert (out / f"member{seed}.done").exists()
    assert len(lines(out / "test_2016_flickr.hyp")) == 6


def _logged_a_step(log: Path) -> bool:
    return log.exists() and any(line.startswith("step ") for line in log.read_text().splitlines())


def test_the_students_recipe_distils_each_shape_from_one_teacher_translation(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "students"
    result = run_recipe("multi30k-students.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                        STUDENTS="student-6-1 student-tiny+ssru")
    assert (out / "teacher" / "model" / "model.safetensors").exists()
    distill = out / "distill"
    assert len(lines(distill / "teacher" / "train.de")) == len(PAIRS) * 3
    assert f"{len(PAIRS) * 3} translated before, 0 now" in result.stderr  # the second student
    for name in ("student-6-1", "student-tiny-ssru"):
        report = json.loads((distill / f"report-{name}.json").read_text())
        assert set(report["sets"]) == {"val", "test"}
        assert report["sets"]["test"]["sentences"] == 6
    model = json.loads((distill / "student-tiny-ssru" / "config.json").read_text())["model"]
    assert model["decoder_self_attention"] == "ssru"


def test_the_back_translation_recipe_simulates_scarce_data_and_iterates(
        multi30k_like, tmp_path, run_recipe):
    out = tmp_path / "lowres"
    train = len(PAIRS) * 3
    half = 12 + (train - 12) // 2
    done = run_recipe("multi30k-lowres.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                      REAL="12", SETTINGS="beam tagged", SPLIT_MONO="1")
    # 12 real pairs; of the rest, the first half's German and the second half's English as
    # monolingual text: no sentence is read in both languages.
    assert len(lines(out / "corpus" / "real.en")) == 12
    assert lines(out / "corpus" / "mono.de") == [de for _, de in (PAIRS * 3)[12:half]]
    assert lines(out / "corpus" / "mono.en") == [en for en, _ in (PAIRS * 3)[half:train]]
    assert len(lines(out / "bt" / "beam.en")) == half - 12  # back-translated whole
    # The iteration: the English text translated forward for the reverse model; both of its
    # translations by beam 5, as bt-beam's.
    assert len(lines(out / "bt" / "forward.de")) == train - half
    for made in ("beam", "forward", "iter1"):
        assert json.loads((out / "bt" / f"{made}.json").read_text())["request"]["search"][
            "beam"] == 5
    rows = [line.split("\t") for line in lines(out / "scores.tsv")]
    models = ("reverse", "base", "ceiling", "bt-beam", "bt-tagged", "bt-iter1")
    assert [(model, split) for model, split, _, _ in rows] == [
        (model, split) for model in models for split in ("val", "test_2016_flickr")]
    assert all(float(bleu) >= 0 and float(chrf) >= 0 for _, _, bleu, chrf in rows)
    # Each back-translated model's share of the gap from base to ceiling, from those scores.
    bleu = {(model, split): float(score) for model, split, score, _ in rows}
    recovered = done.stdout.split("== recovered of the gap from base to ceiling (BLEU):\n")[1]
    expected = []
    for model in models[3:]:
        for split in ("val", "test_2016_flickr"):
            floor, ceiling = bleu["base", split], bleu["ceiling", split]
            share = (f"{(bleu[model, split] - floor) / (ceiling - floor):.0%}"
                     if ceiling > floor else "n/a")
            expected.append(f"{model}\t{split}\t{share}")
    assert recovered.splitlines() == expected
    # UPSAMPLE=2: the real pairs twice beside the same synthetic ones, a model of its own; the
    # models trained before are kept.
    again = run_recipe("multi30k-lowres.sh", str(multi30k_like), "en", "de", str(out), *TINY,
                       REAL="12", SETTINGS="beam", UPSAMPLE="2")
    assert "reverse: trained before" in again.stdout
    pairs = {name: load_from_disk(str(out / f"data-{name}"))["train"].num_rows
             for name in ("bt-beam", "bt-beam-up2")}
    assert pairs["bt-beam-up2"] - pairs["bt-beam"] == 12  # the 12 real pairs once more
    assert ("bt-beam-up2", "test_2016_flickr") in [
        tuple(line.split("\t")[:2]) for line in lines(out / "scores.tsv")]
