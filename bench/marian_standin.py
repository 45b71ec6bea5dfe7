"""Hugging Face's side of the MarianMT import experiment (docs/IMPORT.md, issue #46).

No network here, so a downloaded OPUS-MT model is stood in for by one that Hugging Face's own
code trains: two SentencePiece models (source.spm, target.spm) and one joint vocab.json, as
OPUS-MT ships them; a MarianMTModel with OPUS-MT's layout (post-norm, swish, embeddings scaled,
shared and tied embeddings, `</s>`=0, `<unk>`=1, `<pad>`=last, decoding from `<pad>`), trained
by ``Seq2SeqTrainer`` on the CPU. Then the same code fine-tunes it for a time budget (beside
``tfm train --init-from`` on the imported copy) and translates a test set with ``generate``.

    python bench/marian_standin.py spm      --out runs/standin/hf --lines 0:20000
    python bench/marian_standin.py train    --init runs/standin/hf --out runs/standin/hf \
        --lines 0:20000 --minutes 20
    python bench/marian_standin.py translate --model runs/standin/hf --beam 5 \
        --input ../shared/data/multi30k/test_2016_flickr.en.gz --out runs/standin/hf.beam5.de

Needs ``pip install -c constraints.txt transformers sentencepiece accelerate`` (the Trainer's
own requirement); tfm itself needs none of them to import the result.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from harness import log
from hf_finetune import finetune, line_range, read_lines
from machine import cpu_name


def corpus(args) -> tuple[list[str], list[str]]:
    src = read_lines(args.data / f"train.{args.src}.gz")
    tgt = read_lines(args.data / f"train.{args.tgt}.gz")
    part = line_range(args.lines, len(src))
    return src[part], tgt[part]


def cmd_spm(args) -> None:
    """SentencePiece unigram models per side and OPUS-MT's joint vocab.json."""
    import sentencepiece as spm

    args.out.mkdir(parents=True, exist_ok=True)
    src, tgt = corpus(args)
    for name, lines in (("source", src), ("target", tgt)):
        text = args.out / f"{name}.txt"
        text.write_text("\n".join(lines) + "\n", encoding="utf-8")
        spm.SentencePieceTrainer.train(
            input=str(text), model_prefix=str(args.out / name), vocab_size=args.vocab_size,
            model_type="unigram", character_coverage=1.0, num_threads=1,
            hard_vocab_limit=False, minloglevel=2)
        (args.out / f"{name}.model").rename(args.out / f"{name}.spm")
        (args.out / f"{name}.vocab").unlink()
        text.unlink()
    vocab = {"</s>": 0, "<unk>": 1}
    for name in ("source", "target"):
        proc = spm.SentencePieceProcessor(model_file=str(args.out / f"{name}.spm"))
        for i in range(proc.get_piece_size()):
            piece = proc.id_to_piece(i)
            if not (proc.is_control(i) or proc.is_unknown(i)) and piece not in vocab:
                vocab[piece] = len(vocab)
    vocab["<pad>"] = len(vocab)
    (args.out / "vocab.json").write_text(json.dumps(vocab, ensure_ascii=False, indent=1),
                                         encoding="utf-8")
    log(f"{args.out}: source.spm, target.spm, vocab.json ({len(vocab)} entries)")


def new_model(directory: Path):
    """A MarianMTModel in OPUS-MT's layout, with tfm's `small` preset's sizes."""
    from transformers import GenerationConfig, MarianConfig, MarianMTModel

    vocab = json.loads((directory / "vocab.json").read_text(encoding="utf-8"))
    pad = vocab["<pad>"]
    config = MarianConfig(
        vocab_size=len(vocab), decoder_vocab_size=len(vocab), d_model=256,
        encoder_layers=3, decoder_layers=3, encoder_attention_heads=4,
        decoder_attention_heads=4, encoder_ffn_dim=1024, decoder_ffn_dim=1024,
        activation_function="swish", max_position_embeddings=512, scale_embedding=True,
        dropout=0.1, attention_dropout=0.0, activation_dropout=0.0,
        share_encoder_decoder_embeddings=True, tie_word_embeddings=True,
        pad_token_id=pad, eos_token_id=0, decoder_start_token_id=pad, forced_eos_token_id=0)
    model = MarianMTModel(config)
    model.generation_config = GenerationConfig(
        decoder_start_token_id=pad, eos_token_id=0, pad_token_id=pad, forced_eos_token_id=0,
        bad_words_ids=[[pad]], num_beams=4, max_length=512)
    return model


class Counting:
    """A data collator that counts the non-pad source and target tokens it hands out."""

    def __init__(self, collator):
        self.collator, self.tokens = collator, 0

    def __call__(self, features):
        batch = self.collator(features)
        self.tokens += int(batch["attention_mask"].sum()) + int((batch["labels"] != -100).sum())
        return batch


def cmd_train(args) -> None:
    """Seq2SeqTrainer for --minutes: peak LR after --warmup steps, then linear decay to zero
    at the end of the time budget (the schedule tfm's --lr-schedule linear --max-time uses)."""
    from transformers import (
        DataCollatorForSeq2Seq,
        MarianMTModel,
        MarianTokenizer,
    )

    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tok_dir = args.init
    tokenizer = MarianTokenizer(source_spm=str(tok_dir / "source.spm"),
                                target_spm=str(tok_dir / "target.spm"),
                                vocab=str(tok_dir / "vocab.json"))
    if (args.init / "config.json").is_file():
        model = MarianMTModel.from_pretrained(args.init)
    else:
        model = new_model(args.init)
    src, tgt = corpus(args)
    features = []
    for s, t in zip(src, tgt):
        enc = tokenizer(s, text_target=t, truncation=True, max_length=128)
        features.append({"input_ids": enc["input_ids"], "attention_mask": enc["attention_mask"],
                         "labels": enc["labels"]})
    collator = Counting(DataCollatorForSeq2Seq(tokenizer, model=model))
    steps, elapsed = finetune(
        model, features, collator, args, adam_eps=1e-9, bf16=args.bf16,
        progress=lambda seconds, lr: f"{collator.tokens / seconds:,.0f} tokens/s")
    args.out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(args.out)
    tokenizer.save_pretrained(args.out)
    report = {"cpu": cpu_name(), "threads": args.threads, "steps": steps,
              "minutes": round(elapsed / 60, 2), "tokens": collator.tokens,
              "tokens_per_s": round(collator.tokens / elapsed, 1), "lines": args.lines,
              "lr": args.lr, "batch_sentences": args.batch,
              "max_steps": args.max_steps, "bf16": args.bf16}
    (args.out / "train_report.json").write_text(json.dumps(report, indent=1))
    print(json.dumps(report))


def cmd_translate(args) -> None:
    """generate() over a file, in batches of --batch sentences; one line out per line in."""
    from transformers import MarianMTModel, MarianTokenizer

    torch.set_num_threads(args.threads)
    tokenizer = MarianTokenizer.from_pretrained(args.model)
    model = MarianMTModel.from_pretrained(args.model).eval()
    lines = read_lines(args.input)
    out, start = [], time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(lines), args.batch):
            enc = tokenizer(lines[i:i + args.batch], return_tensors="pt", padding=True)
            ids = model.generate(**enc, num_beams=args.beam, do_sample=False,
                                 length_penalty=args.length_penalty, max_new_tokens=256,
                                 early_stopping=False)
            out += tokenizer.batch_decode(ids, skip_special_tokens=True)
    seconds = time.perf_counter() - start
    args.out.write_text("".join(line.replace("\n", " ").strip() + "\n" for line in out),
                        encoding="utf-8")
    log(f"{len(lines)} lines in {seconds:.1f} s ({len(lines) / seconds:.1f} sentences/s)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("spm", "train", "translate"):
        p = sub.add_parser(name)
        p.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
        p.add_argument("--src", default="en")
        p.add_argument("--tgt", default="de")
        p.add_argument("--threads", type=int, default=1)
        p.add_argument("--seed", type=int, default=1)
    sub.choices["spm"].add_argument("--out", type=Path, required=True)
    sub.choices["spm"].add_argument("--lines", default="0:20000")
    sub.choices["spm"].add_argument("--vocab-size", type=int, default=8000)
    t = sub.choices["train"]
    t.add_argument("--init", type=Path, required=True,
                   help="a MarianMT directory, or one holding only the spm/vocab files")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--lines", default="0:20000")
    t.add_argument("--minutes", type=float, default=20)
    t.add_argument("--max-steps", type=int, default=0,
                   help="a step budget instead of --minutes (the schedule decays over it)")
    t.add_argument("--lr", type=float, default=1.5e-3)
    t.add_argument("--warmup", type=int, default=800)
    t.add_argument("--batch", type=int, default=64, help="sentences per batch")
    t.add_argument("--bf16", action="store_true", help="the Trainer's bf16 (autocast)")
    d = sub.choices["translate"]
    d.add_argument("--model", type=Path, required=True)
    d.add_argument("--input", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--beam", type=int, default=5)
    d.add_argument("--length-penalty", type=float, default=1.0)
    d.add_argument("--batch", type=int, default=32)
    args = parser.parse_args()
    {"spm": cmd_spm, "train": cmd_train, "translate": cmd_translate}[args.command](args)


if __name__ == "__main__":
    main()
