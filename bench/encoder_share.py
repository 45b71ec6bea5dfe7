"""How much of a model's decoding time its encoder takes: a source file translated once as
`tfm translate` would (one worker, so the times add up), with the encoder's calls timed.

    python bench/encoder_share.py MODEL_DIR SOURCES [--precision int8] [--shortlist] [--beam 1]

Prints the whole time, the encoder's, and its share. One torch thread, so that a 2-core
machine's other core does not blur it.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from tfm.decoding.engines import load_translator
from tfm.model.transformer import Transformer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", type=Path)
    parser.add_argument("sources", type=Path)
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--shortlist", action="store_true")
    parser.add_argument("--beam", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(1)
    sources = args.sources.read_text(encoding="utf-8").splitlines()
    translator = load_translator(args.model, "cpu", args.precision, workers=1,
                                 shortlist=args.shortlist)
    options = translator.default_options(beam=args.beam)
    translator.translate(sources[:100], options)  # warm-up
    encoder = [0.0]
    encode = Transformer.encode

    def timed(self, *a, **k):
        start = time.perf_counter()
        try:
            return encode(self, *a, **k)
        finally:
            encoder[0] += time.perf_counter() - start

    Transformer.encode = timed
    try:
        start = time.perf_counter()
        translator.translate(sources, options)
        total = time.perf_counter() - start
    finally:
        Transformer.encode = encode
    print(f"{len(sources)} sentences: {total:.2f} s, the encoder {encoder[0]:.2f} s "
          f"({encoder[0] / total:.0%})")


if __name__ == "__main__":
    main()
