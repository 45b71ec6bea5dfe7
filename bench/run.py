"""The benchmark entry point: tfm and its peers on Multi30k, side by side, in one run.

    python bench/run.py --data ../shared/data/multi30k [--train-minutes 10] [--peers onmt,ct2,joey]

Measures, on this machine and in this run:
  - tfm: `train-tokenizer` and `prepare` times; the training-step throughput of the Multi30k
    model and its fraction of the measured fp32 matmul peak (bench/model.py); a training run of
    --train-minutes with the peers' settings (tokens/s, peak memory); decoding test_2016_flickr
    with that model, greedy and beam 5 (sentences/s, target pieces/s, BLEU, peak memory);
  - the peers (bench/peers.py, each in its own virtual environment): the same training budget,
    model, BPE and batch size, and the same decoding.
Then prints one table with the ratios tfm / peer and writes docs/BENCHMARKS.md (numbers,
machine, date, the exact commands). Run it on an otherwise idle machine: with two cores, any
other process changes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from harness import Finished, add_corpus_options, log, run_measured  # noqa: E402
from peers import MODEL, PEER_NAMES  # noqa: E402
from tfm.config import SearchOptions  # noqa: E402

# The peers' noam schedule (bench/peers.py MODEL) is tfm's inverse-sqrt schedule with this peak,
# reached at the end of the same warmup.
PEER_LR = MODEL["noam_factor"] / (MODEL["d_model"] * MODEL["warmup"]) ** 0.5

def run(command: list[str], commands: list[str], env: dict | None = None) -> Finished:
    """Run ``command`` from the repository root, measured (recorded in ``commands``)."""
    commands.append(shlex.join(command))
    return run_measured(command, env={**os.environ, **(env or {})}, cwd=REPO)


def portable(command: str, work: Path) -> str:
    """A recorded command as the report shows it, the same on every machine: the Python of the
    run is ``python``, the work directory ``$WORK``, an absolute path beside the repository
    (``../shared/...``) is written relative to it (the commands run from its root), and any
    other absolute path is reduced to its file name."""
    words = []
    for word in shlex.split(command):
        if word == sys.executable:
            word = "python"
        elif word == str(work) or word.startswith(f"{work}/"):
            rest = word[len(str(work)):]
            words.append("$WORK" + (shlex.quote(rest) if rest else ""))  # a shell expands it
            continue
        elif os.path.isabs(word) and Path(word).is_relative_to(REPO.parent):
            word = os.path.relpath(word, REPO)
        elif os.path.isabs(word):
            word = Path(word).name
        words.append(shlex.quote(word))
    return " ".join(words)


def bench_tfm(args: argparse.Namespace, work: Path, commands: list[str]) -> dict:
    data, s, t = args.data, args.src, args.tgt
    tfm = [sys.executable, "-m", "tfm"]
    threads = str(args.threads)
    result: dict = {}
    log("tfm: train-tokenizer")
    r = run([*tfm, "train-tokenizer", "--train", f"{data}/train", "-s", s, "-t", t,
             "--vocab-size", "8000", "-o", str(work / "tokenizer.json")], commands)
    result["train_tokenizer_s"] = round(r.seconds, 2)
    log("tfm: prepare")
    r = run([*tfm, "prepare", "--train", f"{data}/train", "--valid", f"{data}/val", "-s", s,
             "-t", t, "--tokenizer", str(work / "tokenizer.json"), "-o", str(work / "data")],
            commands)
    result["prepare_s"] = round(r.seconds, 2)
    log("tfm: training step throughput (bench/model.py)")
    r = run([sys.executable, "bench/model.py", "--data", str(data), "--src", s, "--tgt", t,
             "--tokenizer", str(work / "tokenizer.json"), "--json", str(work / "model.json")],
            commands, {"OMP_NUM_THREADS": threads})
    step = json.loads((work / "model.json").read_text())
    result["machine"] = step["machine"]
    result["step"] = step["train"]
    # fp32 like the peers; then, on a CPU with native bf16, `--precision auto` (a bf16 model
    # with fp32 master weights there; fp32 elsewhere, nothing more to measure).
    precisions = [("train", "fp32", "model")]
    if result["machine"].get("native_bf16"):
        precisions.append(("train_auto", "auto", "model-auto"))
    for key, precision, model in precisions:
        log(f"tfm: training for {args.train_minutes:g} min, --precision {precision}")
        r = run([*tfm, "train", "--data", str(work / "data"), "--output", str(work / model),
                 "--preset", "small", "--max-tokens", "4096", "--lr", f"{PEER_LR:.6g}",
                 "--warmup", str(MODEL["warmup"]), "--max-time", f"{args.train_minutes:g}",
                 "--valid-every", "1000000", "--save-every", "1000000", "--log-every", "10",
                 "--precision", precision, "--threads", threads, "--overwrite"], commands)
        result[key] = {**train_figures(work / model), "peak_rss_mb": round(r.peak_rss_mb, 1)}
    # fp32 like the peers; then `--precision auto` (bf16 weights on CPUs with native bf16),
    # where it differs.
    for key, precision in (("decode", "fp32"), ("decode_auto", "auto")):
        result[key] = {}
        for mode, beam in (("greedy", 1), ("beam5", 5)):
            log(f"tfm: decoding, {mode}, --precision {precision}")
            command = [sys.executable, "bench/decode.py", str(work / "model"),
                       f"{data}/test_2016_flickr.{s}.gz", f"{data}/test_2016_flickr.{t}.gz",
                       "--beam", str(beam), "--threads", threads, "--precision", precision]
            r = run(command, commands)
            result[key][mode] = {**json.loads(r.stdout.strip().splitlines()[-1]),
                                 "peak_rss_mb": round(r.peak_rss_mb, 1)}
            if result[key][mode]["precision"] == "float32" and key == "decode_auto":
                del result[key]  # auto is fp32 on this machine: nothing more to measure
                break
    # Where the time goes, in a run of its own (the profiler's records would inflate the
    # memory figures above).
    log("tfm: profiling beam 5 decoding")
    r = run([*command[:-6], "--beam", "5", "--threads", threads, "--precision", "fp32",
             "--profile"], commands)
    result["decode"]["beam5"]["profile"] = json.loads(
        r.stdout.strip().splitlines()[-1])["profile"]
    return result


def train_figures(model: Path) -> dict:
    """Median tokens/s over the logged windows of a training run (step 1, start-up, left out),
    its steps and seconds."""
    metrics = [json.loads(line) for line in (model / "metrics.jsonl").read_text().splitlines()]
    logged = [m for m in metrics if m["kind"] == "train"]
    windows = [m["tokens_per_s"] for m in logged if m["step"] > 1]
    return {"tokens_per_s": statistics.median(windows), "steps": logged[-1]["step"],
            "train_s": round(logged[-1]["elapsed"])}


def ratio(a: float | None, b: float | None) -> str:
    return f"{a / b:.2f}x" if a and b else "-"


def table(results: dict) -> list[str]:
    """Markdown rows: each toolkit's figures, and tfm's ratio to it (higher is better)."""
    tfm = results["tfm"]
    rows = ["| toolkit | train tok/s | train peak RSS MB | greedy sent/s | greedy pieces/s "
            "| beam 5 sent/s | beam 5 pieces/s | beam 5 peak RSS MB | BLEU greedy / beam 5 |",
            "|---|---|---|---|---|---|---|---|---|"]

    def row(name: str, entry: dict, decode: str = "decode") -> str:
        train, dec = entry.get("train", {}), entry.get(decode, {})
        g, b = dec.get("greedy", {}), dec.get("beam5", {})
        b_rss = b.get("peak_rss_mb") or entry.get("decode_peak_rss_mb")

        def f(d: dict, key: str, fmt: str = ",.0f") -> str:
            return format(d[key], fmt) if d.get(key) is not None else "-"
        return (f"| {name} | {f(train, 'tokens_per_s')} | {f(train, 'peak_rss_mb')} | "
                f"{f(g, 'sent_per_s')} | {f(g, 'pieces_per_s')} | {f(b, 'sent_per_s')} | "
                f"{f(b, 'pieces_per_s')} | {f({'m': b_rss}, 'm')} | "
                f"{f(g, 'bleu', '.2f')} / {f(b, 'bleu', '.2f')} |")

    rows.append(row("**tfm** (fp32)", tfm))
    if "train_auto" in tfm:
        rows.append(row("**tfm** (training `--precision auto`: bf16 model, fp32 master "
                        "weights)", {"train": tfm["train_auto"]}, "-"))
    if "decode_auto" in tfm:
        precision = tfm["decode_auto"]["beam5"]["precision"]
        rows.append(row(f"**tfm** (decoding `--precision auto`: {precision} weights)",
                        {"decode_auto": tfm["decode_auto"]}, "decode_auto"))
    for key, peer in results.get("peers", {}).get("peers", {}).items():
        name = PEER_NAMES[key] + (" (fp32)" if key == "ct2" else "")
        if "error" in peer:
            rows.append(f"| {name} | failed: {peer['error'].splitlines()[0][:80]} ||||||||")
            continue
        rows.append(row(name, peer))
        train, dec = peer.get("train", {}), peer.get("decode", {})

        def r(mode: str, key: str, dec: dict = dec) -> str:
            return ratio(tfm["decode"][mode][key], dec.get(mode, {}).get(key))
        speedup = ratio(tfm["train"]["tokens_per_s"], train.get("tokens_per_s"))
        rows.append(f"| tfm / {name} | {speedup} "
                    f"| | {r('greedy', 'sent_per_s')} | {r('greedy', 'pieces_per_s')} "
                    f"| {r('beam5', 'sent_per_s')} | {r('beam5', 'pieces_per_s')} | | |")
        if "train_auto" in tfm and train.get("tokens_per_s"):
            rows.append(f"| tfm `auto` / {name} | "
                        f"{ratio(tfm['train_auto']['tokens_per_s'], train['tokens_per_s'])} "
                        "| | | | | | | |")
    return rows


def targets(results: dict) -> list[str]:
    """The goals of the benchmark issues, each met or missed, and by how much."""
    tfm, peers = results["tfm"], results.get("peers", {}).get("peers", {})
    lines = []

    def goal(text: str, value: float | None, needed: float) -> None:
        if value is None:
            lines.append(f"- {text}: not measured (the peer failed or was not run)")
            return
        verdict = "met" if value >= needed else f"**missed** by {needed / value:.2f}x"
        lines.append(f"- {text}: {value:.2f}x (goal {needed:g}x): {verdict}")

    def get(peer: str, *keys: str) -> float | None:
        d = peers.get(peer, {})
        for k in keys:
            d = d.get(k, {}) if isinstance(d, dict) else {}
        return d or None

    pytorch = [v for v in (get("onmt", "train", "tokens_per_s"),
                           get("joey", "train", "tokens_per_s")) if v]
    goal("training tokens/s, tfm / best PyTorch peer",
         tfm["train"]["tokens_per_s"] / max(pytorch) if pytorch else None, 1.5)
    if "train_auto" in tfm:  # the peers train in fp32: their fastest on a CPU
        onmt = get("onmt", "train", "tokens_per_s")
        goal("training tokens/s, tfm `--precision auto` (bf16) / OpenNMT-py fp32",
             tfm["train_auto"]["tokens_per_s"] / onmt if onmt else None, 2.5)
    # Decoding speed is judged on one model's weights in every runtime (bench/same_weights.py):
    # here each toolkit decodes a model of its own, whose outputs differ in length and quality.
    return lines


def decoding_lines(results: dict) -> list[str]:
    """How each toolkit batched and timed its decoding: the settings behind the figures."""
    parts = [f"tfm: batches of {SearchOptions().batch_tokens:,} source tokens x beam (its "
             "default), time: in process around translation"]
    for key, peer in results.get("peers", {}).get("peers", {}).items():
        d = next(iter(peer.get("decode", {}).values()), None)
        if d:
            parts.append(f"{PEER_NAMES.get(key, key)}: batches of {d.get('batch', '?')}, "
                         f"time: {d.get('timing', '?')}")
    lines = ["Decoding batches and timing: " + "; ".join(parts) + "."]
    if "decode" in results.get("peers", {}).get("peers", {}).get("joey", {}):
        lines += ["", "JoeyNMT's Transformer decoder keeps no key/value cache: each step runs the "
                  "decoder over the whole prefix again, hence its decoding figures."]
    return lines


def profile_lines(results: dict) -> list[str]:
    rows = results["tfm"]["decode"]["beam5"].get("profile")
    if not rows:
        return []
    return ["Where tfm's beam-5 decoding time goes (fp32, torch profiler, self CPU time):", "",
            "| operator | share | calls |", "|---|---|---|",
            *(f"| `{r['op']}` | {r['share']:.1%} | {r['calls']:,} |" for r in rows)]


def write_report(results: dict, path: Path, commands: list[str]) -> None:
    tfm, machine = results["tfm"], results["tfm"]["machine"]
    step = tfm["step"]
    work = Path(results["work"])
    argv = portable(shlex.join(results["argv"]), work)
    lines = [
        "# Benchmarks: tfm and its peers, side by side",
        "",
        f"Measured by `python bench/run.py {argv}` on {results['date']}, "
        f"in one run on one machine: {machine['cpu']}, {results['threads']} threads, torch "
        f"{machine['torch']}, measured fp32 matmul peak {machine['fp32_gflops']} GFLOP/s. "
        "Multi30k en→de, the same joint 8k BPE for every toolkit, the same model (d_model 256, "
        "3+3 layers, 4 heads, FFN 1024, shared embeddings), batches of 4,096 tokens, fp32 "
        "(tfm also with `--precision auto` where the CPU computes bf16 natively), "
        f"each toolkit trained for {results['train_minutes']:g} minutes with the same schedule "
        f"(noam, warmup {MODEL['warmup']}, peak learning rate {PEER_LR:.2g}), then decoding "
        "test_2016_flickr (1,000 sentences, model load excluded). Training tokens/s count "
        "non-padding source+target tokens; pieces/s count target BPE pieces of the output (EOS "
        "excluded). These are short runs to measure speed, not quality (docs/multi30k.md has "
        "BLEU against training time); decoding speed depends on what a model has learnt (a "
        "model that ends sentences too early or never decodes faster or slower), so compare "
        "decoding between models of similar BLEU, and prefer "
        "pieces/s to sentences/s.",
        "",
        *table(results),
        "",
        *decoding_lines(results),
        "",
        "Against the goals: training here; decoding on the same weights in every runtime "
        "(bench/same_weights.py, the section above), since here each toolkit decodes a model "
        "of its own:",
        "",
        *targets(results),
        "",
        *profile_lines(results),
        "",
        f"tfm training step alone (bench/model.py, {step['max_tokens']}-token batches): "
        f"{step['tokens_per_s']:,.0f} tokens/s, {step['matmul_gflops']:.0f} GFLOP/s = "
        f"{step['matmul_gflops'] / machine['fp32_gflops']:.0%} of the measured fp32 matmul peak, "
        f"padding {step['padding_fraction']:.1%}. `train-tokenizer`: {tfm['train_tokenizer_s']} "
        f"s, `prepare`: {tfm['prepare_s']} s (command line, start-up included).",
        "",
        f"The whole run took {results['seconds'] / 60:.1f} minutes, installs of the peers' "
        "environments included where they were not there yet.",
        "",
        "All figures in this section are CPU figures (GPU figures: docs/BENCHMARKS.md, "
        "\"On a GPU\").",
        "",
        "The commands, in order, run from the repository root (`$WORK` is the work directory: "
        "`--work`, a temporary one by default):",
        "",
        "```",
        *(portable(command, work) for command in commands),
        "```",
    ]
    path.write_text("\n".join(lines) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_corpus_options(parser)
    parser.add_argument("--train-minutes", type=float, default=10.0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--peers", default="onmt,ct2,joey", help="'' to measure tfm alone")
    parser.add_argument("--work", type=Path, help="work directory (default: a temporary one)")
    parser.add_argument("--report", type=Path, default=REPO / "docs" / "BENCHMARKS.md")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    args.data = args.data.resolve()
    commands: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        work = (args.work or Path(tmp)).resolve()
        work.mkdir(parents=True, exist_ok=True)
        results = {"argv": sys.argv[1:], "work": str(work), "date": time.strftime("%Y-%m-%d"),
                   "threads": args.threads, "train_minutes": args.train_minutes}
        start = time.perf_counter()
        results["tfm"] = bench_tfm(args, work / "tfm", commands)
        if args.peers:
            log("peers (bench/peers.py)")
            run([sys.executable, "bench/peers.py", "--data", str(args.data), "--tokenizer",
                 str(work / "tfm" / "tokenizer.json"), "--work", str(work / "peers"),
                 "--peers", args.peers, "--train-minutes", f"{args.train_minutes:g}",
                 "--threads", str(args.threads), "--src", args.src, "--tgt", args.tgt,
                 "--json", str(work / "peers.json")], commands)
            results["peers"] = json.loads((work / "peers.json").read_text())
        results["seconds"] = round(time.perf_counter() - start)
    print("\n".join(table(results) + [""] + targets(results)))
    print(f"\n{results['tfm']['machine']['cpu']}; whole run {results['seconds'] / 60:.1f} min")
    if args.json:  # first: the measurements outlive a failure to write the report
        args.json.write_text(json.dumps({**results, "commands": commands}, indent=2) + "\n")
    write_report(results, args.report, commands)
    print(f"Wrote {args.report}")


if __name__ == "__main__":
    main()
