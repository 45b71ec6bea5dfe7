"""Whole ``tfm`` commands with tfm's garbage-collector setting (tfm/collector.py) and without.

    python bench/gc_commands.py [--rounds 5]

Builds a small model on the bundled demo corpus (data/demo) in a temporary folder, then runs
each command as a user does (``python -m tfm ...``, a fresh process, start-up included), with
``TFM_DEFAULT_GC=1`` (Python's collector as it comes) and without (the default), the two in
turn round after round so that a drift of the machine's speed touches both. Prints each
side's median wall and CPU seconds (the finished child's own accounting) and peak memory, and
the median of the per-round ratios. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from machine import cpu_name

ROOT = Path(__file__).resolve().parent.parent
DEMO = ROOT / "data" / "demo"


def tfm(*args: str, env: dict[str, str] | None = None) -> tuple[float, float, float]:
    """Run ``python -m tfm ARGS``; its wall and CPU seconds and peak memory (MiB)."""
    with tempfile.TemporaryFile() as stderr:
        start = time.perf_counter()
        process = subprocess.Popen([sys.executable, "-m", "tfm", *args],
                                   stdout=subprocess.DEVNULL, stderr=stderr,
                                   env={**os.environ, **(env or {})})
        _, status, usage = os.wait4(process.pid, 0)  # the child's own accounting
        wall = time.perf_counter() - start
        process.returncode = os.waitstatus_to_exitcode(status)
        if process.returncode:
            stderr.seek(0)
            raise SystemExit(f"tfm {' '.join(args)} failed:\n{stderr.read().decode()}")
    return wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024


def build(work: Path) -> dict[str, list[str]]:
    """The demo pipeline, and the commands to time on its model."""
    tfm("train-tokenizer", "--train", str(DEMO / "train"), "-s", "en", "-t", "de",
        "--vocab-size", "600", "-o", str(work / "tok.json"))
    tfm("prepare", "--train", str(DEMO / "train"), "--valid", str(DEMO / "valid"), "-s", "en",
        "-t", "de", "--tokenizer", str(work / "tok.json"), "-o", str(work / "data"))
    train = ["train", "--data", str(work / "data"), "--output", str(work / "model"), "--preset",
             "tiny", "--max-steps", "20", "--max-tokens", "1024", "--precision", "fp32",
             "--overwrite"]
    tfm(*train)
    return {
        "translate (2 sentences)": ["translate", "-m", str(work / "model"), "A dog runs.",
                                    "Two men talk."],
        "eval --bleu (the demo's 50 valid pairs)": [
            "eval", "-m", str(work / "model"), "--src", str(DEMO / "valid.en"),
            "--ref", str(DEMO / "valid.de")],
        "train, 20 steps of the tiny preset": train,
        "train-tokenizer": ["train-tokenizer", "--train", str(DEMO / "train"), "-s", "en",
                            "-t", "de", "--vocab-size", "600", "-o", str(work / "tok2.json")],
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    print(f"CPU: {cpu_name()}; Python {sys.version.split()[0]}; {args.rounds} rounds")
    with tempfile.TemporaryDirectory() as folder:
        commands = build(Path(folder))
        print("| command | wall, Python's GC | wall, tfm's | ratio | CPU, Python's GC | "
              "CPU, tfm's | peak MiB, Python's GC / tfm's |")
        print("|---|---|---|---|---|---|---|")
        for name, command in commands.items():
            tfm(*command)  # warm the file cache
            plain, ours = [], []
            for _ in range(args.rounds):
                plain.append(tfm(*command, env={"TFM_DEFAULT_GC": "1"}))
                ours.append(tfm(*command))
            med = [[statistics.median(run[i] for run in side) for i in range(3)]
                   for side in (plain, ours)]
            ratio = statistics.median(o[0] / p[0] for p, o in zip(plain, ours))
            print(f"| {name} | {med[0][0]:.2f} s | {med[1][0]:.2f} s | {ratio:.2f} | "
                  f"{med[0][1]:.2f} s | {med[1][1]:.2f} s | {med[0][2]:.0f} / {med[1][2]:.0f} |")


if __name__ == "__main__":
    main()
