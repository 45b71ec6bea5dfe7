"""How good a low-resource simulation's synthetic text is: each translation in a
recipes/multi30k-lowres.sh run directory (OUT/bt/NAME, back-translations and the iteration's
forward translation) scored against the real text of the same lines of the corpus, which the
simulation held out and a real low-resource user never has.

    python bench/bt_sources.py RUN_DIR DATA_DIR [--first-line 5001]

DATA_DIR holds train.LANG.gz (Multi30k's layout). A translation's lines are matched to the
corpus in order by their monolingual side, from --first-line on (the recipe's monolingual text
starts after its REAL pairs), so a line dropped by a filter is skipped, not misaligned.
Prints a markdown table: cased sacreBLEU and chrF of the synthetic side, its length ratio.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

import sacrebleu


def corpus_lines(data: Path, lang: str) -> list[str]:
    with gzip.open(data / f"train.{lang}.gz", "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def references(mono: list[str], corpus_mono: list[str], corpus_synthetic: list[str],
               first: int) -> list[str | None]:
    """For each monolingual line (as the translation wrote it), the corpus's real text of the
    other language on its line: the next corpus line at or after the last match, from index
    ``first``, whose text is the same (None where none is)."""
    refs: list[str | None] = []
    at = first
    for line in mono:
        i = at
        while i < len(corpus_mono) and corpus_mono[i].strip() != line.strip():
            i += 1
        if i == len(corpus_mono):
            refs.append(None)
            continue
        refs.append(corpus_synthetic[i])
        at = i + 1
    return refs


def score(run: Path, data: Path, name: str, first: int) -> dict | None:
    meta = json.loads((run / "bt" / f"{name}.json").read_text(encoding="utf-8"))
    request = meta["request"]
    synthetic_side = meta.get("synthetic", "source")
    synth = request["source_lang"] if synthetic_side == "source" else request["target_lang"]
    mono = request["target_lang"] if synthetic_side == "source" else request["source_lang"]
    hyps = (run / "bt" / f"{name}.{synth}").read_text(encoding="utf-8").splitlines()
    monos = (run / "bt" / f"{name}.{mono}").read_text(encoding="utf-8").splitlines()
    refs = references(monos, corpus_lines(data, mono), corpus_lines(data, synth), first)
    kept = [(h, r) for h, r in zip(hyps, refs) if r is not None]
    if not kept:
        return None
    bleu = sacrebleu.corpus_bleu([h for h, _ in kept], [[r for _, r in kept]])
    chrf = sacrebleu.corpus_chrf([h for h, _ in kept], [[r for _, r in kept]])
    return {"name": name, "synthetic": f"{synth} (from {mono})", "lines": len(kept),
            "unmatched": len(refs) - len(kept), "bleu": bleu.score, "chrf": chrf.score,
            "ratio": bleu.sys_len / max(bleu.ref_len, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path)
    parser.add_argument("data", type=Path)
    parser.add_argument("--first-line", type=int, default=5001,
                        help="the corpus line (1-based) where the monolingual text starts")
    args = parser.parse_args()
    print("| translation | synthetic side | lines | BLEU | chrF | length ratio |")
    print("|---|---|---|---|---|---|")
    for meta in sorted((args.run / "bt").glob("*.json")):
        row = score(args.run, args.data, meta.stem, args.first_line - 1)
        if row is None:
            print(f"| {meta.stem} | no line matched the corpus | | | | |")
            continue
        note = f" ({row['unmatched']} unmatched)" if row["unmatched"] else ""
        print(f"| {row['name']} | {row['synthetic']} | {row['lines']}{note} | {row['bleu']:.2f} "
              f"| {row['chrf']:.2f} | {row['ratio']:.3f} |")


if __name__ == "__main__":
    main()
