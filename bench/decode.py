"""Decoding speed and BLEU of a model directory on a test set, model load excluded.

    python bench/decode.py MODEL SRC REF [--beam 5] [--threads 2] [--workers 1] [--precision fp32]
        [--profile]

Prints one JSON line: seconds, sentences/s, target pieces/s (EOS excluded, as for the peers),
BLEU and its signature, and the precision and workers used. ``--workers N``: N batches decoded
at once, each by a thread with threads / N CPU threads (``tfm translate --workers``). The first
20 sentences are translated once before timing (warm-up). ``--profile`` decodes once more under
the torch profiler and adds the operators that took the most CPU time (where the time goes).
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from tfm.allocator import keep_freed_memory
from tfm.data.corpus import read_text_lines
from tfm.decoding.scoring import bleu
from tfm.decoding.torch_engine import TorchTranslator


def main() -> None:
    keep_freed_memory()  # as the tfm command does (TFM_DEFAULT_MALLOC=1: glibc's default)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("src")
    parser.add_argument("ref")
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    sources, references = read_text_lines(args.src), read_text_lines(args.ref)
    translator = TorchTranslator(args.model, "cpu", precision=args.precision,
                                 workers=args.workers)
    options = translator.default_options(beam=args.beam)
    translator.translate(sources[:20], options)  # warm-up, not timed
    start = time.perf_counter()
    out = translator.translate(sources, options)
    seconds = time.perf_counter() - start
    hypotheses = [t.text for t in out]
    pieces = sum(len(ids) for ids in (
        e.ids for e in translator.vocabs.tgt.encode_batch(hypotheses, add_special_tokens=False)))
    score = bleu(hypotheses, references)
    result = {"seconds": seconds, "sent_per_s": len(sources) / seconds,
              "pieces_per_s": pieces / seconds, "bleu": score.score,
              "signature": score.signature,
              "precision": str(next(translator.model.parameters()).dtype).removeprefix("torch."),
              "threads": args.threads, "workers": args.workers}
    if args.profile:
        result["profile"] = profile(lambda: translator.translate(sources, options))
    print(json.dumps(result))


def profile(work, top: int = 10) -> list[dict]:
    """The operators that took the most CPU time (self time, children excluded) in ``work()``."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        work()
    events = sorted(prof.key_averages(), key=lambda e: e.self_cpu_time_total, reverse=True)
    total = sum(e.self_cpu_time_total for e in events)
    return [{"op": e.key, "share": e.self_cpu_time_total / total, "calls": e.count}
            for e in events[:top]]


if __name__ == "__main__":
    main()
