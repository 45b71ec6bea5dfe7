"""kill -9 at any moment of training never leaves a half-written checkpoint, and --resume
always continues from the last complete one."""

from __future__ import annotations

import random
import subprocess
import time
from pathlib import Path

import torch
from conftest import HANG
from safetensors.torch import load_file


def wait_for_new_metrics(metrics: Path, process: subprocess.Popen, timeout: float = HANG) -> None:
    """Until the process has logged a step of its own (or ended)."""
    before = len(metrics.read_text().splitlines()) if metrics.exists() else 0
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and len(metrics.read_text().splitlines()) > before:
            return
        time.sleep(0.05)


def every_checkpoint_file_loads(model: Path) -> int:
    """Load every file a reader could pick up; return the saved step."""
    for weights in [model / "model.safetensors", model / "last.safetensors",
                    *(model / "checkpoints").glob("step_*.safetensors")]:
        if weights.exists():
            assert load_file(weights), weights
    state = torch.load(model / "train_state.pt", weights_only=True)
    return state["run"]["step"]


def test_sigkill_at_random_moments_never_corrupts_a_checkpoint(
    dataset: Path, tmp_path: Path, spawn,
) -> None:
    model = tmp_path / "model"
    command = ["train", "--data", str(dataset), "--output", str(model), "--preset", "tiny",
               "--max-steps", "100000", "--max-tokens", "512", "--save-every", "1",
               "--keep-last", "3", "--log-every", "1", "--precision", "fp32", "--threads", "1"]
    rng = random.Random(0)
    steps_seen = []
    for attempt in range(20):
        resume = (model / "train_state.pt").exists()
        process = spawn.tfm(command + (["--resume"] if resume else ["--overwrite"]),
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        if attempt % 4 == 3:  # during start-up: forked, a run reaches its first step a
            time.sleep(rng.uniform(0.0, 0.3))  # fraction of a second after it begins
        else:  # in training, where every step writes checkpoint files
            wait_for_new_metrics(model / "metrics.jsonl", process)
            time.sleep(rng.uniform(0.0, 0.5))
        process.kill()
        _, stderr = process.communicate(timeout=HANG)
        assert process.returncode == -9, stderr
        if (model / "train_state.pt").exists():
            steps_seen.append(every_checkpoint_file_loads(model))
    assert len(steps_seen) >= 10, "training never got going before the kills"
    assert steps_seen == sorted(steps_seen), "a resumed run went backwards"
    assert steps_seen[-1] > steps_seen[0], "resuming never made progress"

    limit = command.index("--max-steps") + 1
    command[limit] = str(steps_seen[-1] + 2)
    final = spawn.tfm(command + ["--resume"], stdout=subprocess.DEVNULL,
                      stderr=subprocess.PIPE, text=True)
    _, stderr = final.communicate(timeout=HANG)
    assert final.returncode == 0, stderr
    assert f"Resuming at step {steps_seen[-1]}" in stderr
    assert every_checkpoint_file_loads(model) == steps_seen[-1] + 2
    leftovers = list(model.rglob("*.tmp"))
    assert not leftovers, f"temporary files left behind: {leftovers}"
