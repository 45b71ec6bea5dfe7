"""A vocabulary shortlist measured: coverage, BLEU and speed, with and without it.

    python bench/shortlist.py MODEL SRC REF [--data DATA] [--per-token 50 ...]
        [--frequent 500 ...] [--lines N] [--beam 5] [--threads 1] [--repeat 1]

MODEL is a tfm model directory. With --data (the prepared dataset it was trained on), a
shortlist is built in memory for each --per-token x --frequent given (MODEL is not written);
without, MODEL's own shortlist (`tfm shortlist`) is measured. Prints one JSON line per
configuration, the first without a shortlist:

- ``coverage``: the share of the reference's target tokens (tokenized as the model writes)
  inside the shortlist of its sentence, the rest being tokens the model cannot produce with it;
- ``output_coverage``: the share of the tokens of the translations without a shortlist inside
  it (where it is below 1, the shortlist changes a translation);
- ``union``: the mean number of target candidates per sentence and per batch decoded, against
  the vocabulary's size;
- BLEU (sacrebleu, cased) and sentences/s (the best of --repeat timings, model load and a
  warm-up of 20 sentences excluded).
"""

from __future__ import annotations

import argparse
import itertools
import json
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from tfm.allocator import keep_freed_memory
from tfm.data.corpus import read_text_lines
from tfm.data.dataset import load_split
from tfm.data.shortlist import FREQUENT, PER_TOKEN, Shortlist, build_shortlist
from tfm.data.tokenizer import encode_batch, text_normalizer
from tfm.decoding.scoring import bleu
from tfm.decoding.shortlist import load_shortlist
from tfm.decoding.torch_engine import TorchTranslator


class _Counted:
    """A shortlist that records the size of the candidates of every batch decoded."""

    def __init__(self, shortlist: Shortlist) -> None:
        self.shortlist = shortlist
        self.sizes: list[int] = []

    def batch_candidates(self, sources, extra=None) -> tuple[np.ndarray, np.ndarray]:
        ids, allowed = self.shortlist.batch_candidates(sources, extra)
        self.sizes.append(len(ids))
        return ids, allowed


def main() -> None:
    keep_freed_memory()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("src")
    parser.add_argument("ref")
    parser.add_argument("--data", type=Path)
    parser.add_argument("--per-token", type=int, nargs="+", default=[PER_TOKEN])
    parser.add_argument("--frequent", type=int, nargs="+", default=[FREQUENT])
    parser.add_argument("--lines", type=int, default=0, help="the first N lines (0: all)")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    if args.lines:
        sources, references = sources[: args.lines], references[: args.lines]
    translator = TorchTranslator(args.model, "cpu", workers=1)
    options = translator.default_options(beam=args.beam)
    plain, seconds = _timed(translator, sources, options, args.repeat)
    hypotheses = [t.text for t in plain]
    print(json.dumps({"shortlist": None, "bleu": bleu(hypotheses, references).score,
                      "sent_per_s": len(sources) / seconds,
                      "vocab": translator.model.config.tgt_vocab_size}), flush=True)
    for shortlist, label in _shortlists(args, translator):
        counted = _Counted(shortlist)
        translator.shortlist = counted
        out, seconds = _timed(translator, sources, options, args.repeat)
        texts = [t.text for t in out]
        src_ids = [s.ids for s in translator.prepare(sources)]
        print(json.dumps({
            "shortlist": label,
            "coverage": _coverage(translator, shortlist, src_ids, references),
            "output_coverage": _coverage(translator, shortlist, src_ids, hypotheses),
            "union": {"sentence": float(np.mean([len(shortlist.candidates([s]))
                                                 for s in src_ids])),
                      "batch": float(np.mean(counted.sizes))},
            "bleu": bleu(texts, references).score,
            "sent_per_s": len(sources) / seconds,
            "same_translations": sum(a == b for a, b in zip(texts, hypotheses)) / len(texts),
        }), flush=True)


def _shortlists(args: argparse.Namespace, translator: TorchTranslator):
    """(shortlist, its parameters) to measure: built from --data, or the model's own."""
    if args.data is None:
        own = load_shortlist(args.model, translator.vocabs)
        yield own, {k: own.provenance.get(k) for k in ("per_token", "frequent")}
        return
    c = translator.model.config
    # Built once with the most of both: a smaller shortlist is its first columns and entries.
    largest = build_shortlist(load_split(args.data, "train"), c.src_vocab_size,
                              c.tgt_vocab_size, max(args.per_token), max(args.frequent))
    for per_token, frequent in itertools.product(args.per_token, args.frequent):
        yield (replace(largest, per_source=largest.per_source[:, :per_token],
                       frequent=largest.frequent[:frequent]),
               {"per_token": per_token, "frequent": frequent})


def _timed(translator: TorchTranslator, sources: list[str], options, repeat: int):
    """The translations, and the best time of ``repeat`` runs after a warm-up."""
    translator.translate(sources[:20], options)
    best, out = float("inf"), None
    for _ in range(repeat):
        start = time.perf_counter()
        out = translator.translate(sources, options)
        best = min(best, time.perf_counter() - start)
    return out, best


def _coverage(translator: TorchTranslator, shortlist: Shortlist, src_ids: list[list[int]],
              targets: list[str]) -> float:
    """The share of the tokens of ``targets`` inside the shortlist of their sentences."""
    normalize = text_normalizer(translator.vocabs.tgt)
    inside = total = 0
    for ids, tokens in zip(src_ids, encode_batch(translator.vocabs.tgt,
                                                 [normalize(t) for t in targets])):
        allowed = shortlist.candidates([ids])
        inside += int(np.isin(tokens, allowed).sum())
        total += len(tokens)
    return inside / max(total, 1)


if __name__ == "__main__":
    main()
