"""The NLLB stand-in (bench/nllb_standin.py) padded to NLLB-200's 256,206 vocabulary rows, to
measure what ``tfm trim`` buys where a vocabulary is far larger than the languages need
(docs/NLLB.md): its own rows kept, the others random at the same scale, its tokenizer as it is
(``tfm import`` gives the extra rows placeholder entries).

    python bench/nllb_wide.py --hf runs/nllb/hf --out runs/nllb/wide/hf
    tfm import runs/nllb/wide/hf -o runs/nllb/wide/tfm
    tfm trim runs/nllb/wide/tfm -o runs/nllb/wide/trimmed --corpus train.eng_Latn \\
        --corpus train.deu_Latn --corpus train.fra_Latn
"""

from __future__ import annotations

import argparse
import shutil
from pathlib import Path

import torch


def main() -> None:
    from transformers import AutoTokenizer, M2M100ForConditionalGeneration

    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--hf", type=Path, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--rows", type=int, default=256206)
    args = p.parse_args()
    shutil.rmtree(args.out, ignore_errors=True)
    model = M2M100ForConditionalGeneration.from_pretrained(args.hf)
    old = model.model.shared.weight.data
    torch.manual_seed(0)
    table = torch.randn(args.rows, old.size(1)) * old.std()
    table[:old.size(0)] = old
    model.resize_token_embeddings(args.rows)
    model.model.shared.weight.data.copy_(table)
    model.config.vocab_size = args.rows
    model.save_pretrained(args.out)
    AutoTokenizer.from_pretrained(args.hf).save_pretrained(args.out)
    print(f"{args.out}: {args.rows:,} rows, {sum(p.numel() for p in model.parameters()):,} "
          "parameters")


if __name__ == "__main__":
    main()
