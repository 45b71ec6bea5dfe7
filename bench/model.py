"""Model benchmark: training-step throughput, cached decoding throughput, peak memory.

    python bench/model.py --data ../shared/data/multi30k [--preset small] [--precision fp32]

Training: forward + backward + Adam update on real batches of ``--max-tokens`` padded
positions (joint BPE trained on the corpus), after warm-up steps; tokens/s counts non-padding
source + target tokens, and the matmul FLOPs of those steps give the achieved fraction of
the measured matmul peak. Decoding: greedy and beam search with the key/value cache over the
test sentences, with the given model directory (``--model``) or random weights (then every
sentence runs to its length limit, which measures steps, not translation quality). Each part
runs in its own process so that its peak resident memory is its own.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from harness import add_corpus_options
from machine import describe
from tfm.allocator import keep_freed_memory
from tfm.config import ModelConfig, model_config_from_preset
from tfm.data.batching import Batch, collate, make_batches
from tfm.data.dataset import TokenizedSplit
from tfm.data.tokenizer import EOS_ID, PAD_ID, encode_batch, load_tokenizer
from tfm.device import autocast, resolve_precision
from tfm.model import Transformer


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def read_split(data: Path, split: str, src: str, tgt: str) -> tuple[list[str], list[str]]:
    from tfm.data.corpus import CorpusSpec, iter_pairs

    pairs = list(iter_pairs(CorpusSpec((str(data / split),), src, tgt)))
    return [s for s, _ in pairs], [t for _, t in pairs]


def tokenized(tokenizer, sources: list[str], targets: list[str]) -> TokenizedSplit:
    import numpy as np

    src = [ids + [EOS_ID] for ids in encode_batch(tokenizer, sources)]
    tgt = encode_batch(tokenizer, targets)

    def flat(rows):
        offsets = np.zeros(len(rows) + 1, dtype=np.int64)
        offsets[1:] = np.cumsum([len(r) for r in rows])
        return np.fromiter((t for r in rows for t in r), dtype=np.int32), offsets

    return TokenizedSplit(*flat(src), *flat(tgt))


def matmul_flops(config: ModelConfig, batch: Batch) -> float:
    """FLOPs of the matrix products of one forward + backward pass (backward = 2x forward)."""
    d, ff, v = config.d_model, config.d_ff, config.tgt_vocab_size
    b, s = batch.src.shape
    t = batch.tgt_in.size(1)
    src_pos, tgt_pos, scored = b * s, b * t, batch.n_tgt_tokens
    encoder = config.encoder_layers * (src_pos * (4 * d * d + 2 * d * ff) + 2 * b * s * s * d)
    decoder = config.decoder_layers * (tgt_pos * (6 * d * d + 2 * d * ff) + src_pos * 2 * d * d
                                       + 2 * b * t * t * d + 2 * b * t * s * d)
    output = scored * d * v
    return 3 * 2 * (encoder + decoder + output)


def run_train(args: argparse.Namespace) -> dict:
    from tfm.training.bf16 import Bf16Copy
    from tfm.training.objective import label_smoothed_loss

    torch.manual_seed(0)
    tokenizer = load_tokenizer(Path(args.tokenizer))
    vocab = tokenizer.get_vocab_size()
    sources, targets = read_split(Path(args.data), args.train_split, args.src, args.tgt)
    split = tokenized(tokenizer, sources, targets)
    batches = make_batches(split.src_lengths, split.tgt_lengths, args.max_tokens, seed=1)
    config = model_config_from_preset(args.preset, src_vocab_size=vocab, tgt_vocab_size=vocab)
    model = Transformer(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4, betas=(0.9, 0.98), eps=1e-9)
    device = torch.device("cpu")
    dtype = resolve_precision(args.precision, device)
    # bf16 as tfm train runs it on a CPU: a bf16 copy of the model, fp32 master weights.
    bf16 = Bf16Copy(model) if dtype == torch.bfloat16 else None
    net = bf16.model if bf16 is not None else model

    def step(batch: Batch) -> None:
        optimizer.zero_grad(set_to_none=True)
        with autocast(device, None if bf16 is not None else dtype):
            logits = net(batch.src, batch.tgt_in, batch.tgt_mask)
        loss, _ = label_smoothed_loss(logits, batch.tgt_out[batch.tgt_mask], 0.1)
        (loss / batch.n_tgt_tokens).backward()
        if bf16 is not None:
            bf16.gradients_to_master()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        if bf16 is not None:
            bf16.weights_from_master()

    data = [collate(split, b) for b in batches[: args.warmup + args.steps]]
    for batch in data[: args.warmup]:
        step(batch)
    tokens = flops = 0.0
    padded = real = 0
    start = time.perf_counter()
    for batch in data[args.warmup:]:
        step(batch)
        tokens += batch.n_src_tokens + batch.n_tgt_tokens
        flops += matmul_flops(config, batch)
        padded += batch.src.numel() + batch.tgt_in.numel()
        real += batch.n_src_tokens + batch.n_tgt_tokens
    seconds = time.perf_counter() - start
    return {
        "part": "train", "preset": args.preset, "precision": args.precision,
        "resolved_precision": str(dtype or "fp32").replace("torch.", ""),
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": args.steps, "max_tokens": args.max_tokens,
        "tokens_per_s": tokens / seconds, "s_per_step": seconds / args.steps,
        "tokens_per_step": tokens / args.steps, "padding_fraction": 1 - real / padded,
        "matmul_gflops": flops / seconds / 1e9, "peak_rss_mb": peak_rss_mb(),
    }


def run_decode(args: argparse.Namespace) -> dict:
    from tfm.config import SearchOptions
    from tfm.decoding.search import search

    torch.manual_seed(0)
    if args.model:
        from tfm.checkpoint import load_model_dir

        model, vocabs, _ = load_model_dir(Path(args.model))
        tokenizer = vocabs.src
    else:
        tokenizer = load_tokenizer(Path(args.tokenizer))
        vocab = tokenizer.get_vocab_size()
        model = Transformer(model_config_from_preset(args.preset, src_vocab_size=vocab,
                                                     tgt_vocab_size=vocab)).eval()
    sources, _ = read_split(Path(args.data), args.test_split, args.src, args.tgt)
    ids = [x + [EOS_ID] for x in encode_batch(tokenizer, sources)]
    order = sorted(range(len(ids)), key=lambda i: len(ids[i]))
    results = {}
    for beam in (1, 5):
        generated = 0
        start = time.perf_counter()
        for first in range(0, len(order), args.decode_batch):
            rows = [ids[i] for i in order[first:first + args.decode_batch]]
            src = torch.full((len(rows), max(map(len, rows))), PAD_ID, dtype=torch.long)
            for r, row in enumerate(rows):
                src[r, : len(row)] = torch.tensor(row)
            hyps = search(model, src, SearchOptions(beam=beam))
            generated += sum(len(h[0].tokens) + 1 for h in hyps)
        seconds = time.perf_counter() - start
        results[f"beam{beam}"] = {"sentences_per_s": len(ids) / seconds,
                                  "tokens_per_s": generated / seconds, "seconds": seconds}
    return {"part": "decode", "weights": args.model or "random", "sentences": len(ids),
            "batch": args.decode_batch, **results, "peak_rss_mb": peak_rss_mb()}


def _without(argv: list[str], options: set[str]) -> list[str]:
    """``argv`` less the given options and their values (``--opt value`` or ``--opt=value``)."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
        elif arg in options:
            skip = True
        elif arg.split("=", 1)[0] not in options:
            out.append(arg)
    return out


def main() -> None:
    keep_freed_memory()  # as the tfm command does (TFM_DEFAULT_MALLOC=1: glibc's default)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser, "train", "test")
    parser.add_argument("--preset", default="small")
    parser.add_argument("--precision", default="fp32")
    parser.add_argument("--max-tokens", type=int, default=4096)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--decode-batch", type=int, default=64, help="sentences per batch")
    parser.add_argument("--model", help="a trained model directory for decoding")
    parser.add_argument("--tokenizer", help="tokenizer file (default: trained on --data)")
    parser.add_argument("--part", choices=["train", "decode"], help=argparse.SUPPRESS)
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()
    if args.part == "train":
        print(json.dumps(run_train(args)))
        return
    if args.part == "decode":
        print(json.dumps(run_decode(args)))
        return

    machine = describe()
    print(json.dumps({"machine": machine}))
    with tempfile.TemporaryDirectory() as tmp:
        if not args.tokenizer:
            from tfm.data.corpus import CorpusSpec, iter_texts
            from tfm.data.tokenizer import save_tokenizer, train_tokenizer

            spec = CorpusSpec((str(Path(args.data) / args.train_split),), args.src, args.tgt)
            args.tokenizer = str(Path(tmp) / "tokenizer.json")
            save_tokenizer(train_tokenizer(iter_texts(spec), 8000), Path(args.tokenizer))
        results = {"machine": machine}
        for part in ("train", "decode"):
            command = [sys.executable, __file__, "--part", part, *_without(
                sys.argv[1:], {"--json", "--tokenizer"}), "--tokenizer", args.tokenizer]
            output = subprocess.run(command, capture_output=True, text=True, check=True)
            results[part] = json.loads(output.stdout.strip().splitlines()[-1])
            print(json.dumps(results[part]))
    train = results["train"]
    peak = machine.get("bf16_gflops" if train["resolved_precision"] == "bfloat16"
                       else "fp32_gflops")
    print(f"\n{machine['cpu']}, {machine['cores']} threads, torch {machine['torch']}")
    print(f"train  {train['preset']} {train['resolved_precision']}: "
          f"{train['tokens_per_s']:,.0f} tok/s, {train['s_per_step']:.2f} s/step, "
          f"{train['matmul_gflops']:.0f} GFLOP/s = {train['matmul_gflops'] / peak:.0%} of the "
          f"measured matmul peak ({peak} GFLOP/s), padding {train['padding_fraction']:.1%}, "
          f"peak RSS {train['peak_rss_mb']:,.0f} MB")
    dec = results["decode"]
    for beam in ("beam1", "beam5"):
        print(f"decode {beam} ({dec['weights']} weights): {dec[beam]['sentences_per_s']:.0f} "
              f"sent/s, {dec[beam]['tokens_per_s']:,.0f} tok/s")
    print(f"decode peak RSS {dec['peak_rss_mb']:,.0f} MB")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


if __name__ == "__main__":
    main()
