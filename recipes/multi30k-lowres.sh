#!/usr/bin/env bash
# Back-translation where parallel text is scarce, simulated on Multi30k (task 1): 5,000
# parallel pairs, and the TGT side of the other 24,000 as monolingual text (their SRC side is
# never read). docs/BACKTRANSLATION.md walks through the same steps by hand.
#
#   bash recipes/multi30k-lowres.sh DATA_DIR SRC TGT [OUT_DIR] [extra `tfm train` options...]
#   bash recipes/multi30k-lowres.sh ../shared/data/multi30k en de runs/lowres-en-de
#
# What it trains, each the `small` preset for the same budget, MINUTES (default 10) of
# training on a CPU (on CUDA the steps the reference CPU trains in them, 166 a minute:
# recipes/lib.sh, budget; STEPS=N trains N steps anywhere):
#   reverse     TGT -> SRC on the 5,000 pairs (the back-translator)
#   base        SRC -> TGT on the 5,000 pairs alone (the floor)
#   ceiling     SRC -> TGT on all 29,000 real pairs (the ceiling)
#   bt-beam     the 5,000 + the 24,000 back-translated by beam search (beam 5)
#   bt-sample   ... by sampling (--beam 1 --sampling-topk 0)
#   bt-topk     ... by top-10 sampling (--beam 1 --sampling-topk 10)
#   bt-noise    ... by beam search with Edunov et al.'s noise (--noise)
#   bt-tagged   ... by beam search, the synthetic sources tagged <BT> (--synthetic-tag)
# and, where SRC_MONO names a file of SRC-language text (Multi30k has none besides the pairs)
# and SETTINGS has beam, one iteration: bt-beam (beam back-translation measured best with this
# little parallel text: docs/BENCHMARKS.md) translates SRC_MONO by beam 5 into synthetic
# TGT -> SRC pairs, a reverse model is trained on the 5,000 + them, and its beam-5
# back-translations train bt-iter1. SPLIT_MONO=1 makes both monolingual sides of Multi30k
# without a leak: of the other pairs, the first half's TGT side is the TGT text and the
# second half's SRC side the SRC text (SRC_MONO), so no sentence is seen in both languages.
# SETTINGS="beam tagged" trains only those settings. UPSAMPLE=N writes the real pairs N times
# beside the synthetic ones (the run config's `upsample`, as fairseq's --upsample-primary): the
# models are then bt-SETTING-upN (and the iteration's), beside those of the plain ratio.
# Each model is scored on val and test_2016_flickr (cased sacreBLEU and chrF, beam 5); the
# scores are gathered in OUT_DIR/scores.tsv; the measured runs are in docs/BENCHMARKS.md.
# Budget at the defaults on 2 CPU cores: 8 training runs of 10 minutes, 5 back-translations
# of 24,000 sentences, 16 evaluations. Run again after an interruption, it goes on where it
# stopped (recipes/lib.sh; tfm backtranslate keeps its finished chunks).
set -euo pipefail
data=${1:?usage: multi30k-lowres.sh DATA_DIR SRC TGT [OUT_DIR] [train options...]}
src=${2:?source language, e.g. en}
tgt=${3:?target language, e.g. de}
out=${4:-runs/lowres-$src-$tgt}
shift $(( $# < 4 ? $# : 4 ))
minutes=${MINUTES:-10}
settings=${SETTINGS:-beam sample topk noise tagged}
real=${REAL:-5000}
upsample=${UPSAMPLE:-1}
up=""  # the suffix of the back-translated models' names, where the real pairs are upsampled
if [ "$upsample" != 1 ]; then up="-up$upsample"; fi

source "$(dirname "$0")/lib.sh"

lock_out "$out"
mkdir -p "$out/corpus"
# The simulation's data: the first REAL pairs, and the TGT side of the rest. (sed reads its
# input to the end: `head` would close the pipe early, and pipefail would stop the recipe.)
if [ ! -e "$out/corpus/.done" ]; then
    for lang in "$src" "$tgt"; do
        zcat -f "$data/train.$lang.gz" | sed -n "1,${real}p" > "$out/corpus/real.$lang"
    done
    if [ "${SPLIT_MONO:-0}" = 1 ]; then
        total=$(zcat -f "$data/train.$tgt.gz" | wc -l)
        half=$(( real + (total - real) / 2 ))
        zcat -f "$data/train.$tgt.gz" | sed -n "$((real + 1)),${half}p" > "$out/corpus/mono.$tgt"
        zcat -f "$data/train.$src.gz" | tail -n +"$((half + 1))" > "$out/corpus/mono.$src"
    else
        zcat -f "$data/train.$tgt.gz" | tail -n +"$((real + 1))" > "$out/corpus/mono.$tgt"
    fi
    touch "$out/corpus/.done"
fi
if [ "${SPLIT_MONO:-0}" = 1 ]; then SRC_MONO=${SRC_MONO:-$out/corpus/mono.$src}; fi
echo "real pairs: $(wc -l < "$out/corpus/real.$src"); monolingual $tgt: $(wc -l < "$out/corpus/mono.$tgt")${SRC_MONO:+; monolingual $src: $(wc -l < "$SRC_MONO")}"

# The tokenizer of the 5,000 pairs (both sides): the only parallel text there is.
if [ ! -e "$out/tokenizer.json" ]; then
    tfm train-tokenizer --train "$out/corpus/real" -s "$src" -t "$tgt" --vocab-size 8000 \
        -o "$out/tokenizer.json"
fi

# train_model NAME DATA: the `small` preset on DATA for the budget, into OUT/NAME.
train_model() {
    local name=$1 dataset=$2
    shift 2
    if how_to_start "$out/$name" "$name" -; then
        tfm train --data "$dataset" --output "$out/$name" "${start[@]}" --preset small \
            --max-tokens 1024 --lr 1.5e-3 --warmup 400 --lr-schedule linear \
            $(budget "$minutes" 166 "${STEPS:-}" "${train_options[@]}") \
            --valid-every 500 --save-every 500 "${train_options[@]}"
        touch "$out/$name.done"
    fi
}
train_options=("$@")

# score NAME SRC TGT: val and test_2016_flickr of model OUT/NAME, into scores.tsv.
score() {
    local name=$1 from=$2 to=$3 split
    for split in val test_2016_flickr; do
        echo "== $name $split"
        if [ ! -s "$out/$name.$split.json" ]; then  # else scored before a resume
            tfm eval --model "$out/$name" --src "$data/$split.$from.gz" \
                --ref "$data/$split.$to.gz" --beam 5 --chrf --json > "$out/$name.$split.tmp"
            mv "$out/$name.$split.tmp" "$out/$name.$split.json"
        fi
        python3 -c 'import json, sys; s = {x["metric"]: round(x["score"], 2) for x in json.load(open(sys.argv[1]))}; print("\t".join([sys.argv[2], sys.argv[3], str(s.get("bleu")), str(s.get("chrf"))]))' \
            "$out/$name.$split.json" "$name" "$split" | tee -a "$out/scores.tsv"
    done
}
: > "$out/scores.tsv"

# The reverse model, the floor and the ceiling.
tfm prepare --train "$out/corpus/real" --valid "$data/val" -s "$tgt" -t "$src" \
    --tokenizer "$out/tokenizer.json" -o "$out/data-reverse"
tfm prepare --train "$out/corpus/real" --valid "$data/val" -s "$src" -t "$tgt" \
    --tokenizer "$out/tokenizer.json" -o "$out/data-base"
tfm prepare --train "$data/train" --valid "$data/val" -s "$src" -t "$tgt" \
    --tokenizer "$out/tokenizer.json" -o "$out/data-ceiling"
train_model reverse "$out/data-reverse"
train_model base "$out/data-base"
train_model ceiling "$out/data-ceiling"
score reverse "$tgt" "$src"
score base "$src" "$tgt"
score ceiling "$src" "$tgt"

# backtranslate SETTING OPTIONS...: the monolingual text as synthetic pairs OUT/bt/SETTING.
backtranslate() {
    local setting=$1
    shift
    mkdir -p "$out/bt"
    if [ ! -e "$out/bt/$setting.json" ]; then
        tfm backtranslate --reverse-model "$out/reverse" -i "$out/corpus/mono.$tgt" \
            --lang "$tgt" --into "$src" -o "$out/bt/$setting" --tokenizer "$out/tokenizer.json" "$@"
    fi
}

# train_with SETTING SYNTHETIC [TAG]: the 5,000 real (UPSAMPLE times) + the synthetic pairs,
# trained and scored as bt-SETTING (bt-SETTING-upN).
train_with() {
    local setting=$1$up synthetic=$2 tag=${3:-}
    cat > "$out/bt-$setting.yaml" <<EOF
corpora:
  - {train: $out/corpus/real, valid: $data/val, src_lang: $src, tgt_lang: $tgt${up:+, upsample: $upsample}}
  - {train: $synthetic, src_lang: $src, tgt_lang: $tgt, synthetic: true}
EOF
    tfm prepare --config "$out/bt-$setting.yaml" --tokenizer "$out/tokenizer.json" \
        -o "$out/data-bt-$setting" ${tag:+--synthetic-tag "$tag"}
    train_model "bt-$setting" "$out/data-bt-$setting"
    score "bt-$setting" "$src" "$tgt"
}

for setting in $settings; do
    case $setting in
        beam) backtranslate beam --beam 5; train_with beam "$out/bt/beam" ;;
        sample) backtranslate sample --beam 1 --sampling-topk 0 --sampling-seed 1
                train_with sample "$out/bt/sample" ;;
        topk) backtranslate topk --beam 1 --sampling-topk 10 --sampling-seed 1
              train_with topk "$out/bt/topk" ;;
        noise) backtranslate noise --beam 5 --noise; train_with noise "$out/bt/noise" ;;
        tagged) backtranslate beam --beam 5; train_with tagged "$out/bt/beam" "<BT>" ;;
        *) echo "error: SETTINGS: unknown setting $setting (beam sample topk noise tagged)" >&2
           exit 2 ;;
    esac
done

# One iteration (Hoang et al., 2018), where source-language text is given: bt-beam, the
# best forward model at this scale, and beam search both ways.
if [ -n "${SRC_MONO:-}" ] && [ -e "$out/bt-beam$up.done" ]; then
    if [ ! -e "$out/bt/forward$up.json" ]; then
        tfm backtranslate --reverse-model "$out/bt-beam$up" -i "$SRC_MONO" --lang "$src" \
            --into "$tgt" -o "$out/bt/forward$up" --beam 5
    fi
    cat > "$out/reverse-iter1$up.yaml" <<EOF
corpora:
  - {train: $out/corpus/real, valid: $data/val, src_lang: $tgt, tgt_lang: $src${up:+, upsample: $upsample}}
  - {train: $out/bt/forward$up, src_lang: $tgt, tgt_lang: $src, synthetic: true}
EOF
    tfm prepare --config "$out/reverse-iter1$up.yaml" --tokenizer "$out/tokenizer.json" \
        -o "$out/data-reverse-iter1$up"
    train_model "reverse-iter1$up" "$out/data-reverse-iter1$up"
    if [ ! -e "$out/bt/iter1$up.json" ]; then
        tfm backtranslate --reverse-model "$out/reverse-iter1$up" -i "$out/corpus/mono.$tgt" \
            --lang "$tgt" --into "$src" -o "$out/bt/iter1$up" --beam 5
    fi
    train_with iter1 "$out/bt/iter1$up"
fi
echo "== scores (model, split, BLEU, chrF): $out/scores.tsv"
cat "$out/scores.tsv"
# What each back-translated model recovers of the floor-to-ceiling gap, in BLEU:
# (model - base) / (ceiling - base), per split (n/a where the ceiling is not
# above the floor).
python3 - "$out/scores.tsv" <<'EOF_PY'
import sys
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1], encoding="utf-8")]
bleu = {(model, split): float(score) for model, split, score, _ in rows}
print("== recovered of the gap from base to ceiling (BLEU):")
for (model, split), score in bleu.items():
    if model.startswith("bt-") and ("base", split) in bleu and ("ceiling", split) in bleu:
        floor, ceiling = bleu["base", split], bleu["ceiling", split]
        share = f"{(score - floor) / (ceiling - floor):.0%}" if ceiling > floor else "n/a"
        print(f"{model}\t{split}\t{share}")
EOF_PY
