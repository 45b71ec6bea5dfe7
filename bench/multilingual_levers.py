"""The zero-shot sweep of docs/multi30k.md: one multilingual model (en->de, de->en, en->fr,
fr->en of Multi30k, the multilingual recipe's model, vocabulary and schedule) trained for a
short budget of steps with one combination of the levers against off-target zero-shot output,
then scored on val, greedy: each trained direction (BLEU, chrF), and de->fr and fr->de, which
it never saw, directly (BLEU, off-target rate) and through English with the same model.

    python bench/multilingual_levers.py --data ../shared/data/multi30k --out runs/levers \\
        --name base --steps 2000
    python bench/multilingual_levers.py ... --name residual -- --drop-residual-layer 2
    python bench/multilingual_levers.py ... --name decoder --language-token decoder

Everything after ``--`` goes to `tfm train`. The tokenizer is trained once in OUT and shared by
every run; the prepared data once per --language-token. Each run writes OUT/NAME/ (the model,
the hypotheses, scores.json) and prints one Markdown row; a finished run is not trained again.
`--table` prints the rows of every run in OUT. Greedy, val only: a proxy for choosing; the
recipe scores the chosen combination with its own decoding.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

SUPERVISED = ("en-de", "de-en", "en-fr", "fr-en")
ZERO_SHOT = ("de-fr", "fr-de")


def tfm(*args: str) -> str:
    """Run one tfm command, its stdout returned; a failure stops the sweep with its stderr."""
    done = subprocess.run([sys.executable, "-m", "tfm", *args], capture_output=True, text=True)
    if done.returncode:
        sys.exit(f"tfm {' '.join(args)} failed:\n{done.stderr[-3000:]}")
    return done.stdout


def run_yaml(data: Path, out: Path, run: Path, language_token: str) -> Path:
    prepared = out / f"data-{language_token}"
    text = f"""corpora:
  - train: {data}/train
    valid: {data}/val
    directions: [en-de, de-en, en-fr, fr-en]
train_tokenizer:
  vocab_size: 8000
  output: {out}/tokenizer.json
prepare:
  tokenizer: {out}/tokenizer.json
  output: {prepared}
  language_token: {language_token}
train:
  data: {prepared}
  output: {run}/model
  preset: small
  max_tokens: 1024
  lr: 1.5e-3
  warmup: 800
  lr_schedule: linear
  max_time: 600
  valid_every: 1000
  save_every: 500
"""
    path = run / "run.yaml"
    path.write_text(text if language_token != "source" else
                    text.replace("  language_token: source\n", ""))
    return path


def score(model: Path, src: Path, ref: Path, lang: str, hyp: Path, off_target: bool) -> dict:
    args = ["eval", "--model", str(model), "--src", str(src), "--ref", str(ref),
            "--target-lang", lang, "--beam", "1", "--chrf", "--json", "--save-hyp", str(hyp)]
    listed = json.loads(tfm(*args, *(["--off-target"] if off_target else [])))
    return {s["metric"]: s["score"] for s in listed}  # bleu, chrf, off_target (a percentage)


def evaluate(data: Path, run: Path) -> dict:
    model, scores = run / "model", {}
    for pair in SUPERVISED:
        src, tgt = pair.split("-")
        scores[pair] = score(model, data / f"val.{src}.gz", data / f"val.{tgt}.gz", tgt,
                             run / f"val.{pair}.hyp", True)
    for pair in ZERO_SHOT:
        src, tgt = pair.split("-")
        scores[f"{pair} direct"] = score(model, data / f"val.{src}.gz", data / f"val.{tgt}.gz",
                                         tgt, run / f"val.{pair}.hyp", True)
        # The pivot's first leg is the supervised src-en direction scored above.
        scores[f"{pair} pivot"] = score(model, run / f"val.{src}-en.hyp",
                                        data / f"val.{tgt}.gz", tgt,
                                        run / f"val.{pair}.pivot.hyp", True)
    return scores


def row(name: str, scores: dict) -> str:
    def bleu(key: str) -> float:
        return scores[key]["bleu"]

    def off(key: str) -> str:
        return f"{scores[key]['off_target']:.1f}%"

    supervised = " | ".join(f"{bleu(p):.2f} ({scores[p]['chrf']:.1f})"
                            for p in SUPERVISED)
    mean = sum(bleu(p) for p in SUPERVISED) / len(SUPERVISED)
    zero = " | ".join(f"{off(f'{p} direct')} | {bleu(f'{p} direct'):.2f} / "
                      f"{bleu(f'{p} pivot'):.2f}" for p in ZERO_SHOT)
    return f"| {name} | {supervised} | {mean:.2f} | {zero} |"


HEADER = ("| run | en-de | de-en | en-fr | fr-en | mean | de-fr off-target | de-fr direct / pivot"
          " | fr-de off-target | fr-de direct / pivot |\n|" + "---|" * 10)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    parser.add_argument("--out", type=Path, default=Path("runs/levers"))
    parser.add_argument("--name", default="base")
    parser.add_argument("--steps", type=int, default=2000)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--language-token", default="source",
                        help="tfm prepare --language-token: source, decoder or both")
    parser.add_argument("--table", action="store_true", help="print every run's row")
    parser.add_argument("train_options", nargs="*")
    args = parser.parse_args()
    out = args.out.resolve()
    if args.table:
        print(HEADER)
        for path in sorted(out.glob("*/scores.json")):
            print(row(path.parent.name, json.loads(path.read_text())["scores"]))
        return
    data, run = args.data.resolve(), out / args.name
    run.mkdir(parents=True, exist_ok=True)
    config = str(run_yaml(data, out, run, args.language_token))
    if not (out / "tokenizer.json").exists():
        tfm("train-tokenizer", "--config", config)
    tfm("prepare", "--config", config)
    began = time.time()
    if not (run / "model.done").exists():
        resume = ["--resume"] if (run / "model").exists() else []
        log = tfm("train", "--config", config, "--max-steps", str(args.steps),
                  "--threads", str(args.threads), *resume, *args.train_options)
        (run / "train.log").write_text(log)
        (run / "model.done").touch()
    minutes = (time.time() - began) / 60
    scores = evaluate(data, run)
    (run / "scores.json").write_text(json.dumps({
        "steps": args.steps, "language_token": args.language_token,
        "train_options": args.train_options, "train_minutes": round(minutes, 1),
        "scores": scores}, indent=2) + "\n")
    print(HEADER)
    print(row(args.name, scores))


if __name__ == "__main__":
    main()
