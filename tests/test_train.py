"""The training loop: reproducible, resumable to the bit, safe to interrupt."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from tfm.config import ModelConfig, TrainConfig
from tfm.errors import UsageError
from tfm.layout import ModelDir
from tfm.training.loop import TrainingDiverged, train
from tfm.training.objective import label_smoothed_loss
from tfm.training.schedule import learning_rate

TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                   dropout=0.1)


def config(**overrides) -> TrainConfig:
    values = dict(max_tokens=512, lr=1e-3, warmup_steps=5, valid_every=10**6, save_every=10**6,
                  log_every=1, valid_bleu=False, precision="fp32", seed=3, keep_last=2)
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
    second = train(dataset, tmp_path / "resumed", None, config(max_steps=2 * k), resume=True,
                   explicit={"max_steps"})
    assert straight.step == second.step == 2 * k
    assert straight.epoch == second.epoch >= 1  # the run crossed an epoch boundary
    a = load_file(tmp_path / "straight" / "last.safetensors")
    b = load_file(tmp_path / "resumed" / "last.safetensors")
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    assert losses(tmp_path / "straight") == losses(tmp_path / "resumed")


def test_resume_refuses_when_nothing_is_left_to_do(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    with pytest.raises(UsageError, match="nothing left to do"):
        train(dataset, tmp_path / "m", None, config(max_steps=3), resume=True,
              explicit={"max_steps"})


def test_resume_refuses_options_that_contradict_the_run(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=3))
    with pytest.raises(UsageError, match="--lr"):
        train(dataset, tmp_path / "m", None, config(max_steps=6, lr=5e-3), resume=True,
              explicit={"max_steps", "lr"})


def test_a_new_run_does_not_silently_overwrite_an_old_one(dataset: Path, tmp_path: Path) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    with pytest.raises(UsageError, match="--resume"):
        train(dataset, tmp_path / "m", TINY, config(max_steps=2))
    result = train(dataset, tmp_path / "m", TINY, config(max_steps=2), overwrite=True)
    assert result.step == 2


def test_a_diverging_loss_stops_the_run_and_keeps_the_last_checkpoint(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    train(dataset, tmp_path / "m", TINY, config(max_steps=4, save_every=2))
    before = ModelDir(tmp_path / "m").train_state.read_bytes()

    def nan_loss(logits, target, epsilon):
        loss, nll = label_smoothed_loss(logits, target, epsilon)
        return loss * float("nan"), nll

    monkeypatch.setattr("tfm.training.loop.label_smoothed_loss", nan_loss)
    with pytest.raises(TrainingDiverged, match="loss became nan at step 5"):
        train(dataset, tmp_path / "m", None, config(max_steps=8), resume=True,
              explicit={"max_steps"})
    assert ModelDir(tmp_path / "m").train_state.read_bytes() == before


def test_sigint_saves_a_loadable_checkpoint_and_resume_continues(dataset: Path,
                                                                 tmp_path: Path) -> None:
    model = tmp_path / "m"
    command = [sys.executable, "-m", "tfm", "train", "--data", str(dataset), "--output",
               str(model), "--preset", "tiny", "--max-steps", "100000", "--log-every", "1",
               "--max-tokens", "512", "--save-every", "100000", "--valid-every", "100000",
               "--precision", "fp32"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                               text=True)
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        metrics = model / "metrics.jsonl"
        if metrics.exists() and len(metrics.read_text().splitlines()) >= 3:
            break
        time.sleep(0.2)
    process.send_signal(signal.SIGINT)
    _, stderr = process.communicate(timeout=120)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr
    assert "--resume" in stderr
    state = torch.load(ModelDir(model).train_state, weights_only=True)
    step = state["run"]["step"]
    assert step >= 3
    resumed = subprocess.run(
        [sys.executable, "-m", "tfm", "train", "--data", str(dataset), "--output", str(model),
         "--resume", "--max-steps", str(step + 2)], capture_output=True, text=True, timeout=300)
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
