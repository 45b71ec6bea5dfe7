"""One sentence at a time: latency of tfm's search, step by step against CUDA graphs.

    python bench/latency.py MODEL SRC [--sentences 200] [--device cuda] [--precision fp32]
        [--beams 1 5] [--json OUT.json]

Each of the first ``--sentences`` lines of SRC is translated alone, as a server's single
request is (``Translator.translate([line])``, the same call `tfm serve` makes), once with
``--no-cuda-graphs`` ("steps") and once with CUDA graphs ("graphs"), for each beam. Each side
first translates every sentence once untimed: a graph is captured the first time a batch shape
is seen, so the timed pass is the warm server's latency (the first pass's total is printed
too, capture included). Prints p50, p90, p99 and the mean in milliseconds, how many outputs
differ between the two sides (text, and score beyond 1e-4), the GPU and torch. On a CPU there
are no graphs: both sides run step by step.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import torch

from machine import cpu_name
from serve import percentile
from tfm.data.corpus import read_text_lines
from tfm.decoding.engines import load_translator


def timed(translator, lines: list[str], options) -> tuple[list[float], list, float]:
    """Each line alone, untimed once, then timed: (seconds each, outputs, first pass s)."""
    start = time.perf_counter()
    for line in lines:
        translator.translate([line], options)
    first = time.perf_counter() - start
    seconds, outputs = [], []
    for line in lines:
        if translator.device.type == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        outputs.append(translator.translate([line], options)[0].hypotheses)
        seconds.append(time.perf_counter() - start)
    return seconds, outputs, first


def percentiles(seconds: list[float]) -> dict[str, float]:
    """p50, p90, p99 and the mean, in milliseconds (bench/serve.py's nearest rank)."""
    return {**{f"p{p}": round(percentile(seconds, p), 2) for p in (50, 90, 99)},
            "mean": round(1000 * statistics.fmean(seconds), 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("src")
    parser.add_argument("--sentences", type=int, default=200)
    parser.add_argument("--device", default="auto")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--beams", type=int, nargs="+", default=[1, 5])
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    lines = [line for line in read_text_lines(args.src) if line.strip()][: args.sentences]
    sides = {"steps": load_translator(args.model, args.device, args.precision, workers=1,
                                      cuda_graphs=False),
             "graphs": load_translator(args.model, args.device, args.precision, workers=1,
                                       cuda_graphs=True)}
    device = sides["steps"].device
    machine = {"device": (torch.cuda.get_device_name(device) if device.type == "cuda"
                          else cpu_name()),
               "torch": torch.__version__, "precision": args.precision,
               "sentences": len(lines)}
    print(json.dumps(machine))
    results = []
    for beam in args.beams:
        options = sides["steps"].default_options(beam=beam)
        row: dict = {"beam": beam}
        outputs = {}
        for name, translator in sides.items():
            seconds, outputs[name], first = timed(translator, lines, options)
            row[name] = {**percentiles(seconds), "first_pass_s": round(first, 2)}
        pairs = list(zip(outputs["steps"], outputs["graphs"]))
        row["texts_differ"] = sum([t for t, _ in a] != [t for t, _ in b] for a, b in pairs)
        row["scores_differ"] = sum(any(abs(x - y) > 1e-4 for (_, x), (_, y) in zip(a, b))
                                   for a, b in pairs)
        graphs = sides["graphs"].graphs
        row["graphs_captured"] = len(graphs.graphs) if graphs is not None else 0
        print(json.dumps(row))
        results.append(row)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"machine": machine, "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
