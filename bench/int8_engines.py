"""tfm's int8 decoding with each of torch's int8 kernels, fbgemm and oneDNN, beside fp32, on one
model directory: sentences/s of ``Translator.translate`` over a file, greedy and beam 5, the
same process, model load excluded, the first 20 sentences decoded once before timing.

    python bench/int8_engines.py --model runs/nllb/e2e/tfm \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz \\
        --source-lang eng_Latn --target-lang deu_Latn

``--precision int8`` picks fbgemm where torch has it (tfm.model.int8.int8_scheme); this runs
both, so that the choice is measured on the machine at hand.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import cpu_name  # noqa: E402
from tfm.data.corpus import read_text_lines  # noqa: E402
from tfm.decoding.engines import load_translator  # noqa: E402
from tfm.model.int8 import KERNELS, int8_scheme, quantize_linears  # noqa: E402


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model", type=Path, required=True)
    p.add_argument("--src", type=Path, required=True)
    p.add_argument("--source-lang")
    p.add_argument("--target-lang")
    p.add_argument("--threads", type=int, default=2)
    args = p.parse_args()
    torch.set_num_threads(args.threads)
    lines = read_text_lines(args.src, allow_empty=True)
    print(f"{cpu_name()}, {args.threads} threads, {len(lines)} lines")
    for name in ("fp32", *KERNELS):
        translator = load_translator(args.model, "cpu", "fp32")
        if name != "fp32":
            quantize_linears(translator.model, int8_scheme(name))
        for beam in (1, 5):
            options = translator.default_options(beam=beam)
            direction = dict(language=translator.languages.resolve(args.target_lang,
                                                                   args.source_lang))
            translator.translate(lines[:20], options, **direction)
            start = time.perf_counter()
            translator.translate(lines, options, **direction)
            seconds = time.perf_counter() - start
            print(f"{name:7} beam {beam}: {len(lines) / seconds:7.1f} sentences/s", flush=True)


if __name__ == "__main__":
    main()
