"""Hugging Face's side of the NLLB-200 / M2M100 import experiment (docs/IMPORT.md).

No network here, so a downloaded NLLB-200 checkpoint is stood in for by one that Hugging Face's
own code builds and trains in NLLB's layout: one SentencePiece BPE model
(``sentencepiece.bpe.model``, nmt_nfkc, no byte fallback) over the English, German and French
sides together; ``NllbTokenizer`` built from it by transformers (``<s>`` 0, ``<pad>`` 1,
``</s>`` 2, ``<unk>`` 3, the SentencePiece pieces shifted by one, then NLLB's 202 language codes
and ``<mask>`` last, as NLLB-200 is published; ``--mask-before-codes`` keeps transformers 5.24's
own order from a bare SentencePiece model, ``<mask>`` right after the pieces), saved as
``tokenizer.json``; an ``M2M100ForConditionalGeneration`` with NLLB's
layout (pre-norm with final LayerNorms, relu, sinusoidal positions, scaled and tied embeddings,
decoding from ``</s>`` with the target language's code forced first) at tfm's ``small`` size,
trained by ``Seq2SeqTrainer`` on the CPU on all the given Multi30k directions mixed (the corpus
is multi-parallel). Then ``generate`` translates a test set.

    python bench/nllb_standin.py spm       --out runs/nllb/hf
    python bench/nllb_standin.py train     --init runs/nllb/hf --out runs/nllb/hf --minutes 20
    python bench/nllb_standin.py train     --init runs/nllb/hf --out runs/nllb/hf --minutes 20 \
        --warmup 50                          # once more: --init a model continues training it
    python bench/nllb_standin.py translate --model runs/nllb/hf --src-lang en --tgt-lang de \
        --beam 5 --input ../shared/data/multi30k/test_2016_flickr.en.gz --out runs/nllb/hf.beam5.de
    python bench/nllb_standin.py bleu --hyp runs/nllb/hf.beam5.de \
        --ref ../shared/data/multi30k/test_2016_flickr.de.gz

Each pair is tokenized as NLLB does (``legacy_behaviour`` false): the source as
``[src_code] X </s>``, the labels as ``[tgt_code] Y </s>``; shifted right by the model's own
``shift_tokens_right``, they give the decoder inputs ``</s> [tgt_code] Y``; ``generate`` starts
from ``</s>`` (the config's ``decoder_start_token_id``) with ``forced_bos_token_id`` the target
code.

Needs ``pip install -c constraints.txt transformers sentencepiece accelerate`` (the Trainer's
own requirement) and ``protobuf`` (transformers reads the SentencePiece model's proto with it to
build the tokenizer); tfm itself needs none of them to import the result.
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

# Multi30k's languages and NLLB's codes for them.
LANGUAGE_CODES = {"en": "eng_Latn", "de": "deu_Latn", "fr": "fra_Latn", "cs": "ces_Latn"}
SPM_NAME = "sentencepiece.bpe.model"  # NllbTokenizer's vocab_file


def code(lang: str) -> str:
    return LANGUAGE_CODES.get(lang, lang)  # "en" or an NLLB code itself


def directions(spec: str) -> list[tuple[str, str]]:
    pairs = [tuple(d.split("-")) for d in spec.split(",") if d]
    for pair in pairs:
        if len(pair) != 2 or pair[0] == pair[1]:
            raise SystemExit(f"bad direction {'-'.join(pair)!r} (expected like en-de)")
    return pairs


def load_tokenizer(directory: Path):
    from transformers import NllbTokenizer

    return NllbTokenizer.from_pretrained(directory)


def cmd_spm(args) -> None:
    """One SentencePiece BPE model over the --langs train sides, and NllbTokenizer from it."""
    import sentencepiece as spm
    from transformers import AddedToken, NllbTokenizer
    from transformers.models.nllb.tokenization_nllb import FAIRSEQ_LANGUAGE_CODES

    args.out.mkdir(parents=True, exist_ok=True)
    lines = []
    for lang in args.langs.split(","):
        side = read_lines(args.data / f"train.{lang}.gz")
        lines += side[line_range(args.lines, len(side))]
    # SentencePiece's default ids (<unk> 0, <s> 1, </s> 2, no <pad>) are NLLB's: transformers'
    # NllbConverter drops those three and puts <s> <pad> </s> <unk> first, fairseq's order.
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(lines), model_prefix=str(args.out / "sentencepiece.bpe"),
        vocab_size=args.vocab_size, model_type="bpe", normalization_rule_name="nmt_nfkc",
        character_coverage=args.character_coverage, byte_fallback=False, num_threads=1,
        minloglevel=2)
    (args.out / "sentencepiece.bpe.vocab").unlink()
    # From a directory holding only sentencepiece.bpe.model, transformers 5.24 builds the
    # tokenizers-backed NllbTokenizer through the NllbConverter; the codes must be given as
    # extra_special_tokens, or the SentencePiece model's control pieces take their place.
    codes = list(FAIRSEQ_LANGUAGE_CODES)
    kwargs = {"extra_special_tokens": codes, "model_max_length": 1024}
    if args.mask_before_codes:  # transformers 5.24's own order from a bare SentencePiece model
        tokenizer = NllbTokenizer.from_pretrained(args.out, **kwargs)
    else:  # NLLB-200's as published: the codes right after the pieces, then <mask>, last
        tokenizer = NllbTokenizer.from_pretrained(args.out, mask_token=None, **kwargs)
        tokenizer.add_special_tokens(
            {"mask_token": AddedToken("<mask>", lstrip=True, normalized=True, special=True)})
    tokenizer.save_pretrained(args.out)
    tokenizer = load_tokenizer(args.out)  # as every later step reads it
    missing = [c for c in codes if tokenizer.convert_tokens_to_ids(c) == tokenizer.unk_token_id]
    if missing or tokenizer.mask_token != "<mask>":
        raise SystemExit(f"{args.out}: the tokenizer lacks {missing or '<mask>'}")

    # The tokenizer must segment exactly as SentencePiece does (its ids shifted by one).
    proc = spm.SentencePieceProcessor(model_file=str(args.out / SPM_NAME))
    checked = differ = 0
    for lang in args.langs.split(","):
        for line in read_lines(args.data / f"val.{lang}.gz"):
            ids = tokenizer(line, add_special_tokens=False)["input_ids"]
            checked += 1
            differ += ids != [i + 1 for i in proc.encode(line)]
    special = {t: tokenizer.convert_tokens_to_ids(t) for t in (
        "<s>", "<pad>", "</s>", "<unk>", "eng_Latn", "deu_Latn", "fra_Latn", "ces_Latn",
        codes[0], codes[-1], "<mask>")}
    ids = sorted(tokenizer.convert_tokens_to_ids(codes))
    report = {"vocab_size": len(tokenizer), "spm_pieces": proc.get_piece_size(),
              "ids": special, "codes": f"{len(codes)} at {ids[0]}..{ids[-1]}",
              "mask": "after the codes" if special["<mask>"] > ids[-1] else "before the codes",
              "val_lines_checked": checked, "val_lines_differing_from_spm": differ}
    print(json.dumps(report, ensure_ascii=False))
    log(f"{args.out}: {SPM_NAME}, tokenizer.json ({len(tokenizer)} entries)")


def new_model(tokenizer):
    """An M2M100ForConditionalGeneration in NLLB-200's layout, with tfm's `small` sizes."""
    from transformers import GenerationConfig, M2M100Config, M2M100ForConditionalGeneration

    assert (tokenizer.bos_token_id, tokenizer.pad_token_id, tokenizer.eos_token_id) == (0, 1, 2)
    config = M2M100Config(
        vocab_size=len(tokenizer), d_model=256, encoder_layers=3, decoder_layers=3,
        encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=1024,
        decoder_ffn_dim=1024, activation_function="relu", dropout=0.1, attention_dropout=0.1,
        activation_dropout=0.0, encoder_layerdrop=0.0, decoder_layerdrop=0.0, init_std=0.02,
        max_position_embeddings=1024, scale_embedding=True, use_cache=True,
        pad_token_id=1, bos_token_id=0, eos_token_id=2, decoder_start_token_id=2,
        tie_word_embeddings=True, tokenizer_class="NllbTokenizer")
    model = M2M100ForConditionalGeneration(config)
    # NLLB-200's generation_config.json
    model.generation_config = GenerationConfig(
        bos_token_id=0, decoder_start_token_id=2, eos_token_id=2, pad_token_id=1, max_length=200)
    return model


class Counting:
    """A data collator that counts the non-pad source and target tokens it hands out, and adds
    the decoder inputs: M2M100 has no ``prepare_decoder_input_ids_from_labels`` for
    DataCollatorForSeq2Seq to call, and with label smoothing the Trainer takes the labels away
    before the model could shift them itself."""

    def __init__(self, collator, config):
        self.collator, self.config, self.source, self.target = collator, config, 0, 0

    def __call__(self, features):
        from transformers.models.m2m_100.modeling_m2m_100 import shift_tokens_right

        batch = self.collator(features)
        if "decoder_input_ids" not in batch:  # the model's own shift: -100 becomes <pad>
            batch["decoder_input_ids"] = shift_tokens_right(
                batch["labels"], self.config.pad_token_id, self.config.decoder_start_token_id)
        self.source += int(batch["attention_mask"].sum())
        self.target += int((batch["labels"] != -100).sum())
        return batch


def features(tokenizer, args) -> list[dict]:
    """Every --lines line of every direction, tokenized as NLLB does."""
    sides = {}
    out = []
    for src, tgt in directions(args.directions):
        for lang in (src, tgt):
            if lang not in sides:
                side = read_lines(args.data / f"train.{lang}.gz")
                sides[lang] = side[line_range(args.lines, len(side))]
        tokenizer.src_lang, tokenizer.tgt_lang = code(src), code(tgt)
        enc = tokenizer(sides[src], text_target=sides[tgt], truncation=True,
                        max_length=args.max_length)
        out += [{"input_ids": i, "attention_mask": m, "labels": y}
                for i, m, y in zip(enc["input_ids"], enc["attention_mask"], enc["labels"])]
        first = enc["labels"][0]
        if first[0] != tokenizer.convert_tokens_to_ids(code(tgt)) or first[-1] != 2:
            raise SystemExit(f"{src}-{tgt}: labels {first} are not [tgt_code] ... </s>")
    return out


def cmd_train(args) -> None:
    """Seq2SeqTrainer for --minutes: peak LR after --warmup steps, then linear decay to zero
    at the end of the time budget (the schedule tfm's --lr-schedule linear --max-time uses)."""
    from transformers import (
        DataCollatorForSeq2Seq,
        M2M100ForConditionalGeneration,
    )
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    tokenizer = load_tokenizer(args.init)
    if (args.init / "config.json").is_file():
        model = M2M100ForConditionalGeneration.from_pretrained(args.init)
    else:
        model = new_model(tokenizer)
    train = features(tokenizer, args)
    tokenizer.src_lang, tokenizer.tgt_lang = "eng_Latn", None  # as saved: NLLB's defaults
    collator = Counting(DataCollatorForSeq2Seq(tokenizer, model=model), model.config)
    sample = collator(train[-2:])
    collator.source = collator.target = 0
    start_ids = sample["decoder_input_ids"]
    log(f"{len(train):,} pairs from {args.directions}; e.g. source "
        f"{tokenizer.convert_ids_to_tokens(sample['input_ids'][0][:3].tolist())}..., labels "
        f"{tokenizer.convert_ids_to_tokens(sample['labels'][0][:3].tolist())}..., decoder "
        f"inputs {tokenizer.convert_ids_to_tokens(start_ids[0][:3].tolist())}...")
    params = sum(p.numel() for p in model.parameters())
    log(f"{params:,} parameters, vocab {model.config.vocab_size}, {args.threads} threads, "
        f"{cpu_name()}")
    steps, elapsed = finetune(
        model, train, collator, args, adam_eps=1e-8, logging_steps=100,
        progress=lambda seconds, lr: f"{collator.target / seconds:,.0f} target tokens/s, "
                                     f"lr {lr:.2e}")
    args.out.mkdir(parents=True, exist_ok=True)
    model.config.use_cache = True  # the Trainer turns it off; NLLB-200's config has it on
    model.save_pretrained(args.out)  # model.safetensors, config.json, generation_config.json
    tokenizer.save_pretrained(args.out)
    if args.out != args.init and (args.init / SPM_NAME).is_file():
        (args.out / SPM_NAME).write_bytes((args.init / SPM_NAME).read_bytes())
    report = {"cpu": cpu_name(), "threads": args.threads, "steps": steps,
              "minutes": round(elapsed / 60, 2), "pairs": len(train),
              "directions": args.directions, "lines": args.lines,
              "target_tokens": collator.target, "source_tokens": collator.source,
              "target_tokens_per_s": round(collator.target / elapsed, 1),
              "tokens_per_s": round((collator.source + collator.target) / elapsed, 1),
              "epochs": round(collator.target / sum(len(f["labels"]) for f in train), 3),
              "lr": args.lr, "warmup": args.warmup, "batch_sentences": args.batch,
              "max_steps": args.max_steps}
    (args.out / "train_report.json").write_text(json.dumps(report, indent=1))
    log(f"{steps} steps in {elapsed / 60:.1f} min, {report['target_tokens_per_s']:,.0f} target "
        f"tokens/s ({report['tokens_per_s']:,.0f} source + target) on {cpu_name()}")
    print(json.dumps(report))


def cmd_translate(args) -> None:
    """generate() over a file, in batches of --batch sentences; one line out per line in."""
    from transformers import M2M100ForConditionalGeneration

    torch.set_num_threads(args.threads)
    tokenizer = load_tokenizer(args.model)
    tokenizer.src_lang = code(args.src_lang)
    forced = tokenizer.convert_tokens_to_ids(code(args.tgt_lang))
    model = M2M100ForConditionalGeneration.from_pretrained(args.model).eval()
    lines = read_lines(args.input)
    if args.lines:
        lines = lines[line_range(args.lines, len(lines))]
    out, start = [], time.perf_counter()
    with torch.inference_mode():
        for i in range(0, len(lines), args.batch):
            enc = tokenizer(lines[i:i + args.batch], return_tensors="pt", padding=True)
            ids = model.generate(**enc, forced_bos_token_id=forced, num_beams=args.beam,
                                 do_sample=False, length_penalty=args.length_penalty,
                                 max_new_tokens=args.max_new_tokens,
                                 early_stopping=args.early_stopping)
            out += tokenizer.batch_decode(ids, skip_special_tokens=True)
    seconds = time.perf_counter() - start
    args.out.write_text("".join(line.replace("\n", " ").strip() + "\n" for line in out),
                        encoding="utf-8")
    log(f"{args.src_lang}->{args.tgt_lang}: {len(lines)} lines in {seconds:.1f} s "
        f"({len(lines) / seconds:.1f} sentences/s), beam {args.beam}")


def cmd_bleu(args) -> None:
    """sacreBLEU (13a, cased) of --hyp against --ref."""
    import sacrebleu

    hyp, ref = read_lines(args.hyp), read_lines(args.ref)
    if len(hyp) != len(ref):
        raise SystemExit(f"{args.hyp}: {len(hyp)} lines, {args.ref}: {len(ref)}")
    bleu = sacrebleu.corpus_bleu(hyp, [ref])
    print(f"{args.hyp}\t{bleu.score:.2f}\t{bleu}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("spm", "train", "translate", "bleu"):
        p = sub.add_parser(name)
        p.add_argument("--data", type=Path, default=Path("../shared/data/multi30k"))
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--seed", type=int, default=1)
    s = sub.choices["spm"]
    s.add_argument("--out", type=Path, required=True)
    s.add_argument("--langs", default="en,de,fr", help="train sides to learn it on together")
    s.add_argument("--lines", default="0:", help="lines A:B of each side (default: all)")
    s.add_argument("--vocab-size", type=int, default=8000)
    s.add_argument("--character-coverage", type=float, default=1.0)
    s.add_argument("--mask-before-codes", action="store_true",
                   help="<mask> right after the pieces and the codes after it, as transformers "
                        "5.24 orders them from a bare SentencePiece model (default: the codes "
                        "first and <mask> last, as NLLB-200 is published)")
    t = sub.choices["train"]
    t.add_argument("--init", type=Path, required=True,
                   help="an M2M100/NLLB directory, or one holding only the tokenizer files")
    t.add_argument("--out", type=Path, required=True)
    t.add_argument("--directions", default="en-de,de-en,en-fr,fr-en,de-fr,fr-de")
    t.add_argument("--lines", default="0:", help="lines A:B of train (default: all)")
    t.add_argument("--max-length", type=int, default=128, help="tokens per side, at most")
    t.add_argument("--minutes", type=float, default=20)
    t.add_argument("--max-steps", type=int, default=0,
                   help="a step budget instead of --minutes (the schedule decays over it)")
    t.add_argument("--lr", type=float, default=2e-3)
    t.add_argument("--warmup", type=int, default=200)
    t.add_argument("--batch", type=int, default=128,
                   help="sentences per batch (128: about 2k source + 2k target tokens)")
    d = sub.choices["translate"]
    d.add_argument("--model", type=Path, required=True)
    d.add_argument("--src-lang", default="en", help="en, de, fr, cs or an NLLB code")
    d.add_argument("--tgt-lang", default="de")
    d.add_argument("--input", type=Path, required=True)
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--lines", default="", help="only lines A:B of --input")
    d.add_argument("--beam", type=int, default=5)
    d.add_argument("--length-penalty", type=float, default=1.0)
    d.add_argument("--max-new-tokens", type=int, default=256)
    d.add_argument("--batch", type=int, default=32)
    d.add_argument("--early-stopping", action="store_true",
                   help="done once num_beams hypotheses have ended (M2M100's own setting, "
                   "fairseq's rule, tfm's --no-stop-early); default: transformers' heuristic")
    b = sub.choices["bleu"]
    b.add_argument("--hyp", type=Path, required=True)
    b.add_argument("--ref", type=Path, required=True)
    args = parser.parse_args()
    {"spm": cmd_spm, "train": cmd_train, "translate": cmd_translate,
     "bleu": cmd_bleu}[args.command](args)


if __name__ == "__main__":
    main()
