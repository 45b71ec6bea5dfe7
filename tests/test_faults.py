"""Faults that real training machines see, and what tfm does about each (docs/FAULTS.md): two
commands into one directory, a full disk at every write, a run killed before its first
checkpoint, a checkpoint or model file damaged after it was written.

The processes these tests start end with the test (a fixture kills what is left), and where a
test needs a process stopped at a given step it stops itself there (the hook below), so that
nothing depends on how fast the machine is.
"""

from __future__ import annotations

import errno
import itertools
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import forked
import pytest
import torch
from conftest import tfm as run_tfm

from tfm.atomic import AppendLog
from tfm.checkpoint import load_model_dir
from tfm.config import ModelConfig, TrainConfig
from tfm.errors import ModelError, UsageError, WriteError
from tfm.integrity import Manifest
from tfm.layout import ModelDir
from tfm.lock import DirectoryInUse, directory_lock, lock_file
from tfm.training.loop import resume, train
from tfm.training.reporting import TrainReporter
from tfm.training.state import Overrides, newest_intact_state

ROOT = Path(__file__).resolve().parent.parent
TINY = ModelConfig(d_model=32, n_heads=2, encoder_layers=1, decoder_layers=1, d_ff=64,
                   dropout=0.1)
HANG = 300  # seconds: only a hang waits this long


def config(**overrides) -> TrainConfig:
    values = dict(max_tokens=512, lr=1e-3, warmup_steps=5, valid_every=10**6, save_every=10**6,
                  log_every=1, valid_bleu=False, precision="fp32", seed=3, keep_last=2,
                  device="cpu")
    values.update(overrides)
    return TrainConfig(**values)


class Said(TrainReporter):
    """A reporter that keeps the lines the run says."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)


def train_command(dataset: Path, output: Path, *options: str) -> list[str]:
    return ["train", "--data", str(dataset), "--output", str(output), "--preset", "tiny",
            "--d-model", "32", "--n-heads", "2", "--d-ff", "64", "--max-tokens", "512",
            "--log-every", "1", "--valid-every", "100000", "--precision", "fp32",
            "--threads", "1", *options]


# HOOK, run in a `tfm` command's process before the command (forked.PRELUDE), makes it stop
# itself at a given step of training: TFM_TEST_KILL_AT=N: SIGKILL right after step N (and its
# save, if it had one); TFM_TEST_PAUSE_AT=N: after step N, create $TFM_TEST_FLAG.paused and wait
# for $TFM_TEST_FLAG.go.
HOOK = """
import os, signal, time
from pathlib import Path
from tfm.training import loop

kill_at = int(os.environ.get("TFM_TEST_KILL_AT", 0))
pause_at = int(os.environ.get("TFM_TEST_PAUSE_AT", 0))
flag = os.environ.get("TFM_TEST_FLAG", "")
step = loop._Trainer.step

def stopping_step(self, *args):
    stopped = step(self, *args)
    if self.run.step == kill_at:
        os.kill(os.getpid(), signal.SIGKILL)
    if self.run.step == pause_at:
        Path(flag + ".paused").touch()
        deadline = time.monotonic() + 300
        while not Path(flag + ".go").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
    return stopped

loop._Trainer.step = stopping_step
"""


@pytest.fixture
def processes() -> Iterator[Callable[..., subprocess.Popen]]:
    """Start processes, each in a process group of its own, all killed when the test ends: a
    command line, or ``hooked(tfm ARGS)``."""
    started: list[subprocess.Popen] = []

    def start(args: list[str] | Hooked, **env: str) -> subprocess.Popen:
        options = dict(stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                       env={**os.environ, **env})
        if isinstance(args, Hooked):
            options["env"][forked.PRELUDE] = HOOK
            process = forked.popen(list(args), **options)
        else:
            process = subprocess.Popen(args, start_new_session=True, **options)
        started.append(process)
        return process

    yield start
    for process in started:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
        process.communicate(timeout=HANG)


def tfm(*args: str, timeout: float = HANG, **env: str) -> subprocess.CompletedProcess[str]:
    return run_tfm(*args, timeout=timeout, env=env)


class Hooked(tuple):
    """The arguments of a `tfm` command to run with HOOK."""


def hooked(*args: str) -> Hooked:
    return Hooked(args)


def wait_for(path: Path, process: subprocess.Popen) -> None:
    deadline = time.monotonic() + HANG
    while not path.exists():
        assert process.poll() is None, process.communicate()[1][-3000:]
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def error_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error")]


def no_temporaries(directory: Path) -> None:
    left = [p for p in directory.parent.rglob("*") if p.name.endswith((".tmp", ".old"))
            or (p.name.startswith(f".{directory.name}.") and p.is_dir())]
    assert not left, f"temporaries left behind: {left}"


def intact_run(model: Path) -> int:
    """The run in ``model`` loads as translate loads it, every recorded file matches its
    checksum, its metrics are whole lines, and every checkpoint its state counts on exists;
    returns the step of its state."""
    load_model_dir(model)
    manifest = Manifest.read(model)
    for name in manifest.files:
        if (model / name).exists():
            assert manifest.damage(model / name) is None, name
    state, note = newest_intact_state(model)
    assert state is not None and note is None
    for step in state["run"]["saved_steps"]:
        assert ModelDir(model).checkpoint(step).exists(), step
    for line in ModelDir(model).metrics.read_text().splitlines():
        json.loads(line)
    return state["run"]["step"]


# --------------------------------------------------------------------- two commands, one directory


def test_second_train_into_same_directory_is_refused_and_first_is_unharmed(
        dataset: Path, tmp_path: Path, processes) -> None:
    model = tmp_path / "model"
    flag = str(tmp_path / "first")
    first = processes(hooked(*train_command(dataset, model, "--max-steps", "4",
                                            "--save-every", "2")),
                      TFM_TEST_PAUSE_AT="3", TFM_TEST_FLAG=flag)
    wait_for(Path(flag + ".paused"), first)  # the first run is at step 3, holding the lock

    second = tfm(*train_command(dataset, model, "--max-steps", "4", "--overwrite"))
    assert second.returncode == 2, second.stderr
    [line] = error_lines(second.stderr)
    assert f"{model} is in use by tfm train (process {first.pid}, since " in line

    Path(flag + ".go").touch()
    _, stderr = first.communicate(timeout=HANG)
    assert first.returncode == 0, stderr
    assert intact_run(model) == 4
    assert not lock_file(model).exists()  # released with its process


@pytest.mark.parametrize("command", ["prepare", "export", "average", "import", "train"])
def test_every_command_that_writes_a_directory_is_refused_while_another_holds_it(
        command: str, dataset: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    args = {"prepare": ["prepare", "--train", str(tmp_path / "corpus"), "-s", "en", "-t", "de",
                        "-o", str(out)],
            "export": ["export", str(tmp_path / "model"), "--to", "marian", "-o", str(out)],
            "average": ["average", "-m", str(tmp_path / "model"), "-o", str(out)],
            "import": ["import", str(tmp_path / "marian"), "-o", str(out)],
            "train": train_command(dataset, out, "--max-steps", "2")}[command]
    with directory_lock(out, "tfm test"):
        refused = tfm(*args)
    assert refused.returncode == 2, refused.stderr
    [line] = error_lines(refused.stderr)
    assert f"{out} is in use by tfm test (process {os.getpid()}, since " in line
    assert not out.exists()


def test_a_lock_is_taken_once_and_released_with_its_holder(tmp_path: Path) -> None:
    out = tmp_path / "not-yet" / "out"  # locking needs no directory yet
    with directory_lock(out, "tfm one") as path:
        record = json.loads(path.read_text())
        assert (record["command"], record["pid"]) == ("tfm one", os.getpid())
        with pytest.raises(DirectoryInUse, match=r"in use by tfm one \(process \d+, since "), \
                directory_lock(tmp_path / "not-yet" / "." / "out", "tfm two"):
            pass
    assert not path.exists()
    with directory_lock(out, "tfm two"):  # free again
        pass


def test_a_file_system_without_locking_still_works_with_a_warning(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import fcntl

    def no_locks(fd: int, operation: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(fcntl, "flock", no_locks)
    warnings: list[str] = []
    with directory_lock(tmp_path / "out", "tfm train", warnings.append):
        (tmp_path / "out").mkdir()
    [warning] = warnings
    assert "cannot be locked" in warning and "No locks available" in warning


def test_two_recipes_into_one_folder_the_second_is_refused(tmp_path: Path, processes) -> None:
    out = tmp_path / "runs"
    holder = processes(["bash", "-c", f"source {ROOT}/recipes/lib.sh; lock_out {out}; "
                        f"touch {tmp_path}/held; sleep {HANG}"])
    wait_for(tmp_path / "held", holder)
    second = subprocess.run(["bash", str(ROOT / "recipes" / "multi30k.sh"),
                             str(tmp_path / "data"), "en", "de", str(out)],
                            capture_output=True, text=True, timeout=HANG)
    assert second.returncode == 2, second.stderr
    assert f"{out} is in use by bash (process {holder.pid}, since" in second.stderr
    assert not (out / "tokenizer.json").exists()


# ----------------------------------------------------------------- killed, before or after saving


def test_kill_9_leaves_no_stale_lock_and_resume_goes_on_at_once(
        dataset: Path, tmp_path: Path, processes) -> None:
    model = tmp_path / "model"
    killed = processes(hooked(*train_command(dataset, model, "--max-steps", "6",
                                             "--save-every", "2")), TFM_TEST_KILL_AT="4")
    killed.communicate(timeout=HANG)
    assert killed.returncode == -signal.SIGKILL
    resumed = tfm(*train_command(dataset, model, "--max-steps", "6", "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert "Resuming at step 4" in resumed.stderr
    assert intact_run(model) == 6


def test_sigkill_before_the_first_checkpoint_then_the_same_command_trains_to_the_end(
        dataset: Path, tmp_path: Path, processes) -> None:
    model = tmp_path / "model"
    # One command line for the first start and every restart, as a job scheduler gives it.
    command = train_command(dataset, model, "--max-steps", "8", "--save-every", "5",
                            "--resume")
    killed = processes(hooked(*command), TFM_TEST_KILL_AT="3")
    _, stderr = killed.communicate(timeout=HANG)
    assert killed.returncode == -signal.SIGKILL
    assert "holds no training run yet: starting one from step 0" in stderr
    assert not ModelDir(model).train_state.exists()  # killed before its first save

    again = tfm(*command)
    assert again.returncode == 0, again.stderr
    assert "has no checkpoint yet (the run stopped before its first save): training it from " \
           "step 0 with its recorded settings (train_config.json)" in again.stderr
    assert "Done" in again.stderr
    assert intact_run(model) == 8
    lines = [json.loads(line) for line in ModelDir(model).metrics.read_text().splitlines()]
    steps = [line["step"] for line in lines if line["kind"] == "train"]
    assert steps == list(range(1, 9))  # from step 0 again, the killed run's lines gone


def stop_before_first_save(dataset: Path, model: Path, monkeypatch: pytest.MonkeyPatch,
                           **options) -> None:
    """A run that wrote what it writes at its start, then died before its first step."""
    def die(self) -> str:
        raise KeyboardInterrupt

    with monkeypatch.context() as patch:
        patch.setattr("tfm.training.loop._Trainer.train", die)
        with pytest.raises(KeyboardInterrupt):
            train(dataset, model, TINY, config(max_steps=4, **options))
    assert ModelDir(model).train_config.exists()
    assert not ModelDir(model).train_state.exists()


def test_resume_before_the_first_checkpoint_still_refuses_other_settings(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "m"
    stop_before_first_save(dataset, model, monkeypatch)
    with pytest.raises(UsageError, match="--dropout 0.3 contradicts the run being resumed"):
        resume(dataset, model,
               Overrides.of(config(max_steps=4), "max_steps", model={"dropout": 0.3}))
    with pytest.raises(UsageError, match="--lr 0.005 contradicts the run being resumed"):
        resume(dataset, model, Overrides.of(config(max_steps=4, lr=5e-3), "max_steps", "lr"))
    said = Said()
    result = resume(dataset, model, Overrides.of(config(max_steps=4), "max_steps"), reporter=said)
    assert result.step == 4
    assert any("training it from step 0 with its recorded settings" in s for s in said.lines)


def test_resume_into_a_model_that_is_no_training_run_is_refused(
        dataset: Path, tmp_path: Path) -> None:
    model = tmp_path / "m"
    train(dataset, model, TINY, config(max_steps=2))
    for path in ModelDir(model).run_files():
        if path not in (ModelDir(model).config, ModelDir(model).tokenizer,
                        ModelDir(model).weights, ModelDir(model).manifest):
            path.unlink(missing_ok=True)
    with pytest.raises(UsageError, match="holds a model but no training run"):
        resume(dataset, model, Overrides.of(config(max_steps=4), "max_steps"), model_config=TINY)


# ------------------------------------------------------------------------------------ a full disk

# Every file a training run writes while it trains (its start writes through the same
# functions: test_checkpoint.py's full-disk tests).
WRITE_SITES = ["last.safetensors", "step_*.safetensors", "train_state.pt", "model.safetensors",
               "config.json", "manifest.json", "metrics.jsonl"]


@pytest.fixture(scope="module")
def run_at_step_4(dataset: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A run saved at steps 2 and 4, validated at both (read-only: tests copy it)."""
    model = tmp_path_factory.mktemp("run") / "model"
    with pytest.MonkeyPatch.context() as patch:
        scripted_validation(patch)
        train(dataset, model, TINY, config(max_steps=4, save_every=2, valid_every=2))
    return model


# Validation losses, falling across every run of the module (runs are copied and resumed).
FALLING = itertools.count(10**6, -1)


def scripted_validation(patch: pytest.MonkeyPatch) -> None:
    """Validation that finds a better model every time (a loss that falls), at no cost."""

    def validate(*args, **kwargs) -> dict:
        loss = float(next(FALLING))
        return {"loss": loss, "nll": loss, "ppl": 1.0}

    patch.setattr("tfm.training.loop.validate", validate)


class HalfFull:
    """A file that takes half of what it is given to write, then fails for want of room."""

    def __init__(self, file) -> None:
        self.file = file

    def write(self, data) -> int:
        self.file.write(bytes(data)[:len(data) // 2])
        self.file.flush()
        raise OSError(errno.ENOSPC, "No space left on device")

    def __getattr__(self, name: str):
        return getattr(self.file, name)

    def __enter__(self) -> HalfFull:
        return self

    def __exit__(self, *exc) -> None:
        self.file.close()


def full_disk_at(site: str, patch: pytest.MonkeyPatch, at: str = "write") -> None:
    """Writes of ``site`` (a file name pattern) fail for want of room: ``at`` "write", each
    after writing part of what it was given, whether written in place (os.write: metrics.jsonl)
    or into the temporary of an atomic write (tfm.atomic.atomic_write_bytes, which renames it
    over the file once whole); ``at`` "rename", the rename of a whole temporary into place."""
    from fnmatch import fnmatch

    real_replace, real_write, real_fdopen = os.replace, os.write, os.fdopen

    def replace(src, dst, *args, **kwargs):
        if fnmatch(Path(dst).name, site):
            raise OSError(errno.ENOSPC, "No space left on device", str(src))
        return real_replace(src, dst, *args, **kwargs)

    def write(fd: int, data: bytes) -> int:
        if fnmatch(os.readlink(f"/proc/self/fd/{fd}"), f"*/{site}"):
            real_write(fd, data[:len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(fd, data)

    def fdopen(fd: int, *args, **kwargs):
        file = real_fdopen(fd, *args, **kwargs)
        name = Path(os.readlink(f"/proc/self/fd/{fd}")).name
        if fnmatch(name, site) or fnmatch(name, f".{site}.*.tmp"):
            return HalfFull(file)
        return file

    if at == "rename":
        patch.setattr(os, "replace", replace)
    else:
        patch.setattr(os, "write", write)
        patch.setattr(os, "fdopen", fdopen)


def site_files(model: Path, site: str) -> dict[str, bytes]:
    """The content of each file of ``model`` that ``site`` names, by its path in ``model``."""
    from fnmatch import fnmatch

    return {str(p.relative_to(model)): p.read_bytes() for p in model.rglob("*")
            if p.is_file() and fnmatch(p.name, site)}


@pytest.mark.parametrize("site, at", [(site, "write") for site in WRITE_SITES] + [
    (site, "rename") for site in WRITE_SITES if site != "metrics.jsonl"])  # appended in place
def test_a_full_disk_at_every_write_of_a_run_stops_it_intact_and_resume_goes_on(
        site: str, at: str, run_at_step_4: Path, dataset: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model"
    shutil.copytree(run_at_step_4, model)
    scripted_validation(monkeypatch)
    more = config(max_steps=8, save_every=2, valid_every=2)
    before = site_files(model, site)
    with monkeypatch.context() as patch:
        full_disk_at(site, patch, at)
        with pytest.raises(WriteError) as stopped:
            resume(dataset, model, Overrides.of(more, "max_steps"))
    # the site's first write of the resumed run failed: its files are those it had, whole,
    # with no part of the new content in any of them
    assert site_files(model, site) == before
    message = str(stopped.value)
    assert "\n" not in message
    name = site.replace("*", "")
    assert f"{name}: no space left on the device" in message or (
        name.startswith("step_") and "/step_" in message), message
    assert "Training stopped at step" in message and "continue with --resume" in message
    no_temporaries(model)
    assert intact_run(model) >= 4  # the previous checkpoint (or the new, where it was whole)

    result = resume(dataset, model, Overrides.of(more, "max_steps"))
    assert result.step == 8
    assert intact_run(model) == 8


def test_old_checkpoints_go_only_once_the_new_one_is_complete(
        run_at_step_4: Path, dataset: Path, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    model = tmp_path / "model"
    shutil.copytree(run_at_step_4, model)
    with monkeypatch.context() as patch:
        full_disk_at("train_state.pt", patch)
        with pytest.raises(WriteError):
            resume(dataset, model, Overrides.of(config(max_steps=8, save_every=2), "max_steps"))
    # --keep-last 2: step 6 would have replaced step 2, but its state was never written.
    assert set(ModelDir(model).numbered_checkpoints()) >= {2, 4}


def test_a_metrics_line_that_does_not_fit_is_taken_back(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    log = AppendLog(tmp_path / "metrics.jsonl")
    log.write_line('{"step": 1}')
    with monkeypatch.context() as patch:
        full_disk_at("metrics.jsonl", patch)
        with pytest.raises(WriteError, match=r"metrics\.jsonl: no space left on the device; "
                                             "the lines before are intact"):
            log.write_line('{"step": 2, "loss": 1.0}')
    log.write_line('{"step": 3}')
    log.close()
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 1}\n{"step": 3}\n'


def test_a_full_disk_while_preparing_keeps_the_previous_dataset(
        dataset: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from tfm.data.corpus import CorpusSpec
    from tfm.data.prepare import prepare

    demo = ROOT / "data" / "demo" / "train"
    out = tmp_path / "data"
    prepare(CorpusSpec((str(demo),), "en", "de"), dataset / "tokenizer.json", out)
    before = {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()}

    def no_room(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", "data-00000-of-00001.arrow")

    monkeypatch.setattr("datasets.DatasetDict.save_to_disk", no_room)
    with pytest.raises(WriteError, match=r"data: no space left on the device; the previous "
                                         r"dataset is intact \(.*free\)"):
        prepare(CorpusSpec((str(demo),), "en", "de"), dataset / "tokenizer.json", out,
                force=True)
    assert {p.name: p.read_bytes() for p in out.rglob("*") if p.is_file()} == before
    no_temporaries(out)


def test_a_full_disk_while_exporting_leaves_no_partial_export(
        tmp_path: Path, tokenizer, monkeypatch: pytest.MonkeyPatch) -> None:
    from conftest import random_model_dir

    from tfm.interop.marian import export_marian

    model = random_model_dir(tmp_path / "model", tokenizer)

    def no_room(path: Path, data) -> None:
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr("tfm.interop.marian._write_json", no_room)
    with pytest.raises(WriteError, match="no space left on the device; nothing was written"):
        export_marian(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()
    no_temporaries(tmp_path / "out")


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A 16 MB tmpfs: a real file system that fills up (root only, as in CI)."""
    mount = tmp_path / "disk"
    mount.mkdir()
    if os.geteuid() != 0:
        pytest.skip("mounting a small tmpfs needs root (CI runs as root)")
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=16m", "tmpfs", str(mount)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


def fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` but for ``leave`` bytes; returns the filler to delete."""
    filler = disk / "filler"
    free = shutil.disk_usage(disk).free
    with filler.open("wb") as f:
        f.truncate(0)
        os.posix_fallocate(f.fileno(), 0, max(free - leave, 0))
    return filler


def test_a_really_full_disk_stops_training_with_exit_5_and_resume_goes_on(
        dataset: Path, small_disk: Path) -> None:
    model = small_disk / "model"
    start = tfm(*train_command(dataset, model, "--max-steps", "2", "--save-every", "2"))
    assert start.returncode == 0, start.stderr
    filler = fill(small_disk, leave=64 * 1024)  # less than one checkpoint needs

    full = tfm(*train_command(dataset, model, "--max-steps", "6", "--save-every", "2",
                              "--resume"))
    assert full.returncode == 5, full.stderr
    [line] = error_lines(full.stderr)
    assert "no space left on the device" in line and "it needed" in line, line
    assert "Training stopped at step" in line
    no_temporaries(model)
    assert intact_run(model) == 2

    filler.unlink()  # room is made
    resumed = tfm(*train_command(dataset, model, "--max-steps", "6", "--save-every", "2",
                                 "--resume"))
    assert resumed.returncode == 0, resumed.stderr
    assert intact_run(model) == 6


def test_a_really_full_disk_while_preparing_and_exporting(
        dataset: Path, small_disk: Path, tmp_path: Path, tokenizer) -> None:
    from conftest import random_model_dir

    filler = fill(small_disk, leave=16 * 1024)
    prepared = tfm("prepare", "--train", str(ROOT / "data" / "demo" / "train"), "-s", "en",
                   "-t", "de", "--tokenizer", str(dataset / "tokenizer.json"), "-o",
                   str(small_disk / "data"))
    assert prepared.returncode == 5, prepared.stderr
    [line] = error_lines(prepared.stderr)
    assert "no space left on the device" in line
    model = random_model_dir(tmp_path / "model", tokenizer)
    exported = tfm("export", str(model), "--to", "marian", "-o", str(small_disk / "hf"))
    assert exported.returncode == 5, exported.stderr
    [line] = error_lines(exported.stderr)
    assert "no space left on the device" in line
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # no temporaries
    filler.unlink()


# ------------------------------------------------------------------------ damaged after writing


def damage(path: Path, how: str) -> None:
    data = bytearray(path.read_bytes())
    if how == "truncated":
        path.write_bytes(bytes(data[: len(data) // 2]))
    else:  # one bit flipped, in the middle (tensor data: the file still parses)
        data[len(data) // 2] ^= 0x10
        path.write_bytes(bytes(data))


@pytest.mark.parametrize("how", ["truncated", "bit-flipped"])
def test_a_damaged_newest_checkpoint_resumes_from_the_one_before(
        how: str, run_at_step_4: Path, dataset: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(run_at_step_4, model)
    damage(ModelDir(model).train_state, how)
    said = Said()
    result = resume(dataset, model, Overrides.of(config(max_steps=6, save_every=2), "max_steps"),
                    reporter=said)
    [line] = [s for s in said.lines if "damaged" in s]
    assert line.startswith("train_state.pt is damaged (")
    assert line.endswith("; resuming from the checkpoint before it, step 2 "
                         "(train_state.prev.pt)")
    if how == "truncated":
        assert "truncated: " in line
    assert result.step == 6
    assert intact_run(model) == 6


def test_with_every_checkpoint_damaged_resume_refuses_naming_the_damage(
        run_at_step_4: Path, dataset: Path, tmp_path: Path) -> None:
    model = tmp_path / "model"
    shutil.copytree(run_at_step_4, model)
    damage(ModelDir(model).train_state, "bit-flipped")
    damage(ModelDir(model).previous_train_state, "truncated")
    with pytest.raises(ModelError, match=r"train_state\.pt is damaged \(.*\); "
                                         r"train_state\.prev\.pt is damaged \(truncated: .*\); "
                                         "no intact checkpoint to resume from"):
        resume(dataset, model, Overrides.of(config(max_steps=6), "max_steps"))


@pytest.fixture
def damaged_model(tmp_path: Path, tokenizer) -> Path:
    from conftest import random_model_dir

    model = random_model_dir(tmp_path / "model", tokenizer)
    damage(ModelDir(model).weights, "bit-flipped")
    return model


@pytest.mark.parametrize("command", ["translate", "serve", "export"])
def test_a_damaged_model_file_is_refused_by_every_command_that_loads_it(
        command: str, damaged_model: Path, tmp_path: Path) -> None:
    args = {"translate": ["translate", "-m", str(damaged_model), "A dog runs."],
            "serve": ["serve", "--model", str(damaged_model), "--port", "0"],
            "export": ["export", str(damaged_model), "--to", "marian", "-o",
                       str(tmp_path / "hf")]}[command]
    refused = tfm(*args)
    assert refused.returncode == 4, refused.stderr
    [line] = error_lines(refused.stderr)
    assert "model.safetensors: damaged since it was written (its content differs from what " \
           "was written (sha256 mismatch)); the model is refused" in line
    assert not (tmp_path / "hf").exists()


def test_a_model_directory_without_a_manifest_loads_as_before(damaged_model: Path) -> None:
    ModelDir(damaged_model).manifest.unlink()  # as made before manifests: nothing to check
    model, _, _ = load_model_dir(damaged_model)
    assert not model.training


def test_a_damaged_checkpoint_is_refused_by_average(run_at_step_4: Path,
                                                    tmp_path: Path) -> None:
    from tfm.training.average import average_checkpoints

    model = tmp_path / "model"
    shutil.copytree(run_at_step_4, model)
    damage(ModelDir(model).checkpoint(2), "bit-flipped")
    with pytest.raises(ModelError, match=r"step_00000002\.safetensors: damaged since it was "
                                         "written"):
        average_checkpoints(model, 2, tmp_path / "avg")
    assert average_checkpoints(model, 1, tmp_path / "avg").steps == [4]
    assert torch.load(ModelDir(model).train_state, weights_only=True)["run"]["step"] == 4


def test_every_test_docs_faults_names_exists() -> None:
    """docs/FAULTS.md's table points to the tests that show each fault: they exist."""
    import re

    text = (ROOT / "docs" / "FAULTS.md").read_text(encoding="utf-8")
    named, current = [], None
    for match in re.finditer(r"(?:tests/)?(test_\w+\.py)(?:::(\w+))?|::(\w+)", text):
        current = match.group(1) or current
        name = match.group(2) or match.group(3)
        if name:
            named.append((current, name))
    assert len(named) > 30
    missing = [f"{file}::{name}" for file, name in named
               if f"def {name}(" not in (ROOT / "tests" / file).read_text(encoding="utf-8")]
    assert not missing, missing
