"""Training speed in each CPU precision: fp32, bf16 autocast, and the bf16 model with fp32
master weights that `tfm train --precision bf16` (and `auto` on CPUs with native bf16) runs.

    python bench/precision.py --data DIR [--steps 20] [--rounds 3] [--threads 1] [--profile 10]

DIR is a dataset prepared by `tfm prepare` (Multi30k en-de with a joint 8k BPE in
docs/BENCHMARKS.md). Each variant is a `small` model (the same initial weights) trained by
tfm's own update (`tfm.training.loop._update`: forward, label-smoothed loss, backward,
clipping, Adam) on the same batches of --max-tokens positions (the bf16 path pads them to a
few widths, as `tfm train` does): 3 untimed steps, then --rounds
rounds of --steps timed steps, the variants taking turns at every step, so that a machine whose
speed drifts slows every variant alike. Prints non-padding source+target tokens/s per round and
the median, and the ratio to fp32. --profile N: then N steps of the bf16 path under
torch.profiler, self CPU time grouped by operator, with the share of the matrix products.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from machine import describe  # noqa: E402
from tfm.allocator import keep_freed_memory  # noqa: E402
from tfm.config import TrainConfig, model_config_from_preset  # noqa: E402
from tfm.data.batching import collate, make_batches  # noqa: E402
from tfm.data.dataset import load_split  # noqa: E402
from tfm.data.tokenizer import load_vocabularies  # noqa: E402
from tfm.layout import TOKENIZER_FILE  # noqa: E402
from tfm.model import Transformer  # noqa: E402
from tfm.training.bf16 import BATCH_WIDTH_MULTIPLE, Bf16Copy  # noqa: E402
from tfm.training.distributed import Distributed  # noqa: E402
from tfm.training.loop import _update  # noqa: E402

VARIANTS = ("fp32", "autocast", "bf16")
# Operators that are matrix products (their backward passes call the same ones).
PRODUCTS = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm", "aten::addbmm"}


class Variant:
    """A model, its optimizer and how a step runs, for one precision."""

    def __init__(self, name: str, model_config, config: TrainConfig) -> None:
        torch.manual_seed(0)
        self.name, self.config = name, config
        self.model = Transformer(model_config)
        self.model.train()
        self.optimizer = torch.optim.Adam(self.model.parameters(), lr=config.lr,
                                          betas=config.adam_betas, eps=config.adam_eps)
        self.bf16 = Bf16Copy(self.model) if name == "bf16" else None
        # What computes the steps, as in tfm train: the bf16 copy, else the model itself.
        self.compute = self.bf16.model if self.bf16 is not None else self.model
        self.amp = torch.bfloat16 if name == "autocast" else None
        self.scaler = torch.amp.GradScaler("cpu", enabled=False)  # no loss scaling: no fp16
        # As tfm train does: a bf16 run on a CPU pads its batches to a few widths.
        self.width_multiple = BATCH_WIDTH_MULTIPLE if name == "bf16" else 1
        self.steps = 0

    def step(self, batches: dict[int, object]) -> int:
        """One step on the batch collated at this variant's width multiple (``batches``:
        by multiple); returns its non-padding tokens."""
        self.steps += 1
        batch = batches[self.width_multiple]
        _update(self.compute, self.optimizer, [batch], self.config, self.amp, self.steps,
                Distributed(), self.scaler, bf16=self.bf16)
        return int(batch.n_src_tokens + batch.n_tgt_tokens)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, required=True, help="a `tfm prepare` directory")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--profile", type=int, default=0, metavar="N",
                        help="profile N steps of the bf16 path afterwards")
    args = parser.parse_args()
    keep_freed_memory()  # as the tfm command does
    torch.set_num_threads(args.threads)
    print(describe())
    split = load_split(args.data, "train")
    vocabs = load_vocabularies(args.data / TOKENIZER_FILE)
    model_config = model_config_from_preset(
        args.preset, src_vocab_size=vocabs.src.get_vocab_size(),
        tgt_vocab_size=vocabs.tgt.get_vocab_size(), share_embeddings=vocabs.joint)
    config = TrainConfig(lr=1e-3, warmup_steps=400)
    batches = make_batches(split.src_lengths, split.tgt_lengths, args.max_tokens, 1, 0)
    def collated(indices) -> dict[int, object]:
        return {m: collate(split, indices, m) for m in (1, BATCH_WIDTH_MULTIPLE)}

    warmup = [collated(b) for b in batches[:3]]
    timed = [collated(b) for b in batches[3:3 + args.steps]]
    variants = [Variant(name, model_config, config) for name in args.variants.split(",")]
    print(f"{args.preset}, {args.max_tokens} positions per batch, {args.threads} thread(s), "
          f"{len(timed)} timed steps a round; tokens/s (non-padding source + target):")
    for v in variants:
        for batch in warmup:
            v.step(batch)
    rates: dict[str, list[float]] = {v.name: [] for v in variants}
    for r in range(args.rounds):
        tokens = dict.fromkeys(rates, 0)
        seconds = dict.fromkeys(rates, 0.0)
        for batch in timed:
            for v in variants:
                start = time.perf_counter()
                tokens[v.name] += v.step(batch)
                seconds[v.name] += time.perf_counter() - start
        for name in rates:
            rates[name].append(tokens[name] / seconds[name])
        print(f"round {r + 1}: " + ", ".join(f"{n} {rates[n][-1]:,.0f}" for n in rates))
    base = statistics.median(rates["fp32"]) if "fp32" in rates else None
    for name, values in rates.items():
        median = statistics.median(values)
        ratio = f" ({median / base:.2f}x fp32)" if base else ""
        print(f"{name}: median {median:,.0f} tokens/s{ratio}")
    if args.profile:
        profile([v for v in variants if v.name == "bf16"][0] if "bf16" in rates
                else Variant("bf16", model_config, config), timed, args.profile)


def profile(variant: Variant, batches: list, steps: int) -> None:
    """Self CPU time of ``steps`` steps by operator, and the matrix products' share."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    with torch_profile(activities=[ProfilerActivity.CPU]) as prof:
        for i in range(steps):
            variant.step(batches[i % len(batches)])
    events = [e for e in prof.key_averages() if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in events)
    products = sum(e.self_cpu_time_total for e in events if e.key in PRODUCTS)
    print(f"\nprofile of {steps} {variant.name} steps: {total / 1e6 / steps:.3f} s/step of "
          f"operator time; matrix products ({', '.join(sorted(PRODUCTS))}) "
          f"{100 * products / total:.1f}%, everything else {100 * (total - products) / total:.1f}%")
    print(f"{'operator':48} {'share':>7} {'ms/step':>8} {'calls/step':>10}")
    for e in sorted(events, key=lambda e: -e.self_cpu_time_total)[:25]:
        print(f"{e.key[:48]:48} {100 * e.self_cpu_time_total / total:6.1f}% "
              f"{e.self_cpu_time_total / 1e3 / steps:8.1f} {e.count / steps:10.1f}")


if __name__ == "__main__":
    main()
