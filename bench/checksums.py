"""What the checksums of manifest.json cost (docs/FAULTS.md): a checkpoint save of a model as
tfm train writes it, with and without them, and the check that loading a model adds.

    python bench/checksums.py [--preset small] [--vocab 8000] [--repeats 7] [--dir DIR]

A save writes last.safetensors, model.safetensors, checkpoints/step_N.safetensors and
train_state.pt (the weights after one Adam step, so the optimizer's moments are full size).
"Before" is the same four atomic writes alone (the code before manifests); "now" is
tfm.checkpoint.save_recorded as the training loop calls it: the manifest written before and
after, sha256 of every file, the previous state kept by a hard link. Medians of --repeats
saves in a directory on the file system of --dir (default: a temporary folder under bench/).
"""

from __future__ import annotations

import argparse
import hashlib
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import torch

from tfm.atomic import atomic_write_bytes
from tfm.checkpoint import load_weights, save_recorded, train_state_bytes, weights_to_bytes
from tfm.config import model_config_from_preset
from tfm.integrity import Manifest
from tfm.layout import ModelDir
from tfm.model import Transformer


def cpu_name() -> str:
    for line in Path("/proc/cpuinfo").read_text().splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "?"


def median_ms(run, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="small")
    parser.add_argument("--vocab", type=int, default=8000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--dir", type=Path, default=Path(__file__).resolve().parent)
    args = parser.parse_args()

    torch.manual_seed(0)
    config = model_config_from_preset(args.preset, src_vocab_size=args.vocab,
                                      tgt_vocab_size=args.vocab)
    model = Transformer(config)
    optimizer = torch.optim.Adam(model.parameters())
    for p in model.parameters():  # one step: the moments exist
        p.grad = torch.randn_like(p) * 1e-3
    optimizer.step()
    weights = weights_to_bytes(model, {"format": "pt", "step": "1"})
    state = train_state_bytes({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    total = 3 * len(weights) + len(state)

    work = Path(tempfile.mkdtemp(prefix=".checksums.", dir=args.dir))
    try:
        files = ModelDir(work)
        files.checkpoints.mkdir()
        batch = {files.last_weights: weights, files.weights: weights,
                 files.checkpoint(1): weights, files.train_state: state}

        def before() -> None:
            for path, data in batch.items():
                atomic_write_bytes(path, data)

        def now() -> None:
            save_recorded(work, batch,
                          keep_previous={files.train_state: files.previous_train_state})

        before()
        now()  # warm both paths (and make the previous state exist, as from the 2nd save on)
        plain = median_ms(before, args.repeats)
        recorded = median_ms(now, args.repeats)
        hashing = median_ms(lambda: [hashlib.sha256(d).digest() for d in (weights, state)],
                            args.repeats)

        # Loading: what translate's start adds, the check of the weights against their entry,
        # beside the load itself (read, parse, load_state_dict).
        manifest = Manifest.read(work)
        path = files.weights
        loaded = Transformer(config)
        load = median_ms(lambda: load_weights(loaded, path, path.read_bytes()), args.repeats)
        check = median_ms(lambda: manifest.damage(path, path.read_bytes()), args.repeats)
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"CPU: {cpu_name()}; torch threads {torch.get_num_threads()}; preset {args.preset}, "
          f"vocabulary {args.vocab}: {sum(p.numel() for p in model.parameters()):,} parameters")
    print(f"a checkpoint save writes {total / 1e6:.1f} MB (weights {len(weights) / 1e6:.1f} MB "
          f"x 3, state {len(state) / 1e6:.1f} MB); medians of {args.repeats}:")
    print("| | ms |\n|---|---:|")
    print(f"| save, atomic writes only (before) | {plain:.0f} |")
    print(f"| save with manifest.json and sha256 (now) | {recorded:.0f} |")
    print(f"| of which sha256 of the weights once and the state | {hashing:.0f} |")
    print(f"| load the weights (read, parse, load_state_dict) | {load:.0f} |")
    print(f"| check the weights against manifest.json (read, sha256) | {check:.0f} |")


if __name__ == "__main__":
    main()
