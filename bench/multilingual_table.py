"""The table of docs/multi30k.md's multilingual benchmark, from the logs of the recipes' runs:
each bilingual quick-recipe run (`recipes/multi30k.sh ... > bi-SRC-TGT.log`) and the
multilingual run (`recipes/multi30k-multilingual.sh ... > multi.log`).

    python bench/multilingual_table.py --bilingual runs/ml/bi-{en-de,de-en,en-fr,fr-en}.log \
        --multilingual runs/ml/multi.log
    python bench/multilingual_table.py --runs runs/ml/dec8k.log runs/ml/decbt.log

Reads the scores `tfm eval` printed after each `== NAME` line of a recipe: cased BLEU, then
lc-tok BLEU (where the recipe had sacremoses), chrF and the off-target rate (where it had
py3langid), and prints them as Markdown.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

SUPERVISED = ("en-de", "de-en", "en-fr", "fr-en")
_SCORE = re.compile(r"^(BLEU-lc-tok|BLEU|chrF2\+*|off-target) =? ?([0-9.]+)")


def read_scores(log: Path) -> dict[str, dict[str, float]]:
    """``== NAME`` -> {"bleu", "lc_tok", "chrf", "off_target"} as the log has them."""
    out: dict[str, dict[str, float]] = {}
    name = None
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        if line.startswith("== "):
            name = line[3:].strip()
            out[name] = {}
            continue
        match = _SCORE.match(line)
        if name is None or match is None:
            continue
        kind, value = match.group(1), float(match.group(2))
        scores = out[name]
        if kind == "BLEU":
            scores["bleu"] = value
        elif kind == "BLEU-lc-tok":
            scores["lc_tok"] = value
        elif kind.startswith("chrF"):
            scores["chrf"] = value
        else:
            scores["off_target"] = value
    return out


def cell(scores: dict[str, float] | None) -> str:
    if not scores:
        return "not run"
    parts = [f"{scores['bleu']:.2f}"]
    if "lc_tok" in scores:
        parts.append(f"{scores['lc_tok']:.2f}")
    text = " / ".join(parts)
    if "chrf" in scores:
        text += f" ({scores['chrf']:.2f})"
    return text


def runs_table(logs: list[Path]) -> None:
    """Several multilingual runs side by side (``--runs``): each direction and split, then
    the zero-shot rows, one column per log; each run's mean BLEU over the trained
    directions per split."""
    scores = [read_scores(log) for log in logs]
    names = [log.stem for log in logs]
    print("| direction | split | " + " | ".join(f"{n}: BLEU / lc-tok (chrF)" for n in names)
          + " |")
    print("|---|---|" + "---|" * len(names))
    means: dict[str, list[list[float]]] = {}
    for split in ("val", "test_2016_flickr"):
        for direction in SUPERVISED:
            row = [s.get(f"{split} {direction}") for s in scores]
            print(f"| {direction} | {split} | " + " | ".join(cell(r) for r in row) + " |")
            means.setdefault(split, []).append([r["bleu"] if r else float("nan") for r in row])
    for split, rows in means.items():
        print(f"| mean | {split} | " + " | ".join(
            f"{sum(col) / len(col):.2f}" for col in zip(*rows)) + " |")
    zero = [name for name in scores[0] if "zero-shot" in name]
    print("\n| zero-shot | " + " | ".join(f"{n}: BLEU / lc-tok (chrF), off-target"
                                         for n in names) + " |")
    print("|---|" + "---|" * len(names))
    for name in zero:
        cells = []
        for s in scores:
            r = s.get(name)
            off = f", {r['off_target']:.1f}%" if r and "off_target" in r else ""
            cells.append(cell(r) + off)
        print(f"| {name} | " + " | ".join(cells) + " |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bilingual", type=Path, nargs="+")
    parser.add_argument("--multilingual", type=Path)
    parser.add_argument("--runs", type=Path, nargs="+",
                        help="multilingual runs' logs to print side by side instead")
    args = parser.parse_args()
    if args.runs:
        runs_table(args.runs)
        return
    if not (args.bilingual and args.multilingual):
        parser.error("give --bilingual and --multilingual, or --runs")
    multi = read_scores(args.multilingual)
    print("| direction | split | bilingual: BLEU / lc-tok (chrF) | multilingual: BLEU / lc-tok "
          "(chrF) | off-target | difference (BLEU) |")
    print("|---|---|---|---|---|---|")
    diffs: dict[str, list[float]] = {"val": [], "test_2016_flickr": []}
    for log in args.bilingual:
        direction = re.search(r"([a-z]+-[a-z]+)\.log$", log.name).group(1)
        bilingual = read_scores(log)
        for split in ("val", "test_2016_flickr"):
            b, m = bilingual.get(split), multi.get(f"{split} {direction}")
            diff = f"{m['bleu'] - b['bleu']:+.2f}" if b and m else ""
            if b and m:
                diffs[split].append(m["bleu"] - b["bleu"])
            off = f"{m['off_target']:.1f}%" if m and "off_target" in m else ""
            print(f"| {direction} | {split} | {cell(b)} | {cell(m)} | {off} | {diff} |")
    for split, values in diffs.items():
        if values:
            print(f"\nmean difference on {split} over {len(values)} directions: "
                  f"{sum(values) / len(values):+.2f} BLEU")
    print("\n| zero-shot | BLEU / lc-tok (chrF) | off-target |\n|---|---|---|")
    for name, scores in multi.items():
        if "zero-shot" in name:
            off = f"{scores['off_target']:.1f}%" if "off_target" in scores else ""
            print(f"| {name} | {cell(scores)} | {off} |")


if __name__ == "__main__":
    main()
