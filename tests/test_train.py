"""The training loop: reproducible, resumable to the bit, safe to interrupt."""

from __future__ import annotations

import dataclasses
import json
import math
import signal
import subprocess
import time
from pathlib import Path

import pytest
import torch
from conftest import HANG, tfm
from safetensors.torch import load_file

from tfm.config import ModelConfig, TrainConfig
from tfm.errors import UsageError
from tfm.layout import ModelDir
from tfm.training.loop import TrainingDiverged, resume, train
from tfm.training.objective import label_smoothed_loss
from tfm.training.schedule import learning_rate
from tfm.training.state import Overrides

TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                   dropout=0.1)


def config(**overrides) -> TrainConfig:
    values = dict(max_tokens=512, lr=1e-3, warmup_steps=5, valid_every=10**6, save_every=10**6,
                  log_every=1, valid_bleu=False, precision="fp32", seed=3, keep_last=2,
                  device="cpu")  # bit for bit: the CPU's behaviour (tests/test_cuda.py: a GPU's)
    values.update(overrides)
    return TrainConfig(**values)


def losses(model_dir: Path) -> list[float]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line)["loss"] for line in lines if json.loads(line)["kind"] == "train"]


def test_learning_rate_warms_up_linearly_then_decays_as_inverse_sqrt() -> None:
    assert learning_rate(1, 1e-3, 100) == pytest.approx(1e-5)
    assert learning_rate(50, 1e-3, 100) == pytest.approx(5e-4)
    assert learning_rate(100, 1e-3, 100) == pytest.approx(1e-3)
    assert learning_rate(400, 1e-3, 100) == pytest.approx(5e-4)


@pytest.mark.parametrize("schedule", ["linear", "cosine"])
def test_budget_schedules_warm_up_then_decay_to_zero_at_the_end_of_the_budget(
        schedule: str) -> None:
    assert learning_rate(50, 1e-3, 100, schedule, progress=0.05) == pytest.approx(5e-4)
    halfway = learning_rate(500, 1e-3, 100, schedule, progress=0.5)
    assert halfway == pytest.approx(5e-4)  # linear and cosine agree at the middle
    rates = [learning_rate(s, 1e-3, 100, schedule, progress=s / 1000) for s in range(100, 1001)]
    assert all(a >= b for a, b in zip(rates, rates[1:]))  # never rises after warmup
    assert rates[-1] == pytest.approx(0.0, abs=1e-12)
    assert learning_rate(2000, 1e-3, 100, schedule, progress=2.0) == 0.0  # past the budget


def test_the_first_budget_to_run_out_sets_the_progress() -> None:
    from tfm.training.schedule import budget_progress

    assert budget_progress(config(max_steps=100), 25, 0.0, 0.0) == 0.25
    assert budget_progress(config(max_epochs=4), 25, 1.0, 0.0) == 0.25
    assert budget_progress(config(max_time=10.0), 25, 1.0, 150.0) == 0.25
    both = config(max_steps=100, max_time=10.0)  # 60% of the time, 25% of the steps
    assert budget_progress(both, 25, 1.0, 360.0) == pytest.approx(0.6)


def test_a_budget_schedule_without_a_budget_is_refused(dataset: Path, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="give --max-steps, --max-epochs or --max-time"):
        train(dataset, tmp_path / "m", TINY, config(lr_schedule="linear", patience=3))
    with pytest.raises(UsageError, match="unknown --lr-schedule 'step'"):
        train(dataset, tmp_path / "m", TINY, config(lr_schedule="step", max_steps=3))


def test_a_linear_schedule_reaches_zero_at_max_steps(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(lr_schedule="linear", max_steps=10))
    lines = (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()
    rates = [json.loads(x)["lr"] for x in lines if json.loads(x)["kind"] == "train"]
    assert len(rates) == 10
    assert rates[4] == pytest.approx(1e-3 * 5 / 5 * 0.6)  # step 5: min(warm 1.0, 1 - 4/10)
    assert rates[-1] == pytest.approx(1e-3 * 0.1)  # step 10 runs at 1 - 9/10 of the peak


def test_label_smoothed_loss_ignores_padding_and_matches_cross_entropy() -> None:
    torch.manual_seed(0)
    logits = torch.randn(2, 5, 11)
    target = torch.randint(4, 11, (2, 5))
    target[1, 3:] = 0  # padding
    loss, nll = label_smoothed_loss(logits, target, epsilon=0.0)
    keep = target != 0
    expected = torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum")
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)
    assert nll.item() == pytest.approx(expected.item(), rel=1e-6)
    smoothed, _ = label_smoothed_loss(logits, target, epsilon=0.1)
    expected = torch.nn.functional.cross_entropy(logits[keep], target[keep], reduction="sum",
                                                 label_smoothing=0.1)
    assert smoothed.item() == pytest.approx(expected.item(), rel=1e-5)


@pytest.mark.parametrize("epsilon", [0.0, 0.1])
def test_label_smoothed_loss_gradient_is_cross_entropys(epsilon: float) -> None:
    # The loss has a hand-written backward pass: it must give autograd's gradient of the
    # textbook formula, at real positions and nowhere else.
    torch.manual_seed(1)
    logits = torch.randn(3, 4, 17, requires_grad=True)
    target = torch.randint(4, 17, (3, 4))
    target[2, 1:] = 0  # padding
    weights = torch.rand(3, 4, 17)  # a loss that is not the last operation, as in training
    loss, _ = label_smoothed_loss(logits * weights, target, epsilon)
    (loss * 0.5).backward()
    mine = logits.grad.clone()
    logits.grad = None
    keep = target != 0
    expected = torch.nn.functional.cross_entropy((logits * weights)[keep], target[keep],
                                                 reduction="sum", label_smoothing=epsilon)
    (expected * 0.5).backward()
    assert torch.allclose(mine, logits.grad, atol=1e-6)
    assert mine[2, 1:].abs().sum() == 0


def test_same_seed_same_data_gives_the_same_loss_curve(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "a", TINY, config(max_steps=12))
    train(dataset, tmp_path / "b", TINY, config(max_steps=12))
    train(dataset, tmp_path / "c", TINY, config(max_steps=12, seed=4))
    assert losses(tmp_path / "a") == losses(tmp_path / "b")
    assert losses(tmp_path / "a") != losses(tmp_path / "c")
    assert len(losses(tmp_path / "a")) == 12


def test_a_run_stopped_and_resumed_ends_with_identical_weights(dataset: Path,
                                                               tmp_path: Path) -> None:
    k = 7  # at 2048 tokens an epoch of the demo corpus is a few batches: the runs cross epochs
    straight = train(dataset, tmp_path / "straight", TINY,
                     config(max_steps=2 * k, max_tokens=2048))
    first = train(dataset, tmp_path / "resumed", TINY, config(max_steps=k, max_tokens=2048))
    assert first.step == k
    second = resume(dataset, tmp_path / "resumed",
                    Overrides.of(config(max_steps=2 * k), "max_steps"))
    assert straight.step == second.step == 2 * k
    assert straight.epoch == second.epoch >= 1  # the run crossed an epoch boundary
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert losses(tmp_path / "straight") == losses(tmp_path / "resumed")


@pytest.mark.parametrize("budget", [{"max_steps": 3}, {"max_time": 1e-6}],
                         ids=["steps", "minutes"])
def test_resume_refuses_when_nothing_is_left_to_do(dataset: Path, tmp_path: Path,
                                                   budget: dict) -> None:
    # (A budget of 1e-6 minutes is spent by the first step.)
    first = train(dataset, tmp_path / "m", TINY, config(**budget))
    assert first.stopped.startswith("reached")
    with pytest.raises(UsageError, match="nothing left to do"):
        resume(dataset, tmp_path / "m", Overrides.of(config(**budget), *budget))


def test_resume_refuses_options_that_contradict_the_run(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    with pytest.raises(UsageError, match="--lr"):
        resume(dataset, tmp_path / "m",
               Overrides.of(config(max_steps=6, lr=5e-3), "max_steps", "lr"))


@pytest.mark.parametrize(("preset", "options", "refused"), [
    (None, {"dropout": 0.3}, "--dropout 0.3"),
    (None, {"d_ff": 128}, "--d-ff 128"),
    ("base", {}, "--preset base"),
])
def test_resume_refuses_model_options_that_contradict_the_run(
        dataset: Path, tmp_path: Path, preset, options, refused) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    with pytest.raises(UsageError, match=refused):
        resume(dataset, tmp_path / "m",
               Overrides.of(config(max_steps=6), "max_steps", model=options, preset=preset))


def test_resume_accepts_the_model_options_that_started_the_run(dataset: Path,
                                                               tmp_path: Path) -> None:
    # What a script that resumes with its own command line gives: the run's own values.
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    options = {name: getattr(TINY, name) for name in ("d_model", "n_heads", "d_ff", "dropout")}
    result = resume(dataset, tmp_path / "m",
                    Overrides.of(config(max_steps=6), "max_steps",
                                 model={**options, "norm_first": None}))
    assert result.step == 6


def test_a_new_run_does_not_silently_overwrite_an_old_one(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    with pytest.raises(UsageError, match="--resume"):
        train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    shortlist = ModelDir(tmp_path / "m").shortlist
    shortlist.write_bytes(b"made for the old run's model")
    result = train(dataset, tmp_path / "m", TINY, config(max_steps=2), overwrite=True)
    assert result.step == 2
    assert not shortlist.exists()  # it described the model --overwrite replaced


def test_a_diverging_loss_stops_the_run_and_keeps_the_last_checkpoint(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=4, save_every=2))
    before = ModelDir(tmp_path / "m").train_state.read_bytes()

    def nan_loss(logits, target, epsilon):
        loss, nll = label_smoothed_loss(logits, target, epsilon)
        return loss * float("nan"), nll

    monkeypatch.setattr("tfm.training.loop.label_smoothed_loss", nan_loss)
    with pytest.raises(TrainingDiverged, match="loss became nan at step 5"):
        resume(dataset, tmp_path / "m", Overrides.of(config(max_steps=8), "max_steps"))
    assert ModelDir(tmp_path / "m").train_state.read_bytes() == before


def test_sigint_saves_a_loadable_checkpoint_and_resume_continues(dataset: Path,
                                                                 tmp_path: Path, spawn) -> None:
    model = tmp_path / "m"
    command = ["train", "--data", str(dataset), "--output", str(model), "--preset", "tiny",
               "--max-steps", "100000", "--log-every", "1", "--max-tokens", "512",
               "--save-every", "100000", "--valid-every", "100000", "--precision", "fp32"]
    process = spawn.tfm(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + HANG  # only catches a hang: how soon it starts is the machine's
    while time.monotonic() < deadline and process.poll() is None:
        metrics = model / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=HANG)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "--resume" in stderr
    state = torch.load(ModelDir(model).train_state, weights_only=True)
    step = state["run"]["step"]
    assert step >= 3
    resumed = tfm("train", "--data", str(dataset), "--output", str(model), "--resume",
                  "--max-steps", str(step + 2))
    assert resumed.returncode == 0, resumed.stderr
    assert f"Resuming at step {step}" in resumed.stderr
    assert torch.load(ModelDir(model).train_state, weights_only=True)["run"]["step"] == step + 2


def test_running_out_of_memory_names_the_batch_and_gives_advice(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfm.errors import ResourceError

    def no_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr("tfm.training.loop._update", no_memory)
    with pytest.raises(ResourceError, match=r"sentences x \d+ positions.*--max-tokens 512"):
        train(dataset, tmp_path / "m", TINY, config(max_steps=3))


def test_training_time_is_wall_time_however_often_the_run_saves(
    dataset: Path, tmp_path: Path,
) -> None:
    start = time.monotonic()
    train(dataset, tmp_path / "m", TINY, config(max_steps=12, save_every=1))
    wall = time.monotonic() - start
    elapsed = [json.loads(line)["elapsed"] for line in
               (tmp_path / "m" / "metrics.jsonl").read_text().splitlines()
               if json.loads(line)["kind"] == "train"]
    assert elapsed == sorted(elapsed)
    assert elapsed[-1] <= wall  # saving every step must not count the time again
    state = torch.load(ModelDir(tmp_path / "m").train_state, weights_only=True)
    assert elapsed[-1] <= state["run"]["elapsed"] <= wall


# --- validation: when it runs, and what patience counts -------------------------------------


def records(model_dir: Path, kind: str) -> list[dict]:
    lines = (model_dir / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == kind]


@pytest.fixture(scope="module")
def dataset_without_valid(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo training corpus prepared with the dataset's tokenizer, without a valid split."""
    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare

    demo = Path(__file__).resolve().parent.parent / "data" / "demo"
    out = tmp_path_factory.mktemp("no-valid") / "data"
    prepare(CorpusSpec((str(demo / "train"),), "en", "de"), dataset.parent / "tok.json", out)
    return out


def test_validation_runs_every_valid_every_steps_and_at_the_end(dataset: Path,
                                                                tmp_path: Path) -> None:
    # At 2048 tokens an epoch is a few batches: the run crosses epoch ends without
    # validating there.
    result = train(dataset, tmp_path / "m", TINY,
                   config(max_steps=13, max_tokens=2048, valid_every=6))
    assert result.epoch >= 2
    valid = records(tmp_path / "m", "valid")
    assert [r["step"] for r in valid] == [6, 12, 13]
    # Each validation says how long the model it scored took to train (BLEU against time).
    train_elapsed = {r["step"]: r["elapsed"] for r in records(tmp_path / "m", "train")}
    for r in valid:
        assert train_elapsed[r["step"]] <= r["elapsed"]
    assert [r["elapsed"] for r in valid] == sorted(r["elapsed"] for r in valid)


def test_a_run_stopped_by_max_epochs_validates_once_at_its_end(dataset: Path,
                                                               tmp_path: Path) -> None:
    result = train(dataset, tmp_path / "m", TINY, config(max_epochs=2, max_tokens=2048))
    assert result.stopped == "reached --max-epochs 2"
    assert [r["step"] for r in records(tmp_path / "m", "valid")] == [result.step]


def test_patience_without_a_validation_split_is_refused(dataset_without_valid: Path,
                                                        tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"--patience counts validations, but .* has no "
                       r"validation split: prepare it with --valid"):
        train(dataset_without_valid, tmp_path / "m", TINY, config(patience=3))
    assert not (tmp_path / "m").exists()  # refused before any work
    result = train(dataset_without_valid, tmp_path / "m", TINY, config(max_steps=2))
    assert result.step == 2 and records(tmp_path / "m", "valid") == []


def scripted_validation(monkeypatch: pytest.MonkeyPatch, losses: list[float]) -> None:
    """Make the loop's validations return ``losses``, one per validation, in order."""
    scripted = iter(losses)

    def validate(*args, **kwargs) -> dict:
        loss = next(scripted)
        return {"loss": loss, "nll": loss, "ppl": 2.0 ** loss}

    monkeypatch.setattr("tfm.training.loop.validate", validate)


def test_patience_follows_validation_loss_when_bleu_is_off(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from safetensors import safe_open

    # Better, better, worse (1), best, worse (1), worse (2): patience 2 stops at step 6.
    scripted_validation(monkeypatch, [5.0, 4.0, 4.5, 3.0, 3.5, 3.6, 3.7])
    result = train(dataset, tmp_path / "m", TINY,
                   config(valid_bleu=False, valid_every=1, patience=2, max_steps=50))
    assert result.stopped == "no lower validation loss in 2 validations"
    assert result.step == 6
    assert (result.best_step, result.best_loss, result.best_bleu) == (4, 3.0, None)
    # The model directory's weights are the best step's, the lowest validation loss.
    with safe_open(ModelDir(tmp_path / "m").weights, "pt") as f:
        assert f.metadata()["step"] == "4"
    config_json = json.loads((tmp_path / "m" / "config.json").read_text())
    assert config_json["provenance"]["best_step"] == 4
    assert config_json["provenance"]["valid_loss"] == 3.0
    assert [r["best_loss"] for r in records(tmp_path / "m", "valid")] == [5.0, 4.0, 4.0, 3.0,
                                                                          3.0, 3.0]


def test_patience_counts_validations_in_a_row_across_a_resume(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    scripted_validation(monkeypatch, [4.0, 4.5, 3.0, 3.5, 3.6])
    first = train(dataset, tmp_path / "m", TINY,
                  config(valid_bleu=False, valid_every=1, patience=2, max_steps=4))
    assert first.stopped == "reached --max-steps 4"  # one bad validation at step 4
    second = resume(dataset, tmp_path / "m", Overrides.of(config(max_steps=50), "max_steps"))
    assert (second.stopped, second.step, second.best_step) == (
        "no lower validation loss in 2 validations", 5, 3)


# --- starting from a trained model (--init-from) ----------------------------------------------


def test_a_run_initialised_from_a_model_starts_from_its_weights_at_step_0(
        dataset: Path, tmp_path: Path) -> None:
    from tfm.training.state import initial_model_config

    train(dataset, tmp_path / "trained", TINY, config(max_steps=6))
    # A learning rate too small to move a weight: after one step the weights are the model's.
    result = train(dataset, tmp_path / "tuned", initial_model_config(tmp_path / "trained"),
                   config(max_steps=1, lr=1e-12, seed=9), init_from=tmp_path / "trained")
    assert result.step == 1
    trained = load_file(tmp_path / "trained" / "last.safetensors")
    tuned = load_file(tmp_path / "tuned" / "last.safetensors")
    assert trained.keys() == tuned.keys()
    for name in trained:
        assert torch.allclose(trained[name], tuned[name], atol=1e-9), name
    # The same seed without --init-from starts elsewhere.
    train(dataset, tmp_path / "fresh", TINY, config(max_steps=1, lr=1e-12, seed=9))
    fresh = load_file(tmp_path / "fresh" / "last.safetensors")
    assert not all(torch.allclose(trained[n], fresh[n], atol=1e-3) for n in trained)
    info = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert info["provenance"]["init_from"] == str(tmp_path / "trained")


def test_a_resumed_initialised_run_still_records_where_it_started_from(
        dataset: Path, tmp_path: Path) -> None:
    from tfm.training.state import initial_model_config

    train(dataset, tmp_path / "trained", TINY, config(max_steps=2))
    train(dataset, tmp_path / "tuned", initial_model_config(tmp_path / "trained"),
          config(max_steps=2), init_from=tmp_path / "trained")
    # Resumed: its better validations write config.json anew, the provenance kept.
    resume(dataset, tmp_path / "tuned", Overrides.of(config(max_steps=6), "max_steps"))
    info = json.loads((tmp_path / "tuned" / "config.json").read_text())
    assert info["provenance"]["best_step"] == 6
    assert info["provenance"]["init_from"] == str(tmp_path / "trained")


def test_an_initialised_run_takes_the_models_architecture_and_the_dropout_given(
        dataset: Path, tmp_path: Path) -> None:
    from tfm.training.state import initial_model_config

    train(dataset, tmp_path / "trained", TINY, config(max_steps=2))
    kept = initial_model_config(tmp_path / "trained")
    changed = initial_model_config(tmp_path / "trained", dropout=0.3, activation_dropout=0.1)
    assert (kept.d_model, kept.encoder_layers, kept.d_ff, kept.dropout) == (32, 1, 64, 0.1)
    assert dataclasses.replace(kept, dropout=0.3, activation_dropout=0.1) == changed


def test_init_from_refuses_data_tokenized_otherwise(dataset: Path, tmp_path: Path) -> None:
    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare
    from tfm.data.tokenizer import save_tokenizer, train_tokenizer
    from tfm.training.state import initial_model_config

    demo = Path(__file__).resolve().parent.parent / "data" / "demo"
    texts = (demo / "train.en").read_text().splitlines()
    save_tokenizer(train_tokenizer(texts, vocab_size=300), tmp_path / "other.json")
    prepare(CorpusSpec((str(demo / "train"),), "en", "de"), tmp_path / "other.json",
            tmp_path / "other")
    train(dataset, tmp_path / "trained", TINY, config(max_steps=2))
    with pytest.raises(UsageError, match="another tokenizer"):
        train(tmp_path / "other", tmp_path / "tuned", initial_model_config(tmp_path / "trained"),
              config(max_steps=2), init_from=tmp_path / "trained")


@pytest.mark.parametrize("other", [["--init-from", "trained"], ["--overwrite"]],
                         ids=["init-from", "overwrite"])
def test_resume_is_refused_with_an_option_that_starts_a_new_run(
        dataset: Path, tmp_path: Path, other: list[str]) -> None:
    from typer.testing import CliRunner

    import tfm.cli  # noqa: F401 (registers the commands)
    from tfm.cli.app import app

    result = CliRunner().invoke(app, ["train", "--data", str(dataset), "--output",
                                      str(tmp_path / "m"), "--resume", *other])
    assert isinstance(result.exception, UsageError), result.output
    assert str(result.exception).endswith("give one")
    assert not (tmp_path / "m").exists()


def test_a_run_cannot_overwrite_the_model_it_starts_from(dataset: Path, tmp_path: Path) -> None:
    from tfm.training.state import initial_model_config

    train(dataset, tmp_path / "trained", TINY, config(max_steps=2))
    with pytest.raises(UsageError, match="the same directory"):
        train(dataset, tmp_path / "trained", initial_model_config(tmp_path / "trained"),
              config(max_steps=2), overwrite=True, init_from=tmp_path / "trained")
    assert (tmp_path / "trained" / "model.safetensors").exists()


# --- resuming: options named as the command line spells them ---------------------------------


def test_a_resumed_run_names_the_option_as_the_command_line_spells_it(
        dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    with pytest.raises(UsageError) as refused:
        resume(dataset, tmp_path / "m",
               Overrides.of(config(max_steps=4, warmup_steps=10), "max_steps", "warmup_steps"))
    assert str(refused.value).startswith("--warmup 10 contradicts the run being resumed (5)")


def train_command_options() -> dict[str, str]:
    """``tfm train``'s options: parameter name -> every spelling (--x, --no-x)."""
    import typer

    import tfm.cli  # noqa: F401 (registers the commands)
    from tfm.cli.app import app

    command = typer.main.get_command(app).commands["train"]  # type: ignore[attr-defined]
    return {p.name: " ".join(p.opts + p.secondary_opts) for p in command.params}


def test_every_train_config_option_is_spelled_as_tfm_train_spells_it() -> None:
    from dataclasses import fields

    from tfm.config import option_name

    spellings = " ".join(train_command_options().values()).split()
    for f in fields(TrainConfig):
        option = option_name(f.name)
        assert option is None or option in spellings, f.name
    assert option_name("warmup_steps") == "--warmup"
    assert option_name("num_threads") == "--threads"
    assert option_name("adam_eps") is None  # no option: named as the field in messages


def test_tfm_train_help_shows_the_train_config_defaults() -> None:
    env = {"COLUMNS": "1000"}
    shown = tfm("train", "--help", env=env).stdout
    lines = {line.split()[1]: line for line in shown.splitlines()
             if len(line.split()) > 1 and line.split()[1].startswith("--")}
    defaults = TrainConfig()
    expected = {"--max-tokens": defaults.max_tokens, "--warmup": defaults.warmup_steps,
                "--lr": defaults.lr, "--valid-every": defaults.valid_every,
                "--threads": defaults.num_threads, "--[no-]compile": "no-compile",
                "--precision": defaults.precision, "--patience": defaults.patience}
    for option, value in expected.items():
        assert f"[default: {value}]" in lines[option], lines[option]
    assert "epoch end" not in shown  # validation is every --valid-every steps and at the end


# --- fp16: loss scaling -----------------------------------------------------------------------


class _OverflowInBackward(torch.autograd.Function):
    """Identity forward, infinite gradient backward: an fp16 overflow, on any device."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad * float("inf")


def one_update_group(dataset: Path) -> list:
    from tfm.data.batching import collate, make_batches
    from tfm.data.dataset import load_split

    split = load_split(dataset, "train")
    indices = make_batches(split.src_lengths, split.tgt_lengths, 512, shuffle=False)[0]
    return [collate(split, indices)]


def tiny_model(seed: int = 0):
    from tfm.model import Transformer

    torch.manual_seed(seed)
    model = Transformer(ModelConfig(**{**TINY.__dict__, "src_vocab_size": 400,
                                       "tgt_vocab_size": 400, "dropout": 0.0}))
    return model, torch.optim.Adam(model.parameters(), lr=1e-3)


def test_fp16_steps_go_through_a_gradient_scaler(dataset: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    from tfm.training.distributed import Distributed
    from tfm.training.loop import _update

    one_process, no_scaling = Distributed(), torch.amp.GradScaler("cpu", enabled=False)
    group = one_update_group(dataset)
    model, optimizer = tiny_model()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0 ** 16)

    def overflowing(logits, target, epsilon):
        loss, nll = label_smoothed_loss(logits, target, epsilon)
        return _OverflowInBackward.apply(loss), nll

    # An update whose gradients overflow is skipped, not applied, and the scale halves.
    with monkeypatch.context() as m:
        m.setattr("tfm.training.loop.label_smoothed_loss", overflowing)
        loss, _, _ = _update(model, optimizer, group, config(), None, 1, one_process, scaler)
    assert math.isfinite(loss)  # not a divergence: fp16's normal course
    assert scaler.get_scale() == 2.0 ** 15
    for name, tensor in model.state_dict().items():
        assert torch.equal(tensor, before[name]), name
    assert not optimizer.state  # Adam did not take the step

    # The next update is applied, the gradients unscaled: as without a scaler.
    _update(model, optimizer, group, config(), None, 2, one_process, scaler)
    reference, reference_optimizer = tiny_model()
    _update(reference, reference_optimizer, group, config(), None, 2, one_process, no_scaling)
    for name, tensor in model.state_dict().items():
        torch.testing.assert_close(tensor, reference.state_dict()[name])
    assert any(not torch.equal(t, before[k]) for k, t in model.state_dict().items())


def test_the_loss_scale_is_saved_with_the_training_state_and_restored_on_resume(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfm.checkpoint import save_recorded, train_state_bytes

    # fp16 autocast is for CUDA; on a CPU the same code path runs once asked for.
    monkeypatch.setattr("tfm.training.loop.resolve_precision",
                        lambda name, device, training=True: torch.float16)
    state_path = ModelDir(tmp_path / "m").train_state
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    assert [r["loss_scale"] for r in records(tmp_path / "m", "train")] == [2.0 ** 16] * 3
    state = torch.load(state_path, weights_only=True)
    assert state["scaler"]["scale"] == 2.0 ** 16
    assert state["scaler"]["_growth_tracker"] == 3  # three steps without an overflow
    # Two steps short of doubling the scale: the resumed run must carry on from there.
    state["scaler"].update(scale=1024.0, _growth_tracker=state["scaler"]["growth_interval"] - 2)
    save_recorded(tmp_path / "m", {state_path: train_state_bytes(state)})  # as the loop saves
    resume(dataset, tmp_path / "m", Overrides.of(config(max_steps=5), "max_steps"))
    assert [r["loss_scale"] for r in records(tmp_path / "m", "train")][3:] == [1024.0, 2048.0]
    assert torch.load(state_path, weights_only=True)["scaler"]["scale"] == 2048.0


def test_adam_is_the_fused_kernel_and_a_resumed_unfused_run_stays_unfused(
        dataset: Path, tmp_path: Path) -> None:
    from tfm.checkpoint import save_recorded, train_state_bytes

    state_path = ModelDir(tmp_path / "m").train_state
    train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    state = torch.load(state_path, weights_only=True)
    assert [g["fused"] for g in state["optimizer"]["param_groups"]] == [True]
    # A checkpoint of the unfused Adam (tfm before it fused) resumes with its own updates.
    state["optimizer"]["param_groups"][0].update(fused=None)
    save_recorded(tmp_path / "m", {state_path: train_state_bytes(state)})
    resume(dataset, tmp_path / "m", Overrides.of(config(max_steps=3), "max_steps"))
    state = torch.load(state_path, weights_only=True)
    assert [g["fused"] for g in state["optimizer"]["param_groups"]] == [None]


def test_fp32_training_keeps_no_loss_scale(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    assert "loss_scale" not in records(tmp_path / "m", "train")[0]
    assert torch.load(ModelDir(tmp_path / "m").train_state, weights_only=True)["scaler"] == {}


def test_a_lowercasing_model_is_validated_against_lowercased_references(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A tokenizer trained with --lowercase makes a model that writes lowercase: validation
    BLEU compares it with the references as that tokenizer normalises them, so a model that
    writes exactly the (lowercased) references scores 100."""
    from tfm.data.corpus import CorpusSpec
    from tfm.data.dataset import load_split
    from tfm.data.prepare import prepare
    from tfm.data.tokenizer import save_tokenizer, train_tokenizer
    from tfm.decoding.search import Hypothesis
    from tfm.model import Transformer
    from tfm.training import validation

    demo = Path(__file__).resolve().parent.parent / "data" / "demo"
    texts = (demo / "train.en").read_text().splitlines() + \
        (demo / "train.de").read_text().splitlines()
    tok = train_tokenizer(texts, vocab_size=400, lowercase=True)
    save_tokenizer(tok, tmp_path / "tok.json")
    prepare(CorpusSpec((str(demo / "train"),), "en", "de"), tmp_path / "tok.json",
            tmp_path / "data", valid=CorpusSpec((str(demo / "valid"),), "en", "de"))
    split = load_split(tmp_path / "data", "valid")
    assert any(t != t.lower() for t in split.tgt_text)  # the stored references keep case
    reference_ids = {tuple(t for t in split.src(i).tolist() if t >= 4): split.tgt(i).tolist()
                     for i in range(len(split))}

    def echo_references(model, src, options, start=None):  # writes each source's reference
        rows = [[t for t in row.tolist() if t >= 4] for row in src]  # no specials
        return [[Hypothesis(reference_ids[tuple(r)], 0.0, 0.0)] for r in rows]

    monkeypatch.setattr(validation, "greedy_search", echo_references)
    vocab = tok.get_vocab_size()
    model = Transformer(dataclasses.replace(TINY, src_vocab_size=vocab, tgt_vocab_size=vocab))
    metrics = validation.validate(model, split, tok, config(valid_bleu=True),
                                  torch.device("cpu"), None)
    assert metrics["bleu"] == pytest.approx(100.0)
