"""How fast a training step could be if nothing but its matrix products took time.

    python bench/train_step_floor.py --model runs/nllb/e2e/tfm --data runs/nllb/e2e/ft-tfm.data \
        [--steps 8] [--onednn]

Loads a tfm model directory and a dataset prepared for it (`tfm prepare`), runs fp32 training
steps (forward, label-smoothed loss, backward, gradient clipping, Adam) on its batches of 4,096
positions, and prints the tokens/s (source + target, without padding) of the steps as timed,
and under torch's profiler the share of the matrix products (`aten::mm`, `addmm`, `bmm`) and
the tokens/s the steps would reach if everything else took no time at all: a ceiling no change
outside the matrix products can pass.

``--onednn`` runs each ``nn.Linear``'s forward product and its input gradient on oneDNN
(``torch.ops.mkldnn._linear_pointwise``) instead of the BLAS torch uses for fp32 (MKL in
torch's x86 wheels), to measure what that kernel would change; an experiment, not tfm's path.
Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from torch import nn

PRODUCTS = ("aten::mm", "aten::addmm", "aten::bmm", "mkldnn::_linear_pointwise")


class _OneDnnLinear(torch.autograd.Function):
    """y = x W^T + b with the forward product and the input gradient on oneDNN; the weight
    gradient as torch computes it."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        flat = x.reshape(-1, x.size(-1))
        ctx.save_for_backward(flat, weight)
        ctx.has_bias = bias is not None
        y = torch.ops.mkldnn._linear_pointwise(flat, weight, bias, "none", [], "")
        return y.view(*x.shape[:-1], weight.size(0))

    @staticmethod
    def backward(ctx, grad):
        flat, weight = ctx.saved_tensors
        g = grad.reshape(-1, grad.size(-1))
        gx = torch.ops.mkldnn._linear_pointwise(g, weight.t().contiguous(), None, "none", [], "")
        gb = g.sum(0) if ctx.has_bias else None
        return gx.view(*grad.shape[:-1], weight.size(1)), torch.mm(g.t(), flat), gb


def _onednn_forward(self: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    if self.training and x.dtype == torch.float32:
        return _OneDnnLinear.apply(x, self.weight, self.bias)
    return nn.functional.linear(x, self.weight, self.bias)


def training_step(model_dir: Path, data: Path, max_tokens: int):
    """tfm's fp32 training step on the model and dataset given, and the dataset's batches:
    ``step(indices)`` makes one update and returns its non-padding source + target tokens."""
    from tfm.checkpoint import load_model_dir
    from tfm.data.batching import collate, make_batches
    from tfm.data.dataset import load_split, read_prepare_info
    from tfm.training.objective import label_smoothed_loss

    model = load_model_dir(model_dir)[0].train()
    split = load_split(data, "train")
    starts = read_prepare_info(data).decoder_starts
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-5)

    def step(indices) -> int:
        b = collate(split, indices, starts=starts)
        loss, _ = label_smoothed_loss(model(b.src, b.tgt_in, b.tgt_mask), b.tgt_out[b.tgt_mask],
                                      0.1)
        optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        return int(b.n_src_tokens + b.n_tgt_tokens)

    return step, make_batches(split.src_lengths, split.tgt_lengths, max_tokens, 1, 0)


def run_steps(step, batches) -> tuple[int, float]:
    """The tokens and seconds of one step on each of ``batches``."""
    start = time.perf_counter()
    tokens = sum(step(indices) for indices in batches)
    return tokens, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--data", type=Path, required=True)
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--onednn", action="store_true")
    args = parser.parse_args()

    from torch.profiler import ProfilerActivity, profile

    from machine import cpu_name  # bench/machine.py
    from tfm.allocator import keep_freed_memory

    keep_freed_memory()
    torch.set_num_threads(args.threads)
    if args.onednn:
        nn.Linear.forward = _onednn_forward
    step, batches = training_step(args.model, args.data, args.max_tokens)
    run_steps(step, batches[:3])  # warm-up
    n = args.steps
    print(f"{cpu_name()}, {args.threads} threads, torch {torch.__version__}, "
          f"{'oneDNN' if args.onednn else 'torch'} linear products")
    tokens, seconds = run_steps(step, batches[3:3 + n])
    print(f"timed: {n} steps, {tokens:,} tokens in {seconds:.2f} s: "
          f"{tokens / seconds:,.0f} tokens/s")
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        tokens, seconds = run_steps(step, batches[3 + n:3 + 2 * n])
    products = sum(e.self_cpu_time_total for e in prof.key_averages() if e.key in PRODUCTS) / 1e6
    print(f"profiled: {n} steps, {tokens:,} tokens in {seconds:.2f} s "
          f"({tokens / seconds:,.0f} tokens/s); matrix products {products:.2f} s "
          f"({products / seconds:.0%}); with nothing else: {tokens / products:,.0f} tokens/s")


if __name__ == "__main__":
    main()
