"""Terminology constraints measured (docs/CONSTRAINTS.md): BLEU, constraints met, speed and
memory of constrained beam search against unconstrained, and a glossary run.

    python bench/constraints.py --model runs/m30k-quick-en-de/model \\
        [--data ../shared/data/multi30k] [--test test_2016_flickr] [--beam 5] [--limit N] \\
        [--counts 0,1,2,3,4] [--threads 2] [--seed 1] [--terms 300] [--json OUT]

1. Reference constraints (Post & Vilar, 2018, Table 2's shape): for each count c, each test
   sentence gets c phrases of 1-3 words drawn at random from its reference (fixed seed;
   non-overlapping spans, punctuation at their edges left out; a reference too short for c
   gives what fits). Each count is
   translated with beam ``--beam``: BLEU (sacrebleu, cased), the share of phrases met in the
   output (as search matches them: tokens), the share found in the detokenized text,
   sentences/s (model load and a 20-sentence warm-up excluded) and the peak resident memory
   of the process that ran it (each count in a process of its own, so peaks do not mix).
2. A glossary built from the training data: source and target words paired by Dice's
   coefficient of their sentence co-occurrence (2 c(s,t) / (c(s) + c(t)), lowercased words
   of 4 letters or more seen in at least 20 sentences, each source word's best target word,
   the ``--terms`` best pairs of Dice >= 0.4; the target term written in its most frequent
   case inside a sentence). The test set is translated without and with it: BLEU of both,
   and term accuracy: the share of glossary hits (source terms found in a source sentence)
   whose target term appears in the translation as a whole word.

Prints the machine (bench/machine.py), one JSON line per run, then two Markdown tables.
"""

from __future__ import annotations

import argparse
import json
import random
import re
import resource
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


PUNCTUATION = ".,;:!?\"'()[]„“”‚‘’«»-"


def draw_phrases(reference: str, count: int, rng: random.Random) -> list[str]:
    """Up to ``count`` non-overlapping phrases of 1-3 words of ``reference``, in its order."""
    words = reference.split()
    taken = [False] * len(words)
    spans: list[tuple[int, int]] = []
    for _ in range(count):
        options = [(i, n) for n in (1, 2, 3) for i in range(len(words) - n + 1)
                   if not any(taken[i:i + n])
                   and any(c.isalnum() for w in words[i:i + n] for c in w)]
        if not options:
            break
        n = rng.choice([n for _, n in options])  # a length first, then where: 1-3 words alike
        i, n = rng.choice([o for o in options if o[1] == n])
        taken[i:i + n] = [True] * n
        spans.append((i, n))
    # Punctuation at a phrase's edges ("Tritt." ends a sentence) is left to the model.
    return [" ".join(words[i:i + n]).strip(PUNCTUATION) for i, n in sorted(spans)]


def build_glossary(train_src: list[str], train_tgt: list[str], terms: int) -> dict[str, str]:
    """Source word -> target word by Dice's coefficient of sentence co-occurrence."""
    word = re.compile(r"\w{4,}")
    src_count: Counter[str] = Counter()
    tgt_count: Counter[str] = Counter()
    pair_count: Counter[tuple[str, str]] = Counter()
    cased: Counter[str] = Counter()
    first: Counter[str] = Counter()
    for s, t in zip(train_src, train_tgt):
        src_words = {w.lower() for w in word.findall(s) if not w.isdigit()}
        tgt_all = [w for w in word.findall(t) if not w.isdigit()]
        # A word's case inside a sentence ("drei", not the sentence-initial "Drei")
        inside = t.split(maxsplit=1)[1] if " " in t else ""
        cased.update(w for w in word.findall(inside) if not w.isdigit())
        first.update(tgt_all[:1])
        tgt_words = {w.lower() for w in tgt_all}
        src_count.update(src_words)
        tgt_count.update(tgt_words)
        pair_count.update((a, b) for a in src_words for b in tgt_words)
    best: dict[str, tuple[float, str]] = {}
    for (a, b), c in pair_count.items():
        if src_count[a] < 20 or tgt_count[b] < 20:
            continue
        dice = 2 * c / (src_count[a] + tgt_count[b])
        if dice >= 0.4 and dice > best.get(a, (0.0, ""))[0]:
            best[a] = (dice, b)
    form = {}
    for w, _ in [*cased.most_common(), *first.most_common()]:
        form.setdefault(w.lower(), w)
    ranked = sorted(best.items(), key=lambda item: -item[1][0])[:terms]
    return {a: form[b] for a, (_, b) in ranked}


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # Linux: KiB


def run_one(args: argparse.Namespace) -> dict:
    """One configuration, in this process: --count N (reference phrases) or --glossary-file."""
    import torch

    from tfm.allocator import keep_freed_memory
    from tfm.data.corpus import read_text_lines
    from tfm.decoding.constraints import ConstraintSpec
    from tfm.decoding.glossary import load_glossary, sentence_constraints
    from tfm.decoding.scoring import bleu
    from tfm.decoding.torch_engine import TorchTranslator

    keep_freed_memory()
    torch.set_num_threads(args.threads)
    sources = read_text_lines(Path(args.data) / f"{args.test}.en.gz")[: args.limit]
    references = read_text_lines(Path(args.data) / f"{args.test}.de.gz")[: args.limit]
    translator = TorchTranslator(Path(args.model), args.device, workers=1)
    options = translator.default_options(beam=args.beam)
    result: dict = {"sentences": len(sources), "beam": args.beam}
    glossary = None
    if args.glossary_file:
        glossary = load_glossary(Path(args.glossary_file)) if args.use_glossary else None
        specs = [sentence_constraints(s, glossary=glossary) for s in sources]
        result["run"] = "glossary" if glossary is not None else "no glossary"
    else:
        rng = random.Random(args.seed)
        phrases = [draw_phrases(r, args.count, rng) for r in references]
        specs = [ConstraintSpec(p) if p else None for p in phrases]
        result["run"] = f"{args.count} constraints"
        result["phrases"] = sum(map(len, phrases))
    constraints = specs if any(specs) else None
    translator.translate(sources[:20], options,
                         constraints=constraints[:20] if constraints else None)  # warm-up
    start = time.perf_counter()
    out = translator.translate(sources, options, constraints=constraints)
    seconds = time.perf_counter() - start
    texts = [t.text for t in out]
    score = bleu(texts, references)
    result.update({"bleu": round(score.score, 2), "signature": score.signature,
                   "seconds": round(seconds, 2),
                   "sent_per_s": round(len(sources) / seconds, 2),
                   "peak_rss_mib": round(peak_rss_mib(), 1)})
    reported = [c for t in out for c in t.constraints or []]
    if reported:
        result["met_tokens"] = round(sum(m for _, m, _ in reported) / len(reported), 4)
        result["met_text"] = round(sum(p in t.text for t in out
                                       for p, _, _ in t.constraints or []) / len(reported), 4)
    if args.glossary_file:  # term accuracy against the glossary, with or without it applied
        terms = load_glossary(Path(args.glossary_file))
        hits = [(target, text) for s, text in zip(sources, texts)
                for _, target in terms.hits(s)]
        found = sum(re.search(rf"(?<!\w){re.escape(target)}(?!\w)", text) is not None
                    for target, text in hits)
        result.update({"glossary_terms": len(terms), "glossary_hits": len(hits),
                       "term_accuracy": round(found / len(hits), 4) if hits else None})
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default=str(ROOT / "runs/m30k-quick-en-de/model"))
    parser.add_argument("--data", default=str(ROOT.parent / "shared/data/multi30k"))
    parser.add_argument("--test", default="test_2016_flickr")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--limit", type=int, default=None, help="First N test sentences only.")
    parser.add_argument("--counts", default="0,1,2,3,4")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--terms", type=int, default=300, help="Glossary size.")
    parser.add_argument("--json", help="Also write the results here (JSON).")
    # Internal: one run in a process of its own.
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--glossary-file", help=argparse.SUPPRESS)
    parser.add_argument("--use-glossary", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.count is not None or args.glossary_file:
        print(json.dumps(run_one(args)))
        return

    from machine import describe
    from tfm.data.corpus import read_text_lines

    print(json.dumps({"machine": describe(measure_peak=False)}), flush=True)
    common = ["--model", args.model, "--data", args.data, "--test", args.test, "--beam",
              str(args.beam), "--threads", str(args.threads), "--device", args.device,
              "--seed", str(args.seed)] + (["--limit", str(args.limit)] if args.limit else [])

    def child(*extra: str) -> dict:
        done = subprocess.run([sys.executable, __file__, *common, *extra], capture_output=True,
                              text=True, check=False)
        if done.returncode:
            sys.exit(f"bench/constraints.py {' '.join(extra)} failed:\n{done.stderr}")
        record = json.loads(done.stdout.splitlines()[-1])
        print(json.dumps(record), flush=True)
        return record

    counts = [child("--count", c) for c in args.counts.split(",")]
    data = Path(args.data)
    glossary = build_glossary(read_text_lines(data / "train.en.gz"),
                              read_text_lines(data / "train.de.gz"), args.terms)
    glossary_file = Path(args.json or "bench-constraints").with_suffix(".glossary.tsv")
    glossary_file.write_text("".join(f"{s}\t{t}\n" for s, t in glossary.items()),
                             encoding="utf-8")
    runs = [child("--glossary-file", str(glossary_file)),
            child("--glossary-file", str(glossary_file), "--use-glossary")]

    base = counts[0]
    print("\n| constraints | phrases | BLEU | met (tokens) | met (text) | sentences/s | "
          "x slower | peak RSS MiB |")
    print("|---|---|---|---|---|---|---|---|")
    for r in counts:
        print(f"| {r['run'].split()[0]} | {r.get('phrases', 0)} | {r['bleu']:.2f} | "
              f"{r.get('met_tokens', '-')} | {r.get('met_text', '-')} | {r['sent_per_s']:.1f} "
              f"| {base['sent_per_s'] / r['sent_per_s']:.2f} | {r['peak_rss_mib']:.0f} |")
    print(f"\nglossary: {runs[0]['glossary_terms']} terms ({glossary_file}), "
          f"{runs[0]['glossary_hits']} hits in {runs[0]['sentences']} sentences")
    print("| run | BLEU | term accuracy | sentences/s |")
    print("|---|---|---|---|")
    for r in runs:
        print(f"| {r['run']} | {r['bleu']:.2f} | {r['term_accuracy']} | {r['sent_per_s']:.1f} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"counts": counts, "glossary": runs}, indent=1)
                                   + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
