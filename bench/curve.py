"""BLEU against training time: score every numbered checkpoint of a training run.

    python bench/curve.py runs/m30k/model --src test.en.gz --ref test.de.gz [--beam 5]

Reads the run's metrics.jsonl for the training time at which each checkpoint was saved, and
prints one row per checkpoint: minutes, step, BLEU (sacrebleu, detokenised) with the signature.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

from tfm.data.corpus import read_text_lines
from tfm.decoding.scoring import bleu
from tfm.decoding.torch_engine import TorchTranslator


def elapsed_by_step(metrics: Path) -> dict[int, float]:
    """Seconds of training at each logged step."""
    times = {}
    for line in metrics.read_text().splitlines():
        record = json.loads(line)
        if record.get("kind") == "train":
            times[record["step"]] = record["elapsed"]
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref", required=True)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()

    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    times = elapsed_by_step(args.model / "metrics.jsonl")
    rows = []
    for path in sorted((args.model / "checkpoints").glob("step_*.safetensors")):
        step = int(re.search(r"step_(\d+)", path.name).group(1))
        logged = [s for s in times if s <= step]
        minutes = times[max(logged)] / 60 if logged else float("nan")
        translator = TorchTranslator(args.model, "cpu", f"checkpoints/{path.name}")
        options = translator.default_options(beam=args.beam)
        hypotheses = [t.text for t in translator.translate(sources, options)]
        score = bleu(hypotheses, references)
        rows.append({"step": step, "minutes": round(minutes, 1), "bleu": round(score.score, 2),
                     "signature": score.signature})
        print(f"{minutes:6.1f} min  step {step:6d}  BLEU {score.score:5.2f}", flush=True)
    if rows:
        print(f"signature: {rows[-1]['signature']}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    sys.exit(0 if rows else 1)


if __name__ == "__main__":
    main()
