#!/usr/bin/env bash
# Multi30k (task 1), fast students: the quick recipe's teacher (recipes/multi30k.sh, the
# 45-minute `small` model), then `tfm distill` makes each student shape of STUDENTS from it
# (docs/CLI.md#tfm-distill): the teacher translates the training sources once (beam 5, its
# saved defaults; kept in OUT_DIR/distill/teacher for every student), the pairs are filtered,
# each student trains on them, its shortlist is built, and a report compares it with the
# teacher on val and test_2016_flickr (BLEU, chrF, sentences/s, peak memory; greedy and beam;
# fp32, int8, int8 with the shortlist): OUT_DIR/distill/report-NAME.json.
#
#   bash recipes/multi30k-students.sh DATA_DIR SRC TGT [OUT_DIR] [extra options...]
#   bash recipes/multi30k-students.sh ../shared/data/multi30k en de runs/students-en-de
#   bash recipes/multi30k-students.sh ../shared/data/multi30k de en runs/students-de-en
#
# The extra options go to the teacher's `tfm train` and to each `tfm distill` (the student's
# training and shape options: the recipe's own come first, these win).
# STUDENTS: the shapes, a preset each, `+ssru` for an SSRU decoder (default
#   "student-3-2+ssru student-3-1 student-tiny+ssru": fast and close to the teacher, the
#   fastest, the closest (docs/BENCHMARKS.md, "Fast students"); a shape without an SSRU is
#   also exported to CTranslate2 and measured there, with the teacher, where ctranslate2 is
#   installed); STUDENT_MINUTES:
#   each student's training (default 40); STUDENT_STEPS=N: N steps instead, on any device;
#   TEACHER=DIR: distil this model directory instead of training the quick recipe's teacher.
#   (student-6-1 and student-12-1 are not among the defaults: in en->de both were slower than
#   student-3-1 and further from the teacher; STUDENTS runs them.)
# Time budget, on 2 CPU cores: the teacher 45 minutes (recipes/multi30k.sh) and its scoring;
# the training sources translated once; each student STUDENT_MINUTES (3 x 40), its shortlist,
# exports and report; about 3 hours in all with the teacher (the measured parts are in
# docs/BENCHMARKS.md, "Fast students"). On a GPU (CUDA) each training run trains the steps
# the reference CPU trains in its minutes (recipes/lib.sh, budget; for the students the
# `small` model's rate a minute, not measured for them): minutes of GPU time, unmeasured.
# Students start from the teacher's weights (tfm distill's default; --no-teacher-init: fresh).
# Run again with the same arguments after an interruption, it goes on where it stopped: the
# teacher kept (or its training resumed), the translations kept (a stopped translation from
# its last chunk), a student's training from its last checkpoint, a finished student kept.
set -euo pipefail
data=${1:?usage: multi30k-students.sh DATA_DIR SRC TGT [OUT_DIR] [options...]}
src=${2:?source language, e.g. en}
tgt=${3:?target language, e.g. de}
out=${4:-runs/multi30k-students-$src-$tgt}
shift $(( $# < 4 ? $# : 4 ))
here=$(cd "$(dirname "$0")" && pwd)
source "$here/lib.sh"
lock_out "$out"  # one recipe at a time in OUT_DIR

if [ -n "${TEACHER:-}" ]; then
    teacher=$TEACHER
    echo "== 1. the teacher: $teacher"
else
    teacher="$out/teacher/model"
    echo "== 1. the teacher: recipes/multi30k.sh into $out/teacher"
    bash "$here/multi30k.sh" "$data" "$src" "$tgt" "$out/teacher" "$@"
fi

student_budget=($(budget "${STUDENT_MINUTES:-40}" 166 "${STUDENT_STEPS:-}" "$@"))
for shape in ${STUDENTS:-student-3-2+ssru student-3-1 student-tiny+ssru}; do
    preset=${shape%+ssru}
    student=(--preset "$preset")
    if [ "$preset" != "$shape" ]; then student+=(--decoder-self-attn ssru)
    # CTranslate2 cannot run an SSRU decoder; the other shapes (and the teacher) are exported
    # and measured in it too, where it is installed (the `export` extra).
    elif python -c "import ctranslate2" 2>/dev/null; then student+=(--export ctranslate2); fi
    echo "== 2. the student $shape"
    # Run again, `tfm distill` skips what it finished and resumes what it did not.
    tfm distill --teacher "$teacher" --train "$data/train" --valid "$data/val" \
        --test "$data/test_2016_flickr" -s "$src" -t "$tgt" -o "$out/distill" "${student[@]}" \
        --max-tokens 1024 --lr 1.5e-3 --warmup 800 --lr-schedule linear \
        "${student_budget[@]}" --valid-every 1000 --save-every 500 "$@"
done
