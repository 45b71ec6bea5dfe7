"""Beam search without constraints, as it was at a commit and as it is now: the same
hypotheses (tokens, scores, log-probabilities) and the time each took, batch by batch in turn.

    python bench/search_unchanged.py [--before 1d7562d] [--model runs/m30k-quick-en-de/model]
        [--limit 120] [--beam 5] [--n-best 3] [--threads 1]

1d7562d is the last commit before terminology constraints (#47) came into tfm/decoding/search.py.
Exits 1 at the first sentence whose hypotheses differ.
"""

from __future__ import annotations

import argparse
import importlib.util
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent


def search_at(commit: str):
    """tfm/decoding/search.py as it was at ``commit``, imported as a module of its own."""
    text = subprocess.run(["git", "show", f"{commit}:tfm/decoding/search.py"], cwd=ROOT,
                          capture_output=True, text=True, check=True).stdout
    path = Path(tempfile.mkdtemp()) / f"search_{commit}.py"
    path.write_text(text, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--before", default="1d7562d")
    parser.add_argument("--model", default=str(ROOT / "runs/m30k-quick-en-de/model"))
    parser.add_argument("--src", default=str(ROOT.parent / "shared/data/multi30k/"
                                             "test_2016_flickr.en.gz"))
    parser.add_argument("--limit", type=int, default=120)
    parser.add_argument("--beam", type=int, default=5)
    parser.add_argument("--n-best", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()

    import tfm.decoding.search as now
    from tfm.data.corpus import read_text_lines
    from tfm.decoding.torch_engine import TorchTranslator, _padded

    torch.set_num_threads(args.threads)
    before = search_at(args.before)
    translator = TorchTranslator(Path(args.model), "cpu", workers=1)
    o = translator.default_options(beam=args.beam, n_best=args.n_best)
    ids = sorted((s.ids for s in translator.prepare(read_text_lines(args.src)[: args.limit])
                  if s.ids), key=len)
    seconds = {"before": 0.0, "now": 0.0}
    for start in range(0, len(ids), 40):
        src = _padded(ids[start:start + 40])
        found = {}
        for name, module in (("before", before), ("now", now)) * 2:
            begin = time.perf_counter()
            found[name] = module.beam_search(translator.model, src, o.beam, o.length_penalty,
                                             o.max_len_a, o.max_len_b, 0, o.n_best)
            seconds[name] += time.perf_counter() - begin
        for i, (a, b) in enumerate(zip(found["before"], found["now"])):
            if [(h.tokens, h.score, h.log_prob) for h in a] != \
                    [(h.tokens, h.score, h.log_prob) for h in b]:
                sys.exit(f"sentence {start + i} (by length) differs")
    print(f"{len(ids)} sentences, beam {o.beam}, n-best {o.n_best}: the same hypotheses, "
          f"scores and log-probabilities; {seconds['before']:.1f} s at {args.before}, "
          f"{seconds['now']:.1f} s now")


if __name__ == "__main__":
    main()
