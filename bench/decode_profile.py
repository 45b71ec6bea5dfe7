"""Where tfm's decoding time goes: the torch profiler's self CPU time of a file's translation,
grouped by the kind of work (matrix products, the vocabulary-wide log_softmax and top-k, the
cache's growth and reordering, attention, the rest).

    python bench/decode_profile.py --model runs/ml/bi-en-de/model \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz --limit 300 --beam 5 \\
        [--precision int8] [--shortlist] [--threads 1]

One worker, so that every operation runs in the profiled thread; the first 20 sentences are
translated once before profiling.
"""

from __future__ import annotations

import argparse
import sys
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# Kind of work, by the names of torch's operators (the first match wins).
KINDS = [
    ("matrix products", ("addmm", "aten::mm", "bmm", "linear", "quantized::", "onednn::",
                         "matmul", "fbgemm")),
    ("log_softmax, top-k over the vocabulary", ("log_softmax", "topk", "aten::max",
                                                "isfinite", "masked_fill")),
    ("cache growth and reordering", ("aten::cat", "index_select", "aten::index")),
    ("attention", ("scaled_dot_product", "softmax", "_efficient_attention", "flash")),
    ("layer norm", ("layer_norm",)),
]


def kind(name: str) -> str:
    for label, needles in KINDS:
        if any(n in name for n in needles):
            return label
    return "the rest (element-wise, copies, Python between)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--src", required=True)
    parser.add_argument("--limit", type=int, default=300)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--shortlist", action="store_true")
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    from machine import describe
    from tfm.data.corpus import read_text_lines
    from tfm.decoding.engines import load_translator

    torch.set_num_threads(args.threads)
    more = {"shortlist": True} if args.shortlist else {}  # (an older tfm has no shortlist)
    translator = load_translator(args.model, "cpu", args.precision, workers=1, **more)
    options = translator.default_options(beam=args.beam)
    sources = read_text_lines(args.src)[: args.limit]
    translator.translate(sources[:20], options)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        translator.translate(sources, options)
    totals: dict[str, float] = defaultdict(float)
    for event in prof.key_averages():
        totals[kind(event.key)] += event.self_cpu_time_total
    whole = sum(totals.values())
    print(f"{describe(measure_peak=False)['cpu']}; {translator.describe()}; beam {args.beam}, "
          f"{len(sources)} sentences, {args.threads} thread(s): {whole / 1e6:.2f} s profiled")
    print("| work | share of self CPU time |\n|---|---|")
    for label, micros in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {label} | {100 * micros / whole:.0f}% |")


if __name__ == "__main__":
    main()
