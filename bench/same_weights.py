"""Same-weights decoding: ONE trained tfm model decoded by tfm, by CTranslate2 from its export
(fp32 and int8) and by Hugging Face Transformers ``generate()`` from its MarianMT export.

    python bench/same_weights.py --model runs/m30k-en-de/model \\
        --src ../shared/data/multi30k/test_2016_flickr.en.gz \\
        --ref ../shared/data/multi30k/test_2016_flickr.de.gz --out runs/same-weights.json

Greedy and beam 5, each engine (ENGINES below) in a process of its own (so that its peak RSS,
model load included, is its own), model load excluded from the timing, the first 20 sentences
translated once before timing. For each: sentences/s, target pieces/s (tfm's target BPE pieces
of the output, EOS excluded, the same count for every engine), peak RSS, BLEU, and how many output
lines are identical to tfm fp32's. Since the weights are the same, every speed ratio compares
the runtimes alone. Writes the JSON first, then prints a Markdown table and the goal lines.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# (name, engine, precision): what is decoded, in this order. tfm as `tfm translate` decodes
# (its default workers); "tfm -> CTranslate2": `tfm translate` on the export (tfm's CTranslate2
# engine, one pass by default); "CTranslate2": translate_batch as a careful user calls it
# (sentences sorted by length in groups of 32, tfm's length limit for each group); "one call":
# translate_batch with its defaults on the whole file (its own batching and length limit).
ENGINES = [
    ("tfm fp32", "tfm", "fp32"),
    ("tfm bf16", "tfm", "bf16"),  # only where the CPU has native bf16
    ("tfm int8", "tfm", "int8"),
    ("tfm -> CTranslate2 fp32", "ct2", "fp32"),
    ("tfm -> CTranslate2 int8", "ct2-int8", "fp32"),
    ("CTranslate2 fp32", "ct2-sorted", "fp32"),
    ("CTranslate2 int8", "ct2-int8-sorted", "fp32"),
    ("CTranslate2 fp32, one call", "ct2-direct", "fp32"),
    ("CTranslate2 int8, one call", "ct2-int8-direct", "fp32"),
    ("Transformers fp32", "hf", "fp32"),
]
MODES = {"greedy": 1, "beam 5": 5}
WARMUP = 20


def worker(args: argparse.Namespace) -> None:
    """Decode in this process and print one JSON line (the parent reads it)."""
    import torch

    torch.set_num_threads(args.threads)
    from tfm.allocator import keep_freed_memory
    from tfm.data.corpus import read_text_lines

    keep_freed_memory()  # as the tfm command does, for every engine of the comparison
    sources = read_text_lines(args.src, allow_empty=True)[: args.limit or None]
    if args.engine == "hf":
        decode = _transformers_decoder(args)
    elif args.engine.endswith("-direct"):
        decode = _ctranslate2_direct(args)
    elif args.engine.endswith("-sorted"):
        decode = _ctranslate2_sorted(args)
    else:
        from tfm.decoding.engines import load_translator

        # As `tfm translate` loads it: the default number of workers.
        translator = load_translator(Path(args.path), "cpu", args.precision, workers=None)
        options = translator.default_options(beam=args.beam, batch_tokens=args.batch_tokens)

        language = translator.languages.resolve(args.target_lang, args.source_lang)

        def decode(lines: list[str]) -> list[str]:
            return [t.text for t in translator.translate(lines, options, language=language)]

    decode(sources[:WARMUP])
    start = time.perf_counter()
    hypotheses = decode(sources)
    seconds = time.perf_counter() - start
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"seconds": seconds, "hypotheses": hypotheses, "peak_rss_mb": rss}))


def _marks(args: argparse.Namespace) -> tuple[list[str], list[str], list[str] | None]:
    """For a model of language codes: the tokens before each source, after its </s>, and the
    target prefix (the target code, taken off the hypotheses again); else none."""
    record = json.loads((Path(args.path) / "tfm_export.json").read_text())
    marking = record.get("language_marking") or {}
    if marking.get("where") != "language_codes":
        return [], [], None
    src = marking["spelling"].format(args.source_lang)
    tgt = marking["spelling"].format(args.target_lang)
    before, after = ([src], []) if marking["source_code"] == "prefix" else ([], [src])
    return before, after, [tgt]


def _ctranslate2_direct(args: argparse.Namespace):
    """CTranslate2's translate_batch as its documentation shows it: token strings in (tfm's
    tokenizer, the source ending with </s> as the export expects), the model's beam size and
    length penalty, batches of 2,048 tokens, everything else CTranslate2's defaults."""
    import ctranslate2

    from tfm.data.tokenizer import load_vocabularies, text_normalizer

    vocabs = load_vocabularies(Path(args.path) / "tokenizer.json")
    info = json.loads((Path(args.path) / "tfm_export.json").read_text())["generation"]
    translator = ctranslate2.Translator(args.path, device="cpu", intra_threads=args.threads)
    before, after, prefix = _marks(args)
    normalize = text_normalizer(vocabs.src)

    def decode(lines: list[str]) -> list[str]:
        texts = [normalize(line) for line in lines]
        tokens = [before + _pieces(vocabs.src, t) + ["</s>"] + after for t in texts]
        results = translator.translate_batch(
            tokens, beam_size=args.beam, length_penalty=info["length_penalty"],
            max_batch_size=2048, batch_type="tokens", max_decoding_length=256,
            target_prefix=[prefix] * len(tokens) if prefix else None)
        skip = len(prefix or [])
        return [vocabs.tgt.decode([vocabs.tgt.token_to_id(t) for t in r.hypotheses[0][skip:]]
                                  ).strip()
                if text else "" for r, text in zip(results, texts)]

    return decode


def _ctranslate2_sorted(args: argparse.Namespace):
    """translate_batch as a careful CTranslate2 user calls it: the sentences sorted by length
    in groups of 32 (its documented batching advice), each group's length limit tfm's for its
    longest source (a * tokens + b, EOS counted, capped at the model's positions), the model's
    beam and length penalty, ``intra_threads`` the threads given."""
    import ctranslate2

    from tfm.data.tokenizer import load_vocabularies, text_normalizer

    vocabs = load_vocabularies(Path(args.path) / "tokenizer.json")
    record = json.loads((Path(args.path) / "tfm_export.json").read_text())
    g, positions = record["generation"], record["model"]["max_positions"]
    translator = ctranslate2.Translator(args.path, device="cpu", intra_threads=args.threads)
    before, after, prefix = _marks(args)
    normalize = text_normalizer(vocabs.src)
    skip = len(prefix or [])

    def decode(lines: list[str]) -> list[str]:
        texts = [normalize(line) for line in lines]
        tokens = [before + _pieces(vocabs.src, t) + ["</s>"] + after for t in texts]
        order = sorted(range(len(lines)), key=lambda i: len(tokens[i]))
        out = [""] * len(lines)
        for start in range(0, len(order), 32):
            rows = [i for i in order[start:start + 32] if texts[i]]
            if not rows:
                continue
            longest = max(len(tokens[i]) for i in rows)
            limit = min(int(g["max_len_a"] * longest + g["max_len_b"]), positions)
            results = translator.translate_batch(
                [tokens[i] for i in rows], beam_size=args.beam,
                length_penalty=g["length_penalty"], max_decoding_length=max(1, limit - 1) + skip,
                target_prefix=[prefix] * len(rows) if prefix else None)
            for i, r in zip(rows, results):
                ids = [vocabs.tgt.token_to_id(t) for t in r.hypotheses[0][skip:]]
                out[i] = vocabs.tgt.decode(ids).strip()
        return out

    return decode


def _pieces(tok, text: str) -> list[str]:
    """The source's tokens as tfm reads them (its SentencePiece segmenter, if it has one)."""
    from tfm.data.tokenizer import encode_batch

    return [tok.id_to_token(i) for i in encode_batch(tok, [text])[0]] if text else []


def _transformers_decoder(args: argparse.Namespace):
    """generate() on the MarianMT export in batches of sentences sorted by length, with the
    export's generation_config (beam, length penalty, suppressed tokens) and tfm's length limit
    a * source + b of the longest source of each batch."""
    import torch
    from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(args.path)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.path).eval()
    info = json.loads((Path(args.path) / "tfm_export.json").read_text())["generation"]
    forced = {}
    if args.target_lang:  # an M2M100 export: the source's code, the target's forced first
        tokenizer.src_lang = _marks(args)[0][0] if _marks(args)[0] else _marks(args)[1][0]
        forced = {"forced_bos_token_id": tokenizer.convert_tokens_to_ids(_marks(args)[2][0])}

    @torch.inference_mode()
    def decode(lines: list[str]) -> list[str]:
        ids = [tokenizer(line)["input_ids"] for line in lines]
        order = sorted(range(len(lines)), key=lambda i: len(ids[i]))
        out = [""] * len(lines)
        for start in range(0, len(order), args.hf_batch):
            rows = [i for i in order[start:start + args.hf_batch] if lines[i].strip()]
            if not rows:
                continue
            batch = tokenizer([lines[i] for i in rows], return_tensors="pt", padding=True)
            longest = int(batch["attention_mask"].sum(dim=1).max())
            limit = int(info["max_len_a"] * longest + info["max_len_b"])
            generated = model.generate(**batch, num_beams=args.beam,
                                       max_new_tokens=limit + len(forced), do_sample=False,
                                       **forced)
            texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
            for i, text in zip(rows, texts):
                out[i] = text.strip()
        return out

    return decode


def run_worker(engine: str, path: Path, precision: str, beam: int, args: argparse.Namespace
               ) -> dict:
    command = [sys.executable, __file__, "--worker", "--engine", engine, "--path", str(path),
               "--precision", precision, "--beam", str(beam), "--src", args.src,
               "--threads", str(args.threads), "--limit", str(args.limit),
               "--batch-tokens", str(args.batch_tokens), "--hf-batch", str(args.hf_batch)]
    if args.target_lang:
        command += ["--source-lang", args.source_lang, "--target-lang", args.target_lang]
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads), HF_HUB_OFFLINE="1",
               TRANSFORMERS_OFFLINE="1", TOKENIZERS_PARALLELISM="false")
    done = subprocess.run(command, capture_output=True, text=True, env=env)
    if done.returncode != 0:
        raise SystemExit(f"{engine} {precision} beam {beam} failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def export_all(model: Path, workdir: Path, codes: bool = False) -> dict[str, Path]:
    from tfm.interop.ctranslate2 import export_ctranslate2
    from tfm.interop.m2m100 import export_m2m100
    from tfm.interop.marian import export_marian

    paths = {"tfm": model, "ct2": workdir / "ct2-fp32", "ct2-int8": workdir / "ct2-int8",
             "hf": workdir / "marian"}
    paths.update({"ct2-direct": paths["ct2"], "ct2-int8-direct": paths["ct2-int8"],
                  "ct2-sorted": paths["ct2"], "ct2-int8-sorted": paths["ct2-int8"]})
    export_ctranslate2(model, paths["ct2"], None, overwrite=True)
    export_ctranslate2(model, paths["ct2-int8"], "int8", overwrite=True)
    (export_m2m100 if codes else export_marian)(model, paths["hf"], overwrite=True)
    return paths


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, help="tfm model directory")
    parser.add_argument("--src", required=True)
    parser.add_argument("--ref")
    parser.add_argument("--out", type=Path, default=Path("runs/same-weights.json"))
    parser.add_argument("--workdir", type=Path, help="where the exports go "
                        "(default: beside --out)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--limit", type=int, default=0, help="decode only the first N lines")
    parser.add_argument("--batch-tokens", type=int, default=4096,
                        help="tfm and CTranslate2 batches: source tokens x beam")
    parser.add_argument("--hf-batch", type=int, default=32,
                        help="Transformers batches: sentences")
    parser.add_argument("--source-lang", help="a model of language codes: the source's code")
    parser.add_argument("--target-lang", help="a model of language codes: the target's code")
    parser.add_argument("--from-json", action="store_true",
                        help="only print the report of an earlier --out")
    # worker mode (internal)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--engine", help=argparse.SUPPRESS)
    parser.add_argument("--path", help=argparse.SUPPRESS)
    parser.add_argument("--precision", default="fp32", help=argparse.SUPPRESS)
    parser.add_argument("--beam", type=int, default=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        return worker(args)
    if args.from_json:
        return report(json.loads(args.out.read_text()))
    if args.model is None or args.ref is None:
        parser.error("--model and --ref are needed")

    from machine import describe
    from tfm.data.corpus import read_text_lines
    from tfm.decoding.scoring import bleu
    from tfm.device import cpu_has_native_bf16

    started = time.time()
    workdir = args.workdir or args.out.with_suffix("")
    paths = export_all(args.model, workdir, codes=args.target_lang is not None)
    references = read_text_lines(args.ref)[: args.limit or None]
    from tfm.data.tokenizer import load_vocabularies

    target = load_vocabularies(args.model / "tokenizer.json").tgt
    rows = []
    for mode, beam in MODES.items():
        baseline = None
        for name, engine, precision in ENGINES:
            if precision == "bf16" and not cpu_has_native_bf16():
                continue
            result = run_worker(engine, paths[engine], precision, beam, args)
            hyps = result.pop("hypotheses")
            pieces = sum(len(e.ids) for e in target.encode_batch(hyps, add_special_tokens=False))
            score = bleu(hyps, references)
            baseline = hyps if baseline is None else baseline
            rows.append({"mode": mode, "engine": name, "sentences": len(hyps),
                         "sent_per_s": len(hyps) / result["seconds"],
                         "pieces_per_s": pieces / result["seconds"],
                         "peak_rss_mb": result["peak_rss_mb"], "bleu": score.score,
                         "identical": sum(a == b for a, b in zip(hyps, baseline)),
                         "seconds": result["seconds"]})
            print(f"{mode:7} {name:18} {rows[-1]['sent_per_s']:7.1f} sent/s "
                  f"BLEU {score.score:.2f}", file=sys.stderr, flush=True)
    data = {"machine": describe(measure_peak=False), "threads": args.threads,
            "model": os.path.relpath(args.model, ROOT), "src": os.path.relpath(args.src, ROOT),
            "command": "python bench/same_weights.py " + " ".join(
                a if not Path(a).is_absolute() else os.path.relpath(a, ROOT)
                for a in sys.argv[1:]),
            "signature": score.signature, "rows": rows,
            "minutes": (time.time() - started) / 60}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    report(data)


def report(data: dict) -> None:
    """The Markdown table and the ratio and goal lines."""
    m = data["machine"]
    print(f"Machine: {m['cpu']}, {data['threads']} threads, torch {m['torch']}, native bf16: "
          f"{m['native_bf16']}. Run took {data['minutes']:.1f} min.\n")
    print("| mode | engine | sent/s | target pieces/s | peak RSS MB | BLEU | identical to tfm "
          "fp32 |")
    print("|---|---|---|---|---|---|---|")
    for r in data["rows"]:
        print(f"| {r['mode']} | {r['engine']} | {r['sent_per_s']:.1f} | "
              f"{r['pieces_per_s']:,.0f} | {r['peak_rss_mb']:.0f} | {r['bleu']:.2f} | "
              f"{r['identical']}/{r['sentences']} |")
    print(f"\nBLEU signature: {data['signature']}\n")
    rows = {(r["mode"], r["engine"]): r for r in data["rows"]}
    # (ours, theirs, goal): the ratios the decoding issue sets goals for.
    ratios = [("tfm fp32", "CTranslate2 fp32", 1.2), ("tfm int8", "CTranslate2 int8", 1.0),
              ("tfm bf16", "CTranslate2 fp32", None),
              ("tfm fp32", "CTranslate2 fp32, one call", None),
              ("tfm -> CTranslate2 fp32", "CTranslate2 fp32", 0.95),
              ("tfm -> CTranslate2 int8", "CTranslate2 int8", 0.95)]
    for mode in MODES:
        for ours, theirs, goal in ratios:
            a, b = rows.get((mode, ours)), rows.get((mode, theirs))
            if a and b:
                ratio = a["sent_per_s"] / b["sent_per_s"]
                verdict = "" if goal is None else (
                    f" (goal {goal}x): " + ("met" if ratio >= goal else "not met"))
                print(f"{mode}: {ours} / {theirs} sentences/s {ratio:.2f}x, pieces/s "
                      f"{a['pieces_per_s'] / b['pieces_per_s']:.2f}x{verdict}")
        tfm = rows.get((mode, "tfm fp32"))
        for name, _, _ in ENGINES[1:]:
            r = rows.get((mode, name))
            if r and tfm:
                print(f"{mode}: {name} BLEU {r['bleu']:.2f} vs tfm fp32 {tfm['bleu']:.2f} "
                      f"(difference {r['bleu'] - tfm['bleu']:+.2f}), identical lines "
                      f"{r['identical']}/{r['sentences']}")


if __name__ == "__main__":
    main()
