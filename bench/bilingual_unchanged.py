"""A bilingual run as tfm made it at a commit and as it makes it now: the same tokenizer, the
same prepared arrays, the same weights after training, bit for bit, and the time each took.

    python bench/bilingual_unchanged.py [--before c7d2b2a] [--corpus data/demo]
        [--src en] [--tgt de] [--steps 30] [--preset tiny]
    python bench/bilingual_unchanged.py --corpus ../shared/data/multi30k --preset small \
        --valid val --vocab-size 8000 --steps 200    # the quick recipe's model and batches

c7d2b2a is the last commit before translation directions (#56) came into tfm: a bilingual run
is since the same code with one direction and no tags, and this shows that its results did
not move. Each side runs as a user runs it (train-tokenizer, prepare, train), the commit's
from a `git worktree` of it. Exits 1 at the first difference.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def run_side(code: Path, corpus: Path, src: str, tgt: str, out: Path, steps: int,
             preset: str, vocab_size: int, valid: str) -> float:
    """The whole job with the tfm in ``code``; returns the seconds training took."""
    env = {**os.environ, "PYTHONPATH": str(code)}
    tfm = [sys.executable, "-m", "tfm"]

    def run(*args: str) -> None:
        subprocess.run([*tfm, *args], cwd=out, env=env, check=True, capture_output=True)

    run("train-tokenizer", "--train", str(corpus / "train"), "-s", src, "-t", tgt,
        "--vocab-size", str(vocab_size), "-o", str(out / "tok.json"))
    run("prepare", "--train", str(corpus / "train"), "--valid", str(corpus / valid), "-s",
        src, "-t", tgt, "--tokenizer", str(out / "tok.json"), "-o", str(out / "data"))
    start = time.monotonic()
    run("train", "--data", str(out / "data"), "--output", str(out / "model"), "--preset",
        preset, "--max-steps", str(steps), "--valid-every", str(max(steps // 2, 1)),
        "--max-tokens", "1024", "--warmup", "10", "--precision", "fp32", "--log-every", "10")
    return time.monotonic() - start


def _median_rate(metrics: Path) -> float:
    """The median tokens/s of a run's logged training windows (the first, which holds the
    start, left out)."""
    import json
    import statistics

    rates = [r["tokens_per_s"] for r in map(json.loads, metrics.open())
             if r.get("kind") == "train" and r["step"] > 1]
    return statistics.median(rates) if rates else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="c7d2b2a")
    parser.add_argument("--corpus", type=Path, default=ROOT / "data" / "demo")
    parser.add_argument("--src", default="en")
    parser.add_argument("--tgt", default="de")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--preset", default="tiny")
    parser.add_argument("--vocab-size", type=int, default=1000)
    parser.add_argument("--valid", default="valid", help="the validation split's prefix name "
                        "(Multi30k's is val)")
    args = parser.parse_args()

    import torch
    from safetensors.torch import load_file

    from tfm.data.dataset import load_split

    work = Path(tempfile.mkdtemp(prefix="bilingual-unchanged."))
    before = work / "before-code"
    subprocess.run(["git", "worktree", "add", "--detach", str(before), args.before], cwd=ROOT,
                   check=True, capture_output=True)
    try:
        seconds = {}
        for name, code in (("before", before), ("now", ROOT)):
            (work / name).mkdir()
            seconds[name] = run_side(code, args.corpus.resolve(), args.src, args.tgt,
                                     work / name, args.steps, args.preset, args.vocab_size,
                                     args.valid)
        same_tok = (work / "before" / "tok.json").read_bytes() == \
            (work / "now" / "tok.json").read_bytes()
        print(f"tokenizer identical: {same_tok}")
        same_data = True
        for split in ("train", "valid"):
            a, b = (load_split(work / side / "data", split) for side in ("before", "now"))
            same_data &= all(bool((getattr(a, k) == getattr(b, k)).all()) for k in (
                "src_values", "src_offsets", "tgt_values", "tgt_offsets"))
        print(f"prepared arrays identical: {same_data}")
        a = load_file(work / "before" / "model" / "last.safetensors")
        b = load_file(work / "now" / "model" / "last.safetensors")
        same_weights = a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
        print(f"weights after {args.steps} steps identical: {same_weights}")
        print(f"training seconds (start-up included): before {seconds['before']:.1f}, "
              f"now {seconds['now']:.1f}")
        rates = {side: _median_rate(work / side / "model" / "metrics.jsonl")
                 for side in ("before", "now")}
        print(f"median training tokens/s (source + target, as tfm train logs them): before "
              f"{rates['before']:,.0f}, now {rates['now']:,.0f}")
        sys.exit(0 if same_tok and same_data and same_weights else 1)
    finally:
        subprocess.run(["git", "worktree", "remove", "--force", str(before)], cwd=ROOT,
                       capture_output=True)


if __name__ == "__main__":
    main()
