#!/usr/bin/env bash
# Multi30k (task 1) recipe: tokenizer, prepare, train, evaluate on val and test_2016_flickr.
#
#   bash recipes/multi30k.sh DATA_DIR SRC TGT [OUT_DIR] [extra `tfm train` options...]
#   bash recipes/multi30k.sh ../shared/data/multi30k en de runs/m30k-en-de
#
# DATA_DIR holds {train,val,test_2016_flickr}.{lang}.gz. The model is the `small` preset
# (d_model 256, 3+3 layers, 4 heads, d_ff 1024), trained for 45 minutes (--max-time; pass e.g.
# --max-time 120 to train longer) with batches of 1,024 positions and a peak learning rate of
# 1.5e-3 decaying linearly to zero at the end of that time (chosen on val), then scored on val
# and test_2016_flickr by sacrebleu on detokenised, cased output (and lowercased and
# Moses-tokenized as the Multi30k papers score, when sacremoses is installed). Decoding: beam
# 5, then the hypothesis the others agree with most (--mbr bleu; chosen on val). Where eflomal
# is installed (the align extra), one head of the model is trained towards word alignments
# (`tfm align`, --guided-alignment 0.05), for documents' inline tags; GUIDED=0 leaves it out, as
# the figures in docs/multi30k.md were taken. What it
# scores, per language pair and CPU: docs/multi30k.md. On a GPU (CUDA, where `tfm train` runs
# by default when torch sees one) it trains the steps the recipe's reference CPU trains in the
# 45 minutes instead (recipes/lib.sh, budget); STEPS=N trains N steps on any device. Run again with the same arguments after
# an interruption, it goes on where it stopped (recipes/lib.sh).
set -euo pipefail
data=${1:?usage: multi30k.sh DATA_DIR SRC TGT [OUT_DIR] [train options...]}
src=${2:?source language, e.g. en}
tgt=${3:?target language, e.g. de}
out=${4:-runs/multi30k-$src-$tgt}
shift $(( $# < 4 ? $# : 4 ))

source "$(dirname "$0")/lib.sh"

lock_out "$out"  # one recipe at a time in OUT_DIR
tokenizer_once "$data" "$src" "$tgt" "$out/tokenizer.json"
tfm prepare --train "$data/train" --valid "$data/val" -s "$src" -t "$tgt" \
    --tokenizer "$out/tokenizer.json" -o "$out/data"
# Guided alignment where eflomal is installed (GUIDED=0: without; recipes/lib.sh).
guided=$(guided_alignment_options "$out/data")
# Run again after an interruption, the recipe resumes the training (recipes/lib.sh).
if how_to_start "$out/model" model -; then
    tfm train --data "$out/data" --output "$out/model" "${start[@]}" --preset small \
        --max-tokens 1024 --lr 1.5e-3 --warmup 800 --lr-schedule linear $(budget 45 166 "${STEPS:-}" "$@") \
        --valid-every 1000 --save-every 500 --keep-last 40 $guided "$@"
    touch "$out/model.done"
fi
# With the moses extra (pip install "tfm[moses]"), also the lowercased, Moses-tokenized BLEU
# that Multi30k papers report, from the same translations.
lc_tok=$(lc_tok_option)
for split in val test_2016_flickr; do
    echo "== $split"
    tfm eval --model "$out/model" --src "$data/$split.$src.gz" --ref "$data/$split.$tgt.gz" \
        --beam 5 --mbr bleu --chrf $lc_tok --save-hyp "$out/$split.hyp"
done
