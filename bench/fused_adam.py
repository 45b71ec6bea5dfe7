"""Adam's update alone, torch's per-parameter loop against its fused kernel, on tfm's models.

    python bench/fused_adam.py [--threads 1]

Times `optimizer.step()` (gradients already in place) of `torch.optim.Adam` as tfm trained
before (`foreach`/`fused` left to torch, which on a CPU loops over the parameters one by one),
with `foreach=True`, and with `fused=True` (what `tfm train` uses on a CPU and on CUDA), over
the parameters of two models: the test suite's reversal model (d_model 64, 1+2 layers, 300
tokens) and a base Transformer (d_model 512, 6+6 layers, 8k vocabulary). Run it on an
otherwise idle machine.
"""

from __future__ import annotations

import argparse
import time

import torch

from machine import cpu_name
from tfm.config import ModelConfig
from tfm.model import Transformer

MODELS = {
    "reversal (tests/test_learning.py)": dict(
        src_vocab_size=300, tgt_vocab_size=300, d_model=64, n_heads=4, encoder_layers=1,
        decoder_layers=2, d_ff=128),
    "base, 8k vocabulary": dict(
        src_vocab_size=8000, tgt_vocab_size=8000, d_model=512, n_heads=8, encoder_layers=6,
        decoder_layers=6, d_ff=2048),
}
VARIANTS = {"per parameter (torch's CPU default)": {}, "foreach": {"foreach": True},
            "fused": {"fused": True}}


def step_ms(params: list[torch.Tensor], options: dict, steps: int) -> float:
    optimizer = torch.optim.Adam(params, lr=1e-3, **options)
    for _ in range(3):  # the state made, the kernels warm
        optimizer.step()
    start = time.perf_counter()
    for _ in range(steps):
        optimizer.step()
    return (time.perf_counter() - start) / steps * 1e3


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"{cpu_name()}, {args.threads} thread(s), torch {torch.__version__}")
    for name, fields in MODELS.items():
        params = list(Transformer(ModelConfig(**fields)).parameters())
        for p in params:
            p.grad = torch.randn_like(p)
        steps = 50 if sum(p.numel() for p in params) < 10**6 else 5
        times = {variant: step_ms(params, options, steps) for variant, options in VARIANTS.items()}
        print(f"{name}, {sum(p.numel() for p in params):,} parameters: " + ", ".join(
            f"{variant} {ms:.2f} ms" for variant, ms in times.items()))


if __name__ == "__main__":
    main()
