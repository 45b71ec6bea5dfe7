"""Data pipeline benchmark: tokenizer training, prepare, round trip, padding, scale.

    python bench/data.py --data ../shared/data/multi30k [--scale 1000000] [--json out.json]

Measures the claims of the tokenizer and data pipeline on Multi30k (en-de by default):

1. ``tfm train-tokenizer`` (joint BPE, 8k) on the train split: wall time of the command in a
   subprocess (Python start-up and imports included: what a user waits for), and of the
   library call alone (the same normalisation as the command).
2. ``tfm prepare`` of train + valid with that tokenizer (``--force``), then the same command
   again, which should find the output up to date and return at once.
3. Round trip on the test split, both languages: the fraction of lines for which
   decode(encode(line)) gives back the normalised line, and the count of unknown tokens.
4. Padding of one epoch of ``--max-tokens`` batches over the prepared train split: padded
   positions / all positions of the collated tensors, for the source, the decoder input and
   both together.
5. Scale: ``tfm prepare`` of ``--scale`` pairs (the train split repeated) in a subprocess:
   wall time and peak resident memory (``--scale 0`` skips it).

Every command runs in its own process; its wall time and peak RSS are its own
(bench/harness.py).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from harness import add_corpus_options, run_measured
from machine import describe
from tfm.data.corpus import CorpusSpec, iter_pairs, iter_texts, read_text_lines
from tfm.data.dataset import load_split
from tfm.data.text import normalize_text
from tfm.data.tokenizer import UNK_ID, decode, encode_batch, load_tokenizer, train_tokenizer

TFM = [sys.executable, "-m", "tfm"]


def bench_tokenizer(args: argparse.Namespace, work: Path) -> tuple[dict, Path]:
    prefix = str(Path(args.data) / args.train_split)
    path = work / "tokenizer.json"
    cli = run_measured([*TFM, "train-tokenizer", "--train", prefix, "--src-lang", args.src,
                        "--tgt-lang", args.tgt, "--vocab-size", str(args.vocab_size),
                        "-o", str(path)])
    spec = CorpusSpec((prefix,), args.src, args.tgt)
    start = time.perf_counter()
    tok = train_tokenizer((normalize_text(t) for t in iter_texts(spec)), args.vocab_size)
    library = time.perf_counter() - start
    return {"cli_seconds": cli.seconds, "cli_peak_rss_mb": cli.peak_rss_mb,
            "library_seconds": library, "vocab_size": tok.get_vocab_size()}, path


def bench_prepare(args: argparse.Namespace, tokenizer: Path, output: Path) -> dict:
    command = [*TFM, "prepare", "--train", str(Path(args.data) / args.train_split),
               "--valid", str(Path(args.data) / args.valid_split), "--src-lang", args.src,
               "--tgt-lang", args.tgt, "--tokenizer", str(tokenizer), "-o", str(output)]
    first = run_measured([*command, "--force"])
    again = run_measured(command)
    if "up to date" not in again.stderr:
        raise SystemExit(f"the second prepare did not find {output} up to date:\n"
                         f"{again.stderr}")
    info = json.loads((output / "prepare.json").read_text())
    return {"seconds": first.seconds, "peak_rss_mb": first.peak_rss_mb,
            "cached_seconds": again.seconds,
            "kept": {name: split["kept"] for name, split in info["splits"].items()},
            "read": {name: split["read"] for name, split in info["splits"].items()}}


def bench_round_trip(args: argparse.Namespace, tokenizer_path: Path) -> dict:
    tok = load_tokenizer(tokenizer_path)
    results: dict = {"failures": []}
    lines = ok = unknown = 0
    for lang in (args.src, args.tgt):
        path = next(Path(args.data).glob(f"{args.test_split}.{lang}*"))
        texts = [normalize_text(line) for line in read_text_lines(path)]
        ids = encode_batch(tok, texts)
        good = 0
        for text, row in zip(texts, ids):
            back = decode(tok, row)
            unknown += row.count(UNK_ID)
            if back == text:
                good += 1
            elif len(results["failures"]) < 5:
                results["failures"].append({"lang": lang, "line": text, "decoded": back})
        results[lang] = {"lines": len(texts), "exact": good}
        lines, ok = lines + len(texts), ok + good
    results.update(lines=lines, exact=ok, exact_fraction=ok / lines, unknown_tokens=unknown)
    return results


def bench_padding(args: argparse.Namespace, data_dir: Path) -> dict:
    from tfm.data.batching import collate, make_batches

    split = load_split(data_dir, "train")
    start = time.perf_counter()
    batches = make_batches(split.src_lengths, split.tgt_lengths, args.max_tokens, seed=0,
                           epoch=0)
    batching = time.perf_counter() - start
    src_all = src_real = tgt_all = tgt_real = 0
    start = time.perf_counter()
    for indices in batches:
        batch = collate(split, indices)
        src_all += batch.src.numel()
        tgt_all += batch.tgt_in.numel()
        src_real += batch.n_src_tokens
        tgt_real += batch.n_tgt_tokens
    collating = time.perf_counter() - start
    return {
        "max_tokens": args.max_tokens, "examples": len(split), "batches": len(batches),
        "sentences_per_batch": len(split) / len(batches),
        "src_padding": 1 - src_real / src_all, "tgt_padding": 1 - tgt_real / tgt_all,
        "padding": 1 - (src_real + tgt_real) / (src_all + tgt_all),
        "make_batches_seconds": batching, "collate_seconds": collating,
    }


def bench_scale(args: argparse.Namespace, tokenizer: Path, work: Path) -> dict:
    spec = CorpusSpec((str(Path(args.data) / args.train_split),), args.src, args.tgt)
    pairs = list(iter_pairs(spec))
    corpus = work / "scale"
    with open(f"{corpus}.{args.src}", "w", encoding="utf-8") as src, \
            open(f"{corpus}.{args.tgt}", "w", encoding="utf-8") as tgt:
        for i in range(args.scale):
            s, t = pairs[i % len(pairs)]
            src.write(s + "\n")
            tgt.write(t + "\n")
    output = work / "scale-data"
    run = run_measured([*TFM, "prepare", "--train", str(corpus), "--src-lang", args.src,
                        "--tgt-lang", args.tgt, "--tokenizer", str(tokenizer),
                        "-o", str(output), "--force"])
    info = json.loads((output / "prepare.json").read_text())
    size = sum(f.stat().st_size for f in output.rglob("*") if f.is_file())
    return {"pairs": args.scale, "seconds": run.seconds, "peak_rss_mb": run.peak_rss_mb,
            "pairs_per_s": args.scale / run.seconds, "kept": info["splits"]["train"]["kept"],
            "dataset_mb": size / 2**20}


def summary(results: dict) -> list[tuple[str, str, str, bool]]:
    """(metric, value, target, passed) rows."""
    tok, prep, rt, pad = (results[k] for k in ("tokenizer", "prepare", "round_trip", "padding"))
    rows = [
        ("train-tokenizer (CLI, wall)", f"{tok['cli_seconds']:.1f} s", "< 10 s",
         tok["cli_seconds"] < 10),
        ("train-tokenizer (library)", f"{tok['library_seconds']:.1f} s", "< 10 s",
         tok["library_seconds"] < 10),
        ("prepare train+valid (CLI)", f"{prep['seconds']:.1f} s", "< 30 s", prep["seconds"] < 30),
        ("prepare again (up to date)", f"{prep['cached_seconds']:.1f} s", "< 3 s",
         prep["cached_seconds"] < 3),
        ("round trip exact", f"{rt['exact_fraction']:.2%} ({rt['exact']}/{rt['lines']})",
         ">= 99.9%", rt["exact_fraction"] >= 0.999),
        ("unknown tokens", f"{rt['unknown_tokens']}", "0", rt["unknown_tokens"] == 0),
        ("padding src", f"{pad['src_padding']:.1%}", "", True),
        ("padding tgt (decoder input)", f"{pad['tgt_padding']:.1%}", "", True),
        (f"padding overall @{pad['max_tokens']}", f"{pad['padding']:.1%}", "< 10%",
         pad["padding"] < 0.10),
    ]
    if "scale" in results:
        scale = results["scale"]
        rows += [
            (f"prepare {scale['pairs']:,} pairs (wall)", f"{scale['seconds']:.1f} s", "< 600 s",
             scale["seconds"] < 600),
            (f"prepare {scale['pairs']:,} pairs (peak RSS)",
             f"{scale['peak_rss_mb'] / 1024:.2f} GiB", "< 4 GiB",
             scale["peak_rss_mb"] < 4096),
        ]
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser, "train", "valid", "test")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--max-tokens", type=int, default=4096, help="batch size for padding")
    parser.add_argument("--scale", type=int, default=1_000_000,
                        help="pairs for the scale run (0 skips it)")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args()

    machine = describe()
    print(json.dumps({"machine": machine}), flush=True)
    results: dict = {"machine": machine}
    with tempfile.TemporaryDirectory(prefix="tfm-bench-data.") as tmp:
        work = Path(tmp)
        results["tokenizer"], tokenizer = bench_tokenizer(args, work)
        print(json.dumps({"tokenizer": results["tokenizer"]}), flush=True)
        data_dir = work / "data"
        results["prepare"] = bench_prepare(args, tokenizer, data_dir)
        print(json.dumps({"prepare": results["prepare"]}), flush=True)
        results["round_trip"] = bench_round_trip(args, tokenizer)
        print(json.dumps({"round_trip": results["round_trip"]}, ensure_ascii=False), flush=True)
        results["padding"] = bench_padding(args, data_dir)
        print(json.dumps({"padding": results["padding"]}), flush=True)
        if args.scale:
            results["scale"] = bench_scale(args, tokenizer, work)
            print(json.dumps({"scale": results["scale"]}), flush=True)

    rows = summary(results)
    results["summary"] = [{"metric": m, "value": v, "target": t, "pass": p}
                          for m, v, t, p in rows]
    print(f"\n{machine['cpu']}, {machine['cores']} threads, torch {machine['torch']}, "
          f"Python {machine['python']}")
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    print(f"{'metric':<{widths[0]}}  {'value':>{widths[1]}}  {'target':<{widths[2]}}  result")
    for metric, value, target, passed in rows:
        verdict = ("pass" if passed else "FAIL") if target else ""
        print(f"{metric:<{widths[0]}}  {value:>{widths[1]}}  {target:<{widths[2]}}  {verdict}")
    for failure in results["round_trip"]["failures"]:
        print(f"round trip [{failure['lang']}]: {failure['line']!r} -> {failure['decoded']!r}")
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2, ensure_ascii=False) + "\n")


if __name__ == "__main__":
    main()
