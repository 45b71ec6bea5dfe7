#!/usr/bin/env bash
# Multi30k (task 1) multilingual recipe: ONE model for en->de, de->en, en->fr and fr->en,
# driven by one run config, then scored per direction on val and test_2016_flickr, and on the
# two directions it never saw (de->fr, fr->de: zero-shot), directly and through English.
#
#   bash recipes/multi30k-multilingual.sh DATA_DIR [OUT_DIR] [extra `tfm train` options...]
#   bash recipes/multi30k-multilingual.sh ../shared/data/multi30k runs/m30k-multi
#
# DATA_DIR holds {train,val,test_2016_flickr}.{en,de,fr}.gz, one caption a line, aligned
# across the languages. The recipe writes OUT_DIR/run.yaml: the corpora (the multi-way
# training set read in four directions, proportionally: temperature 1), one joint BPE of
# 8,000 entries over the three languages plus a >>xx<< tag per target language, and the
# quick recipe's model and schedule (recipes/multi30k.sh: `small`, batches of 1,024
# positions, peak rate 1.5e-3 after 800 steps, linear decay) trained for 90 minutes: twice
# one bilingual quick recipe, half the compute of the four. Each of tfm train-tokenizer,
# prepare and train reads its part of that one file. Decoding as the quick recipe decodes
# (beam 5, --mbr bleu), the direction chosen with --target-lang. What it scores:
# docs/multi30k.md. Run again with the same arguments after an interruption, it goes on
# where it stopped (recipes/lib.sh).
#
# Against zero-shot output in the wrong language (docs/multi30k.md#zero-shot-the-levers):
# the target-language tag is the decoder's forced first token (LANGUAGE_TOKEN=decoder, the
# default since the levers' sweep; source: the tag before the source, as before), and the
# last quarter of the budget is a phase of random online back-translation
# (ONLINE_BT_SHARE=0.25, the default since the full-budget runs; 0: none, the best trained
# directions; ONLINE_BT_FROM=STEP starts it at a step instead; what it costs: the same
# section).
set -euo pipefail
data=${1:?usage: multi30k-multilingual.sh DATA_DIR [OUT_DIR] [train options...]}
out=${2:-runs/multi30k-multilingual}
shift $(( $# < 2 ? $# : 2 ))

source "$(dirname "$0")/lib.sh"
language_token=${LANGUAGE_TOKEN:-decoder}
online_bt_from=${ONLINE_BT_FROM:-0}
online_bt_share=${ONLINE_BT_SHARE:-0.25}
if [ "$online_bt_from" != 0 ]; then online_bt_share=0; fi

lock_out "$out"
data=$(cd "$data" && pwd)
cat > "$out/run.yaml" <<YAML
# One model, four directions of Multi30k (written by recipes/multi30k-multilingual.sh).
corpora:
  - train: $data/train
    valid: $data/val
    directions: [en-de, de-en, en-fr, fr-en]
train_tokenizer:
  vocab_size: 8000
  output: $out/tokenizer.json
prepare:
  tokenizer: $out/tokenizer.json
  output: $out/data
  language_token: $language_token
train:
  data: $out/data
  output: $out/model
  preset: small
  max_tokens: 1024
  lr: 1.5e-3
  warmup: 800
  lr_schedule: linear
  max_time: 90
  valid_every: 1000
  save_every: 500
  keep_last: 40
  online_bt_from: $online_bt_from
  online_bt_share: $online_bt_share
YAML
if [ -e "$out/tokenizer.json" ]; then
    echo "tokenizer: $out/tokenizer.json (written before)"
else
    tfm train-tokenizer --config "$out/run.yaml"
fi
tfm prepare --config "$out/run.yaml"
if how_to_start "$out/model" model -; then
    tfm train --config "$out/run.yaml" "${start[@]}" "$@"
    touch "$out/model.done"
fi
lc_tok=$(lc_tok_option)
off_target=$(off_target_option)
score() {  # score NAME SRC_FILE REF_FILE TARGET_LANG [SAVE_HYP]
    echo "== $1"
    tfm eval --model "$out/model" --src "$2" --ref "$3" --target-lang "$4" --beam 5 --mbr bleu \
        --chrf $lc_tok $off_target --save-hyp "$5"
}
for split in val test_2016_flickr; do
    for pair in "en de" "de en" "en fr" "fr en"; do
        set -- $pair
        score "$split $1-$2" "$data/$split.$1.gz" "$data/$split.$2.gz" "$2" "$out/$split.$1-$2.hyp"
    done
done
# Zero-shot: de->fr and fr->de were never trained. Directly (the source with the other
# language's tag), and through English with the same model (pivot: de->en, then en->fr).
split=test_2016_flickr
for pair in "de fr" "fr de"; do
    set -- $pair
    score "$split $1-$2 zero-shot, direct" "$data/$split.$1.gz" "$data/$split.$2.gz" "$2" \
        "$out/$split.$1-$2.direct.hyp"
    score "$split $1-$2 zero-shot, pivot $1-en" "$data/$split.$1.gz" "$data/$split.en.gz" en \
        "$out/$split.$1-en.pivot.hyp"
    score "$split $1-$2 zero-shot, pivot en-$2" "$out/$split.$1-en.pivot.hyp" "$data/$split.$2.gz" \
        "$2" "$out/$split.$1-$2.pivot.hyp"
done
