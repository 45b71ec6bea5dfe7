"""Training-step speed of one tfm source tree, for before/after comparisons in one session.

    python bench/train_step.py --data-8k DIR --data-10k DIR [--tree PATH] [--steps 30]

Times forward + backward + Adam on real Multi30k batches (datasets prepared by `tfm
train-tokenizer --vocab-size 8000` / `10000` and `tfm prepare` on Multi30k train), in this
process, with the tfm package found in ``--tree`` (default: this repository; give a `git
worktree` of an older commit to measure it the same way) and with the malloc setting the tfm
command applies where that tree has it.
Three shapes: `small` at 2,048 and 4,096 padded positions per batch, and a 4+4-layer
d_model 128 model (FFN 256, dropout 0.3) at 4,096. Prints seconds per step and non-padding
source+target tokens/s. Run it on an otherwise idle machine.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch

REPO = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tree", type=Path, default=REPO)
    parser.add_argument("--data-8k", type=Path, required=True, help="joint 8k vocabulary")
    parser.add_argument("--data-10k", type=Path, required=True, help="joint 10k vocabulary")
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    # The tree given, not an installed (editable) tfm.
    sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]
    sys.path.insert(0, str(args.tree.resolve()))
    import tfm

    try:
        from tfm.allocator import keep_freed_memory
        tuned = keep_freed_memory()
    except ImportError:  # a tree from before tfm.allocator
        tuned = False
    from tfm.config import model_config_from_preset
    from tfm.data.batching import collate, make_batches
    from tfm.data.dataset import load_split
    from tfm.model.transformer import Transformer
    from tfm.training.objective import label_smoothed_loss

    print(f"tfm from {Path(tfm.__file__).parent}, malloc tuned: {tuned}, "
          f"{args.threads} threads, torch {torch.__version__}")
    torch.set_num_threads(args.threads)
    shapes = [("small, 8k vocabulary, 2,048 positions", args.data_8k, "small", {}, 2048),
              ("small, 8k vocabulary, 4,096 positions", args.data_8k, "small", {}, 4096),
              ("4+4 layers, d_model 128, FFN 256, 10k vocabulary, 4,096 positions",
               args.data_10k, "tiny", dict(encoder_layers=4, decoder_layers=4, d_ff=256,
                                           dropout=0.3), 4096)]
    for name, data, preset, overrides, max_tokens in shapes:
        split = load_split(data, "train")
        vocab = 8000 if data == args.data_8k else 10000
        torch.manual_seed(0)
        model = Transformer(model_config_from_preset(
            preset, src_vocab_size=vocab, tgt_vocab_size=vocab, **overrides))
        model.train()
        optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
        batches = make_batches(split.src_lengths, split.tgt_lengths, max_tokens, 1, 0)
        for indices in batches[:3]:  # warm-up
            train_step(model, optimizer, collate(split, indices), label_smoothed_loss)
        start = time.perf_counter()
        tokens = sum(train_step(model, optimizer, collate(split, indices), label_smoothed_loss)
                     for indices in batches[3:3 + args.steps])
        seconds = time.perf_counter() - start
        print(f"{name}: {seconds / args.steps:.3f} s/step, {tokens / seconds:,.0f} tokens/s")


def train_step(model, optimizer, batch, loss_fn) -> int:
    """One update; returns the batch's non-padding source+target tokens."""
    loss, _ = loss_fn(model(batch.src, batch.tgt_in, batch.tgt_mask),
                      batch.tgt_out[batch.tgt_mask], 0.1)
    optimizer.zero_grad()
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()
    return int(batch.n_src_tokens + batch.n_tgt_tokens)


if __name__ == "__main__":
    main()
