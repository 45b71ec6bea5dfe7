"""What the benchmark scripts share: progress lines, and commands run to the end and measured.

A measured command runs in its own process, so that its wall time and peak resident memory are
its own: the memory is the kernel's ``ru_maxrss`` of that process (and of the processes it
waited for), read by ``os.wait4`` when it is reaped. While it runs it is watched for being
stopped (SIGSTOP from outside), which would make its timings wrong. Its output goes to files,
never to pipes, so that a child that writes much can never block on a full pipe.

How bench/'s scripts import their helpers (this module, machine, hf_finetune, peer_logs, ...),
one way: a script runs as ``python bench/NAME.py``, which puts bench/ first on ``sys.path``,
so it imports them by module name (``from harness import log``); none adds bench/ to
``sys.path`` itself (a script that wants the checkout's tfm before an installed one adds the
repository's root, nothing else). The tests load them the same way (tests/test_bench_peers.py).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The Multi30k splits (file prefixes in --data) the benchmarks read.
MULTI30K_SPLITS = {"train": "train", "valid": "val", "test": "test_2016_flickr"}


def add_corpus_options(parser: argparse.ArgumentParser, *splits: str) -> None:
    """--data, --src, --tgt: the corpus and the direction every benchmark measures (Multi30k
    en->de by default), and a --SPLIT-split option for each of ``splits``."""
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"),
                        help="the corpus folder (default: %(default)s)")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    for split in splits:
        parser.add_argument(f"--{split}-split", default=MULTI30K_SPLITS[split])


def log(message: str) -> None:
    """A timestamped progress line on stderr."""
    print(f"[{time.strftime('%H:%M:%S')}] {message}", file=sys.stderr, flush=True)


def process_stopped(pid: int) -> bool:
    """Whether the process is stopped (SIGSTOP from outside: its timings would be wrong)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "Tt"
    except (OSError, IndexError):
        return False


class CommandFailed(RuntimeError):
    """A measured command exited with an error; the message ends with its last output lines."""


@dataclass
class Finished:
    """A command that ran to the end without error."""

    seconds: float  # wall time, from launch to exit
    peak_rss_mb: float  # the kernel's high-water mark of its resident memory
    stopped_s: float  # seconds it was seen stopped (SIGSTOP from outside)
    stdout: str  # "" when stdout went to a file of the caller's
    stderr: str

    @property
    def output(self) -> str:
        """Everything it wrote that was not redirected: stderr, then stdout."""
        return self.stderr + self.stdout


def run_measured(command: list[str], *, log_path: Path | None = None, stdin: Path | None = None,
                 stdout: Path | None = None, env: dict | None = None, cwd: Path | None = None,
                 poll_s: float = 0.2) -> Finished:
    """Run ``command`` to the end and measure it; raise CommandFailed if it fails.

    ``stdin``: a file to read from (default: nothing). ``stdout``: a file for its standard
    output (default: captured into ``Finished.stdout``). ``log_path``: a file that keeps its
    stderr, followed by its captured stdout (default: none kept).
    """
    with tempfile.TemporaryDirectory(prefix="tfm-bench.") as tmp:
        err_path = log_path or Path(tmp) / "stderr"
        out_path = stdout or Path(tmp) / "stdout"
        stopped = 0.0
        start = time.perf_counter()
        with err_path.open("wb") as err, out_path.open("wb") as out, \
                (stdin.open("rb") if stdin else open(os.devnull, "rb")) as fin:
            proc = subprocess.Popen(command, stdin=fin, stdout=out, stderr=err, env=env, cwd=cwd)
            last = time.monotonic()
            while True:
                # wait4 instead of proc.wait: it also returns the child's resource usage.
                pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
                if pid:
                    proc.returncode = os.waitstatus_to_exitcode(status)
                    break
                time.sleep(poll_s)
                now = time.monotonic()
                if process_stopped(proc.pid):
                    stopped += now - last
                last = now
        seconds = time.perf_counter() - start
        stderr = err_path.read_text(encoding="utf-8", errors="replace")
        captured = "" if stdout else out_path.read_text(encoding="utf-8", errors="replace")
    if log_path and captured:
        with log_path.open("a", encoding="utf-8") as f:
            f.write(captured)
    if proc.returncode:
        tail = "\n".join((stderr + captured).splitlines()[-15:])
        raise CommandFailed(f"{' '.join(command[:3])} ... failed ({proc.returncode}):\n{tail}")
    return Finished(seconds, usage.ru_maxrss / 1024, stopped, captured, stderr)  # Linux: KiB
