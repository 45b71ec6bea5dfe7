"""The NLLB-200 / M2M100 end to end (issue #66, docs/NLLB.md): an NLLB-layout model trained by
Hugging Face's code (bench/nllb_standin.py) imported by ``tfm import``; test_2016_flickr
translated by tfm and by transformers' ``generate`` in several directions (BLEU of both,
identical lines); fine-tuned en->de by ``tfm train --init-from`` beside the same fine-tuning
by Seq2SeqTrainer for the same minutes (tokens/s, BLEU after); trimmed to en/de/fr by
``tfm trim`` (rows kept, peak memory and tokens/s of fine-tuning, sentences/s of decoding,
lines identical to the untrimmed model). Each step's figures go to OUT/e2e.json, with the CPU.

    python bench/nllb_e2e.py --hf runs/nllb/hf --out runs/nllb/e2e                # every step
    python bench/nllb_e2e.py --hf runs/nllb/hf --out runs/nllb/e2e --steps translate

Timed steps must have the machine to themselves (no test run, training or helper beside).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from pathlib import Path

from harness import log, run_measured
from machine import cpu_name

CODES = {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn", "cs": "ces_Latn"}
PY = sys.executable
TFM = str(Path(sys.executable).with_name("tfm"))
STANDIN = str(Path(__file__).resolve().parent / "nllb_standin.py")


def lines_of(path: Path) -> list[str]:
    opener = gzip.open if str(path).endswith(".gz") else open
    with opener(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def write_lines(path: Path, lines: list[str]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def bleu(hyp: Path, ref: list[str]) -> float:
    import sacrebleu

    return round(sacrebleu.corpus_bleu(lines_of(hyp), [ref]).score, 2)


def same(a: Path, b: Path) -> int:
    return sum(x == y for x, y in zip(lines_of(a), lines_of(b)))


class E2E:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args, self.out = args, args.out
        self.out.mkdir(parents=True, exist_ok=True)
        self.record_path = self.out / "e2e.json"
        self.record = json.loads(self.record_path.read_text()) if self.record_path.is_file() \
            else {}
        self.record["cpu"] = cpu_name()
        self.tfm_model = self.out / "tfm"

    def save(self) -> None:
        self.record_path.write_text(json.dumps(self.record, indent=2) + "\n")

    def test_file(self, lang: str) -> Path:
        """The test split of ``lang``, unpacked, named by the model's code."""
        path = self.out / "test" / f"test.{CODES[lang]}"
        if not path.is_file():
            lines = lines_of(self.args.data / f"test_2016_flickr.{lang}.gz")
            write_lines(path, lines[:self.args.test_lines or None])
        return path

    def step_import(self) -> None:
        done = run_measured([TFM, "import", str(self.args.hf), "-o", str(self.tfm_model),
                             "--overwrite"])
        self.record["import"] = {"seconds": round(done.seconds, 1),
                                 "peak_rss_mb": round(done.peak_rss_mb)}
        log(f"imported in {done.seconds:.1f} s")

    def translate_tfm(self, model: Path, src: str, tgt: str, out: Path, *extra: str) -> dict:
        done = run_measured([TFM, "translate", "--model", str(model), "--source-lang",
                             CODES[src], "--target-lang", CODES[tgt], "--beam",
                             str(self.args.beam), "--input", str(self.test_file(src)),
                             "--output", str(out), *extra])
        n = len(lines_of(out))
        return {"seconds": round(done.seconds, 1), "sentences_per_s": round(n / done.seconds, 1),
                "peak_rss_mb": round(done.peak_rss_mb)}

    def translate_hf(self, model: Path, src: str, tgt: str, out: Path) -> dict:
        done = run_measured([PY, STANDIN, "translate", "--model", str(model), "--src-lang", src,
                             "--tgt-lang", tgt, "--beam", str(self.args.beam), "--input",
                             str(self.test_file(src)), "--out", str(out),
                             "--early-stopping"])
        n = len(lines_of(out))
        return {"seconds": round(done.seconds, 1), "sentences_per_s": round(n / done.seconds, 1)}

    def step_translate(self) -> None:
        rows = {}
        for direction in self.args.directions.split(","):
            src, tgt = direction.split("-")
            ref = lines_of(self.args.data / f"test_2016_flickr.{tgt}.gz")[
                :self.args.test_lines or None]
            hf_out = self.out / "translate" / f"hf.{direction}"
            fairseq_out = self.out / "translate" / f"tfm-no-stop-early.{direction}"
            default_out = self.out / "translate" / f"tfm.{direction}"
            hf_out.parent.mkdir(parents=True, exist_ok=True)
            hf = self.translate_hf(self.args.hf, src, tgt, hf_out)
            # generate()'s rule (done once the beam's hypotheses have ended) and its limit
            fairseq = self.translate_tfm(self.tfm_model, src, tgt, fairseq_out,
                                         "--no-stop-early", "--max-len-a", "0",
                                         "--max-len-b", "255")
            default = self.translate_tfm(self.tfm_model, src, tgt, default_out)
            rows[direction] = {
                "transformers": {**hf, "bleu": bleu(hf_out, ref)},
                "tfm --no-stop-early": {**fairseq, "bleu": bleu(fairseq_out, ref),
                                        "identical_to_transformers": same(fairseq_out, hf_out)},
                "tfm": {**default, "bleu": bleu(default_out, ref),
                        "identical_to_transformers": same(default_out, hf_out)},
                "lines": len(ref)}
            log(f"{direction}: {json.dumps(rows[direction])}")
            self.record["translate"] = rows
            self.save()

    def corpus(self, name: str, split: str, langs: list[str]) -> Path:
        """``OUT/corpus/NAME.CODE`` of the Multi30k ``split`` for each of ``langs``."""
        prefix = self.out / "corpus" / name
        for lang in langs:
            path = prefix.with_name(f"{name}.{CODES[lang]}")
            if not path.is_file():
                write_lines(path, lines_of(self.args.data / f"{split}.{lang}.gz"))
        return prefix

    def fine_tune_tfm(self, model: Path, name: str) -> dict:
        train = self.corpus("train", "train", ["en", "de"])
        valid = self.corpus("valid", "val", ["en", "de"])
        data, out = self.out / f"{name}.data", self.out / f"{name}.model"
        run_measured([TFM, "prepare", "--train", str(train), "--valid", str(valid), "-s",
                      CODES["en"], "-t", CODES["de"], "--tokenizer",
                      str(model / "tokenizer.json"), "-o", str(data), "--force"])
        done = run_measured([TFM, "train", "--data", str(data), "--output", str(out),
                             "--init-from", str(model), "--max-time", str(self.args.minutes),
                             "--lr", str(self.args.lr), "--warmup", "100", "--precision",
                             "fp32", "--valid-every", "100000", "--save-every", "100000",
                             "--max-tokens", "4096", "--overwrite"])
        metrics = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
        steps = [m for m in metrics if m.get("kind") == "train"]
        rates = sorted(m["tokens_per_s"] for m in steps[1:]) or [0.0]
        ref = lines_of(self.args.data / "test_2016_flickr.de.gz")[:self.args.test_lines or None]
        hyp = self.out / f"{name}.test.en-de"
        decode = self.translate_tfm(out, "en", "de", hyp)
        return {"steps": steps[-1]["step"] if steps else 0,
                "tokens_per_s_median": round(rates[len(rates) // 2]),
                "peak_rss_mb": round(done.peak_rss_mb), "seconds": round(done.seconds, 1),
                "bleu_after": bleu(hyp, ref), "decode": decode}

    def fine_tune_hf(self) -> dict:
        out = self.out / "ft-hf.model"
        done = run_measured([PY, STANDIN, "train", "--init", str(self.args.hf), "--out",
                             str(out), "--minutes", str(self.args.minutes), "--directions",
                             "en-de", "--lr", str(self.args.lr), "--warmup", "100"])
        report = json.loads(done.output.strip().splitlines()[-1])
        ref = lines_of(self.args.data / "test_2016_flickr.de.gz")[:self.args.test_lines or None]
        hyp = self.out / "ft-hf.test.en-de"
        self.translate_hf(out, "en", "de", hyp)
        return {**report, "peak_rss_mb": round(done.peak_rss_mb),
                "bleu_after": bleu(hyp, ref)}

    def step_finetune(self) -> None:
        self.record["finetune"] = {"minutes": self.args.minutes, "lr": self.args.lr,
                                   "tfm": self.fine_tune_tfm(self.tfm_model, "ft-tfm")}
        self.save()
        self.record["finetune"]["transformers"] = self.fine_tune_hf()
        log(json.dumps(self.record["finetune"]))
        self.save()

    def step_trim(self) -> None:
        corpus = self.corpus("train", "train", ["en", "de", "fr"])
        trimmed = self.out / "trimmed"
        done = run_measured([TFM, "trim", str(self.tfm_model), "-o", str(trimmed),
                             "--overwrite", *[arg for lang in ("en", "de", "fr") for arg in (
                                 "--corpus", str(corpus.with_name(f"train.{CODES[lang]}")))]])
        full_out, trim_out = self.out / "trim.full.en-de", self.out / "trim.trimmed.en-de"
        full = self.translate_tfm(self.tfm_model, "en", "de", full_out)
        small = self.translate_tfm(trimmed, "en", "de", trim_out)
        info = json.loads((trimmed / "config.json").read_text())
        self.record["trim"] = {
            "rows_before": info["provenance"]["rows_before"],
            "rows_kept": info["provenance"]["rows_kept"], "seconds": round(done.seconds, 1),
            "decode_full": full, "decode_trimmed": small,
            "identical_lines": same(full_out, trim_out), "lines": len(lines_of(full_out)),
            "finetune_trimmed": self.fine_tune_tfm(trimmed, "ft-trimmed")}
        log(json.dumps(self.record["trim"]))
        self.save()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--hf", type=Path, required=True, help="the stand-in (nllb_standin.py)")
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
    p.add_argument("--directions", default="en-de,de-en,en-fr,fr-de")
    p.add_argument("--steps", default="import,translate,finetune,trim")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--minutes", type=float, default=5.0, help="of each fine-tuning")
    p.add_argument("--lr", type=float, default=5e-4)
    p.add_argument("--test-lines", type=int, default=0, help="only the first N test lines")
    args = p.parse_args()
    e2e = E2E(args)
    for step in args.steps.split(","):
        getattr(e2e, f"step_{step}")()
        e2e.save()
    print(json.dumps(e2e.record, indent=2))


if __name__ == "__main__":
    main()
