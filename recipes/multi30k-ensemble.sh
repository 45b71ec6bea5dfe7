#!/usr/bin/env bash
# Multi30k (task 1), the better recipe: several `small` models trained at once, side by side,
# each with its share of the cores, then decoded together (`tfm eval --ensemble`).
#
#   bash recipes/multi30k-ensemble.sh DATA_DIR SRC TGT [OUT_DIR] [extra `tfm train` options...]
#   MEMBERS=2 MINUTES=90 bash recipes/multi30k-ensemble.sh ../shared/data/multi30k en de runs/ens-en-de
#
# Same tokenizer, data, model and schedule as recipes/multi30k.sh (joint 8k BPE, the `small`
# preset, batches of 1,024 positions, peak learning rate 1.5e-3 after 800 warmup steps decaying
# linearly to zero at the end of the time), but MEMBERS models (default 2, seeds 1..MEMBERS)
# train at the same time for MINUTES minutes (default 90) with one CPU thread each on a 2-core
# machine: two 1-thread runs train more steps together than one 2-thread run does. Each keeps
# its best checkpoint by validation BLEU; they are then scored alone on val (beam 5) and
# together (`--ensemble`, their probabilities averaged at each step) on val and
# test_2016_flickr, beam 5 and --mbr bleu (chosen on val), cased sacreBLEU and (with
# sacremoses) the lowercased, Moses-tokenized BLEU of Multi30k papers. What it scores:
# docs/multi30k.md. On a GPU each trains the steps the reference CPU trains in MINUTES instead
# (recipes/lib.sh, budget); STEPS=N trains N steps on any device. Run again with the same arguments after an interruption, it goes on where
# it stopped (recipes/lib.sh).
set -euo pipefail
set -m  # each training run in a process group of its own (recipes/lib.sh)
data=${1:?usage: multi30k-ensemble.sh DATA_DIR SRC TGT [OUT_DIR] [train options...]}
src=${2:?source language, e.g. en}
tgt=${3:?target language, e.g. de}
out=${4:-runs/multi30k-ensemble-$src-$tgt}
shift $(( $# < 4 ? $# : 4 ))
members=${MEMBERS:-2}
minutes=${MINUTES:-90}
cores=$(nproc)
# THREADS: each member's threads (default: the cores shared out), for a caller that runs
# something else beside this recipe (multi30k-distill.sh with BOTH_WAYS=1).
threads=${THREADS:-$(( cores / members > 0 ? cores / members : 1 ))}

source "$(dirname "$0")/lib.sh"

lock_out "$out"  # one recipe at a time in OUT_DIR
tokenizer_once "$data" "$src" "$tgt" "$out/tokenizer.json"
tfm prepare --train "$data/train" --valid "$data/val" -s "$src" -t "$tgt" \
    --tokenizer "$out/tokenizer.json" -o "$out/data"

# The members train at once; Ctrl-C (or any failure) stops them all. Run again after an
# interruption, the recipe keeps the members it finished and resumes the others.
pids=()
training=()
trap 'stop_training "${pids[@]}"' INT TERM HUP EXIT
for seed in $(seq 1 "$members"); do
    member="$out/member$seed"
    how_to_start "$member" "member $seed" "$member.log" || continue
    tfm train --data "$out/data" --output "$member" "${start[@]}" --preset small \
        --max-tokens 1024 --lr 1.5e-3 --warmup 800 --lr-schedule linear $(budget "$minutes" 98 "${STEPS:-}" "$@") \
        --valid-every 1000 --save-every 500 --keep-last 40 --threads "$threads" --seed "$seed" \
        "$@" >> "$member.log" 2>&1 &
    pids+=($!)
    training+=("$member")
done
wait_training
trap - INT TERM HUP EXIT
if [ ${#training[@]} -eq 0 ] && [ -e "$out/test_2016_flickr.hyp" ]; then
    echo "scored before: $out/val.hyp, $out/test_2016_flickr.hyp"
    exit 0
fi

lc_tok=$(lc_tok_option)
others=()
for seed in $(seq 2 "$members"); do
    others+=(--ensemble "$out/member$seed")
done
for seed in $(seq 1 "$members"); do
    echo "== val, member $seed alone"
    tfm eval --model "$out/member$seed" --src "$data/val.$src.gz" --ref "$data/val.$tgt.gz" \
        --beam 5 $lc_tok
done
together="the $members members together"
[ "$members" -eq 1 ] && together="member 1, --mbr bleu"
for split in val test_2016_flickr; do
    echo "== $split, $together"
    tfm eval --model "$out/member1" "${others[@]}" --src "$data/$split.$src.gz" \
        --ref "$data/$split.$tgt.gz" --beam 5 --mbr bleu --chrf $lc_tok \
        --save-hyp "$out/$split.hyp"
done
