"""Multi-process training under torchrun (DistributedDataParallel, gloo on CPU): each process
trains on its own shard, an update equals one process accumulating the same batches, and all
processes stop together however a signal reaches them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import distributed_ranks as ranks
import forked
import numpy as np
import pytest
import torch
from conftest import HANG, kill_session, tfm
from safetensors.torch import load_file

from tfm.config import TrainConfig, model_config_from_preset
from tfm.data.batching import make_batches, shard
from tfm.data.dataset import load_split
from tfm.layout import ModelDir
from tfm.model import Transformer
from tfm.training import distributed
from tfm.training.loop import train

MAX_TOKENS = 512
SEED = 3


def torchrun(*args: str, nproc: int = 2) -> list[str]:
    """The command line of `torchrun --standalone --nproc_per_node=N tfm ARGS`, with this
    interpreter's torch (a free port is chosen by the standalone rendezvous). Its processes
    start as `python -m tfm`, each importing torch, not forked from the worker's preloader
    as other commands are: a rank forked from the preloader was once left waiting at the end
    of a finished run, under a full suite's load (docs/BENCHMARKS.md, the test suite)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={nproc}", "-m", "tfm", *args]


def torchrun_nodes(port: int, *args: str) -> list[list[str]]:
    """The command lines of two torchrun agents, one process each, that meet as two nodes
    (``--nnodes 2``) through a c10d rendezvous on loopback ``port``: a run over two machines,
    on one (which agent's process becomes rank 0 is the rendezvous's choice)."""
    return [[sys.executable, "-m", "torch.distributed.run", "--nnodes=2",
             "--nproc_per_node=1", "--monitor-interval=0.2", "--rdzv_backend=c10d",
             f"--rdzv_endpoint=127.0.0.1:{port}", "--rdzv_id=tfm-test",
             "--local_addr=127.0.0.1", "-m", "tfm", *args] for _ in range(2)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def torchrun_env(**env: str) -> dict[str, str]:
    """The environment for ``torchrun``'s command line, with ``env``."""
    return {**os.environ, **forked.script_environment(os.environ["PATH"]), **env}


def train_args(data: Path, output: Path, *extra: str) -> list[str]:
    return ["train", "--data", str(data), "--output", str(output), "--preset", "tiny",
            "--dropout", "0", "--max-tokens", str(MAX_TOKENS), "--seed", str(SEED),
            "--log-every", "1", "--valid-every", "100000", "--save-every", "100000",
            "--warmup", "4", "--lr", "1e-3", "--precision", "fp32", "--threads", "1",
            "--device", "cpu", *extra]  # gloo on CPUs, also on a machine with a GPU


def train_records(model: Path) -> list[dict]:
    lines = (model / "metrics.jsonl").read_text().splitlines()
    return [r for r in map(json.loads, lines) if r["kind"] == "train"]


def _pid_of_rank(rank: int, marker: str) -> int | None:
    """The process of our torchrun job (its environment holds ``marker``) with RANK=rank."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes().split(b"\0")
        except OSError:
            continue
        if marker.encode() in environ and f"RANK={rank}".encode() in environ:
            return int(entry.name)
    return None


@dataclass
class StoppedRun:
    model: Path
    stderr: str
    steps: int  # the steps it trained


@pytest.fixture(scope="module")
def two_process_run(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> StoppedRun:
    """A run of two processes (--update-freq 2) that would train for long, stopped by a SIGINT
    to rank 1 once it has logged steps; rank 0 never sees a signal: it must learn from rank 1.
    The two processes are two nodes, as on two machines: two torchrun agents (``--nnodes 2``,
    c10d rendezvous on loopback, gloo). (One job for every test of it: each of its four
    processes imports torch.)"""
    if not Path("/proc/self/environ").exists():
        pytest.skip("needs Linux /proc")
    root = tmp_path_factory.mktemp("ddp")
    model = root / "model"
    marker = f"TFM_TEST_JOB={root}"
    args = train_args(dataset, model, "--max-steps", "100000", "--update-freq", "2")
    agents = [subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        start_new_session=True, env=torchrun_env(TFM_TEST_JOB=str(root)))
        for command in torchrun_nodes(free_port(), *args)]
    try:
        # The bounds only catch a hang: how soon it starts is the machine's.
        deadline = time.monotonic() + HANG
        metrics = model / "metrics.jsonl"
        while time.monotonic() < deadline and all(a.poll() is None for a in agents):
            whole_lines = metrics.read_text().split("\n")[:-1] if metrics.exists() else []
            if sum('"kind": "train"' in line for line in whole_lines) >= 2:
                break
            time.sleep(0.2)
        rank1 = _pid_of_rank(1, marker)
        assert rank1 is not None, "no rank 1 process found"
        os.kill(rank1, signal.SIGINT)
        # (the process that took the signal ends 130, as a Ctrl-C'd command does)
        stderr = "".join(a.communicate(timeout=HANG)[1] for a in agents)
    finally:
        for a in agents:
            kill_session(a)
    return StoppedRun(model, stderr, len(train_records(model)))


def test_two_processes_train_on_different_shards_and_the_model_translates(
        dataset: Path, two_process_run: StoppedRun) -> None:
    model, stderr = two_process_run.model, two_process_run.stderr
    assert "2 processes (gloo)" in stderr
    assert stderr.count("Stopped: interrupted by SIGINT") == 1  # rank 0 alone reports
    # Step k of rank r is batches 2k and 2k+1 of its shard (--update-freq 2); the logged
    # target tokens are summed over the processes, so they tell which batches each trained on.
    split = load_split(dataset, "train")
    batches = make_batches(split.src_lengths, split.tgt_lengths, MAX_TOKENS, SEED, 0)

    def tokens(rank: int, step: int) -> int:  # targets + EOS
        mine = shard(batches, rank, 2)
        return sum(int(np.sum(split.tgt_lengths[i] + 1)) for i in mine[2 * step:2 * step + 2])

    steps = range(two_process_run.steps)
    logged = [r["tgt_tokens"] for r in train_records(model)]
    assert logged == [tokens(0, k) + tokens(1, k) for k in steps]
    assert logged != [2 * tokens(0, k) for k in steps]  # the ranks' batches differ
    assert logged != [2 * tokens(1, k) for k in steps]

    translated = tfm("translate", "-m", str(model), "--beam", "1", "--min-len", "2",
                     "The dog sleeps in the garden.")
    assert translated.returncode == 0, translated.stderr
    lines = translated.stdout.splitlines()
    assert len(lines) == 1 and lines[0].strip()


def test_two_processes_update_like_one_process_accumulating_all_their_batches(
        dataset: Path, two_process_run: StoppedRun, tmp_path: Path) -> None:
    model, steps = two_process_run.model, two_process_run.steps
    # Two processes with --update-freq 2 take batches 4k, 4k+2 (rank 0) and 4k+1, 4k+3
    # (rank 1) at step k; one process with --update-freq 4 takes the same four. (The
    # learning rate does not depend on --max-steps: the schedule is inverse-sqrt.)
    config = TrainConfig(max_tokens=MAX_TOKENS, update_freq=4, lr=1e-3, warmup_steps=4,
                         max_steps=steps, log_every=1, valid_every=100000, save_every=100000,
                         seed=SEED, precision="fp32", num_threads=1, device="cpu")
    train(dataset, tmp_path / "one", model_config_from_preset("tiny", dropout=0.0), config)
    # The loss of step k is that of the weights after k-1 updates: equal but for the order of
    # float sums (the weights themselves are compared less well: Adam magnifies rounding in
    # parameters of near-zero gradient, such as the key biases, to the size of an update).
    two, one = train_records(model), train_records(tmp_path / "one")
    assert len(two) == len(one) == steps >= 2
    for a, b in zip(two, one):
        assert a["tgt_tokens"] == b["tgt_tokens"]
        assert a["loss"] == pytest.approx(b["loss"], rel=1e-5)
    assert load_file(model / "last.safetensors").keys() == \
        load_file(tmp_path / "one" / "last.safetensors").keys()


def test_a_signal_to_one_process_stops_all_at_the_same_step_and_rank_0_saves(
        two_process_run: StoppedRun) -> None:
    model, stderr = two_process_run.model, two_process_run.stderr
    assert "Stopped: interrupted by SIGINT" in stderr, stderr
    assert "--resume" in stderr
    state = torch.load(ModelDir(model).train_state, weights_only=True)
    step = state["run"]["step"]
    assert step == train_records(model)[-1]["step"] == two_process_run.steps >= 2
    assert state["run"]["world_size"] == 2
    assert (model / "learning_curve.png").exists()


def test_the_gradient_of_two_processes_is_that_of_one_process_over_all_their_tokens(
        tmp_path: Path) -> None:
    port = free_port()
    torch.multiprocessing.spawn(ranks.rank_gradients, args=(port, str(tmp_path)), nprocs=2)
    torch.manual_seed(0)
    one = ranks.gradients(Transformer(ranks.GRAD_MODEL), distributed.Distributed(),
                          ranks.GRAD_BATCHES[0] + ranks.GRAD_BATCHES[1])
    for rank in (0, 1):
        two = torch.load(tmp_path / f"rank{rank}.pt", weights_only=True)
        for name in one:
            torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-7, msg=name)


# --- the pieces -------------------------------------------------------------------------------

def test_torchrun_is_recognised_by_its_environment_variables() -> None:
    assert distributed.launched_by_torchrun({}) is None
    assert distributed.launched_by_torchrun({"RANK": "0"}) is None
    env = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4"}
    assert distributed.launched_by_torchrun(env) == (3, 1, 4)


def test_without_torchrun_the_process_group_is_a_single_process(
        monkeypatch: pytest.MonkeyPatch) -> None:
    for name in distributed.ENV_VARS:
        monkeypatch.delenv(name, raising=False)
    with distributed.process_group(torch.device("cpu")) as (d, device):
        assert (d.rank, d.world_size, d.enabled, d.is_main) == (0, 1, False, True)
        assert device == torch.device("cpu")
        assert distributed.all_reduce([2, 3], d) == [2.0, 3.0]
        assert distributed.broadcast(("x", 1), d) == ("x", 1)


def test_resuming_with_other_process_counts_skips_no_batch() -> None:
    assert distributed.resume_position(5, 2, 2) == 5
    assert distributed.resume_position(5, 2, 1) == 10  # 10 update groups were consumed
    assert distributed.resume_position(5, 2, 4) == 2  # 8 of 10 consumed again: none skipped
    assert distributed.resume_position(0, 4, 3) == 0


def test_each_process_has_its_own_dropout_seed() -> None:
    assert distributed.dropout_seed(7, 0, 0) == 7
    assert distributed.dropout_seed(7, 1, 0) == 8
    resumed = {distributed.dropout_seed(7, r, 100) for r in range(4)}
    assert len(resumed) == 4
    assert distributed.dropout_seed(7, 1, 100) == distributed.dropout_seed(7, 1, 100)
