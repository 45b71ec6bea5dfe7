#!/usr/bin/env bash
# Multi30k (task 1), the 3-hour recipe: the two-model recipe, then the training set translated
# by its two models, then those two models trained on, from their weights, on the original
# pairs plus those translations (sequence-level knowledge distillation), decoded together.
#
#   bash recipes/multi30k-distill.sh DATA_DIR SRC TGT [OUT_DIR] [extra `tfm train` options...]
#   bash recipes/multi30k-distill.sh ../shared/data/multi30k en de runs/distill-en-de --precision fp32
#
# 1. Teachers: recipes/multi30k-ensemble.sh (two `small` models side by side, one thread each,
#    TEACHER_MINUTES, default 90), which also scores them on val and test_2016_flickr.
# 2. The training set's sources translated by both teachers together (beam 5): 8 minutes for
#    Multi30k's 29,000 sentences on 2 cores.
# 3. Students: each teacher trained on from its weights (`tfm train --init-from`, a fresh
#    learning-rate schedule: warmup to the same peak, linear decay), side by side as the
#    teachers were, for STUDENT_MINUTES (default 80, so that training and distilling take at
#    most 3 hours), on the original pairs and the same sources with the teachers' translations
#    (twice the pairs; seeds after the teachers', for the order of the batches). Students
#    trained from the teachers' weights scored higher than fresh ones (docs/multi30k.md).
# 4. Scores: each student alone on val (beam 5); on val, the students together and all the
#    models together (teachers too), beam 5 and --mbr bleu; the better of the two on val (lc-tok
#    BLEU where sacremoses is installed; the students on a tie within 0.1, at half the
#    decoding) then decodes test_2016_flickr: cased sacreBLEU, lc-tok BLEU, chrF2.
# BOTH_WAYS=1: one teacher each way instead of MEMBERS teachers (the TGT→SRC one is its own
# recipes/multi30k-ensemble.sh run, in OUT_DIR/reverse, side by side with the other). Step 2
# adds the training targets translated back by it (new sources for the same targets: data
# diversification, Nguyen et al. 2020), three times the pairs; the MEMBERS students all start
# from the SRC→TGT teacher; step 4's second candidate is the students together with the
# reverse teacher ranking their beam (beam 12, --mbr bleu, --reverse-model; beam 12 was chosen
# on val). It gained on val and not on test, so it is not the default.
# ROUNDS=N: N - 1 more rounds after step 3, each translating the training set with the last
# round's students together and training new students on from them (their own seeds, each from
# the student of its place) on the originals plus those translations; step 4 then scores the
# last round's students (and them with the teachers). Not the default: a lever for more compute
# (a step-matched GPU round found a second round's translations the best teacher of a fresh
# student: docs/multi30k-log.md), not yet chosen on val.
# On a GPU (CUDA, `tfm train`'s default where torch sees one) teachers and students train the
# steps the reference CPU trains in their minutes (recipes/lib.sh, budget); TEACHER_STEPS=N and
# STUDENT_STEPS=N set them on any device. The whole recipe as one GPU call: bench/gpu/run.sh.
# What each variant scores, per language pair and CPU: docs/multi30k.md.
# Run again with the same arguments after an interruption, it goes on where it stopped: the
# models it finished are kept, a stopped training run resumes, the translations are kept once
# complete (recipes/lib.sh).
set -euo pipefail
set -m  # each training run in a process group of its own (recipes/lib.sh)
data=${1:?usage: multi30k-distill.sh DATA_DIR SRC TGT [OUT_DIR] [train options...]}
src=${2:?source language, e.g. en}
tgt=${3:?target language, e.g. de}
out=${4:-runs/multi30k-distill-$src-$tgt}
shift $(( $# < 4 ? $# : 4 ))
members=${MEMBERS:-2}
cores=$(nproc)
threads=$(( cores / members > 0 ? cores / members : 1 ))
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
lock_out "$out"  # one recipe at a time in OUT_DIR

both_ways=${BOTH_WAYS:-0}
train_options=("$@")
pids=()
training=()
trap 'stop_training "${pids[@]}"' INT TERM HUP EXIT
if [ "$both_ways" = 1 ]; then
    echo "== 1. teachers: $src→$tgt and $tgt→$src side by side (logs: $out/teachers.log, $out/reverse.log)"
    mkdir -p "$out"
    MEMBERS=1 THREADS=$threads MINUTES=${TEACHER_MINUTES:-90} STEPS=${TEACHER_STEPS:-} \
        bash "$here/multi30k-ensemble.sh" "$data" "$src" "$tgt" "$out/teachers" "$@" \
        > "$out/teachers.log" 2>&1 &
    pids+=($!)
    MEMBERS=1 THREADS=$threads MINUTES=${TEACHER_MINUTES:-90} STEPS=${TEACHER_STEPS:-} \
        bash "$here/multi30k-ensemble.sh" "$data" "$tgt" "$src" "$out/reverse" "$@" \
        > "$out/reverse.log" 2>&1 &
    pids+=($!)
    for pid in "${pids[@]}"; do wait "$pid"; done
    pids=()
    grep -h -A 3 "^== val" "$out/teachers.log" "$out/reverse.log" || true
    teachers=(--model "$out/teachers/member1")
else
    echo "== 1. teachers"
    MEMBERS=$members MINUTES=${TEACHER_MINUTES:-90} STEPS=${TEACHER_STEPS:-} \
        bash "$here/multi30k-ensemble.sh" "$data" "$src" "$tgt" "$out/teachers" "$@"
    teachers=(--model "$out/teachers/member1")
    for seed in $(seq 2 "$members"); do
        teachers+=(--ensemble "$out/teachers/member$seed")
    done
fi

echo "== 2. the training set translated by the teachers"
# translate_once OUT INPUT MODEL_OPTIONS...: INPUT translated (beam 5) into OUT, unless done
# before. (Written under another name first: a translation that was stopped is done again.)
translate_once() {
    local output=$1 input=$2
    shift 2
    if [ -e "$output" ]; then
        echo "translated before: $output"
    else
        tfm translate "$@" --input "$input" --output "$output.partial" --beam 5 \
            "${decode_batch[@]}"
        mv "$output.partial" "$output"
    fi
}
# prepare_corpus DIR: DIR/corpus/train.{SRC,TGT}.gz prepared into DIR/data with the teachers'
# tokenizer.
prepare_corpus() {
    tfm prepare --train "$1/corpus/train" --valid "$data/val" -s "$src" -t "$tgt" \
        --tokenizer "$out/teachers/tokenizer.json" -o "$1/data"
}
# distilled_corpus DIR: the original pairs and the same sources again with their translations
# DIR/train.distilled.TGT as targets, prepared into DIR/data.
distilled_corpus() {
    { zcat -f "$data/train.$src.gz"; zcat -f "$data/train.$src.gz"; } | gzip -n > "$1/corpus/train.$src.gz"
    { zcat -f "$data/train.$tgt.gz"; cat "$1/train.distilled.$tgt"; } | gzip -n > "$1/corpus/train.$tgt.gz"
    prepare_corpus "$1"
}
decode_batch=()  # a GPU decodes larger batches faster; the output is the same whatever the size
student_budget=($(budget "${STUDENT_MINUTES:-80}" 102 "${STUDENT_STEPS:-}" "$@"))
if trains_on_cuda "$@"; then decode_batch=(--batch-tokens 16384); fi
translate_once "$out/train.distilled.$tgt" "$data/train.$src.gz" "${teachers[@]}"
mkdir -p "$out/corpus"
if [ "$both_ways" = 1 ]; then
    # The targets back-translated: new sources for the same targets (data diversification).
    translate_once "$out/train.back.$src" "$data/train.$tgt.gz" --model "$out/reverse/member1"
    { zcat -f "$data/train.$src.gz"; zcat -f "$data/train.$src.gz"; cat "$out/train.back.$src"; } \
        | gzip -n > "$out/corpus/train.$src.gz"
    { zcat -f "$data/train.$tgt.gz"; cat "$out/train.distilled.$tgt"; zcat -f "$data/train.$tgt.gz"; } \
        | gzip -n > "$out/corpus/train.$tgt.gz"
    prepare_corpus "$out"
else
    distilled_corpus "$out"
fi

# train_students DIR DATA: one student per model directory of the array `starts`, each
# trained on from it (`--init-from`, a fresh schedule) with DATA, side by side as the teachers
# were, into DIR/student$seed (seeds after every earlier model's); sets `students` to them.
next_seed=$(( members + 1 ))
train_students() {
    local dir=$1 data_dir=$2 i seed student from
    students=()
    pids=()
    training=()
    trap 'stop_training "${pids[@]}"' INT TERM HUP EXIT
    for i in "${!starts[@]}"; do
        seed=$(( next_seed + i ))
        student="$dir/student$seed"
        students+=("$student")
        # (A stopped run has its own weights: no --init-from.)
        from=$(basename "${starts[$i]}")  # member1: "teacher 1"; student5: "student 5"
        from=${from/member/teacher }
        from=${from/student/student }
        how_to_start "$student" "student $seed ($from trained on)" "$student.log" \
            --init-from "${starts[$i]}" || continue
        tfm train --data "$data_dir" --output "$student" "${start[@]}" --max-tokens 1024 \
            --lr 1.5e-3 --warmup 800 --lr-schedule linear \
            "${student_budget[@]}" \
            --valid-every 1000 --save-every 500 --keep-last 40 --threads "$threads" \
            --seed "$seed" "${train_options[@]}" >> "$student.log" 2>&1 &
        pids+=($!)
        training+=("$student")
    done
    wait_training
    trap - INT TERM HUP EXIT
    next_seed=$(( next_seed + ${#starts[@]} ))
}

echo "== 3. students"
starts=()
for i in $(seq 1 "$members"); do  # both ways: all from the one teacher
    starts+=("$out/teachers/member$([ "$both_ways" = 1 ] && echo 1 || echo "$i")")
done
train_students "$out" "$out/data"

# ROUNDS=N: N - 1 more rounds, each the training set translated by the last round's students
# together, and new students trained on from them with the originals plus those translations.
for round in $(seq 2 "${ROUNDS:-1}"); do
    echo "== 3.$round. round $round: the training set translated by round $(( round - 1 ))'s students"
    dir="$out/round$round"
    previous=(--model "${students[0]}")
    for student in "${students[@]:1}"; do previous+=(--ensemble "$student"); done
    mkdir -p "$dir/corpus"
    translate_once "$dir/train.distilled.$tgt" "$data/train.$src.gz" "${previous[@]}"
    distilled_corpus "$dir"
    starts=("${students[@]}")
    train_students "$dir" "$dir/data"
done

echo "== 4. scores"
lc_tok=$(lc_tok_option)
metric=$([ -n "$lc_tok" ] && echo bleu_lc_tok || echo bleu)
show() {  # the scores of `tfm eval --json` in $1, one a line
    python3 -c 'import json, sys
for m in json.load(open(sys.argv[1])):
    print(m.get("text", m["metric"]), " (" + m.get("signature", "") + ")")' "$1"
}
score() { python3 -c 'import json, sys; print(next(m["score"] for m in json.load(open(sys.argv[1])) if m["metric"] == sys.argv[2]))' "$1" "$metric"; }
for student in "${students[@]}"; do
    echo "== val, $(basename "$student") alone"
    tfm eval --model "$student" --src "$data/val.$src.gz" --ref "$data/val.$tgt.gz" \
        --beam 5 $lc_tok
done
# Two candidates, chosen between on val: the students together, and either every model
# together or (both ways) the students together with the reverse teacher ranking a wider beam.
together=(--model "${students[0]}")
for student in "${students[@]:1}"; do
    together+=(--ensemble "$student")
done
decode=(--beam 5 --mbr bleu)
other=("${together[@]}")
if [ "$both_ways" = 1 ]; then
    other_decode=(--beam 12 --mbr bleu --reverse-model "$out/reverse/member1")
    other_name="the $members students together, the $tgt→$src teacher ranking their beam of 12"
    other_file=reranked
else
    for seed in $(seq 1 "$members"); do
        other+=(--ensemble "$out/teachers/member$seed")
    done
    other_decode=("${decode[@]}")
    other_name="the $members students and the $members teachers together"
    other_file=all
fi
echo "== val, the $members students together"
tfm eval "${together[@]}" --src "$data/val.$src.gz" --ref "$data/val.$tgt.gz" "${decode[@]}" \
    --chrf $lc_tok --save-hyp "$out/val.students.hyp" --json > "$out/val.students.json"
show "$out/val.students.json"
echo "== val, $other_name"
tfm eval "${other[@]}" --src "$data/val.$src.gz" --ref "$data/val.$tgt.gz" "${other_decode[@]}" \
    --chrf $lc_tok --save-hyp "$out/val.$other_file.hyp" --json > "$out/val.$other_file.json"
show "$out/val.$other_file.json"
# The other candidate must beat the students by more than 0.1 on val to be worth its decoding
# (twice or three times as long); ties go to the students.
if python3 -c 'import sys; sys.exit(not float(sys.argv[1]) > float(sys.argv[2]) + 0.1)' \
        "$(score "$out/val.$other_file.json")" "$(score "$out/val.students.json")"; then
    chosen=("${other[@]}" "${other_decode[@]}"); name=$other_name
    cp "$out/val.$other_file.hyp" "$out/val.hyp"
else
    chosen=("${together[@]}" "${decode[@]}"); name="the $members students together"
    cp "$out/val.students.hyp" "$out/val.hyp"
fi
echo "chosen on val ($metric): $name"
echo "== test_2016_flickr, $name"
tfm eval "${chosen[@]}" --src "$data/test_2016_flickr.$src.gz" \
    --ref "$data/test_2016_flickr.$tgt.gz" --chrf $lc_tok \
    --save-hyp "$out/test_2016_flickr.hyp"
