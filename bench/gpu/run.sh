#!/usr/bin/env bash
# The GPU work of issue #59 as one command, run on a lent GPU machine in the repository's root
# after bench/gpu/pack.sh has packed .gpu/ here (the device tool: command
# `bash bench/gpu/run.sh STAGE...`, carry [".gpu"]). Stages, in the order given:
#
#   tests     tests/test_cuda.py (CUDA graphs on and off; forced decoder starts in every path;
#             imported MarianMT and NLLB-200 models translated and fine-tuned; a decoder-side
#             language token trained with the multilingual levers; fp32 and bf16; tfm distill
#             with an SSRU student, tags placed by the attention, back-translation sampled and
#             by beam, over NCCL where there are two GPUs), the SSRU decoder's searches
#             (tests/test_students.py) and the CPU-side specifications of the graphs' search
#             (tests/test_graphs.py)
#   latency   bench/latency.py on .gpu/model: one sentence at a time, greedy and beam 5, step by
#             step against CUDA graphs, p50/p90/p99 over 200 sentences of test_2016_flickr
#   quick     recipes/multi30k.sh en→de as on the CPU, its steps those of the reference CPU
#   distill   recipes/multi30k-distill.sh en→de likewise (teachers, translations, students,
#             scores), timed as a whole
#
# Default: tests latency. Everything printed goes to $OUT/run.log too; a recipe's logs, scores,
# learning curves and final models come back as $OUT/NAME.tgz.part-* (NAME: RUN_NAME, default
# the stage's; split under the device tool's 16 MiB a file; `cat NAME.tgz.part-* | tar xz`
# here). A recipe's own variables (MEMBERS, ROUNDS, TEACHER_STEPS, STUDENT_STEPS, STEPS) reach
# it; give a variant its own RUN_NAME. A recipe is stopped after RECIPE_SECONDS (default 540)
# so that what it finished still comes back; run again on the same (warm) machine, it goes on
# where it stopped. Off the GPU machine (a dry run on a CPU), OUT defaults to runs/gpu/out and
# DATA to .gpu/data.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-runs/gpu/out}
DATA=${DATA:-.gpu/data}
mkdir -p "$OUT" runs/gpu
exec > >(tee -a "$OUT/run.log") 2>&1
export PYTHONUNBUFFERED=1

echo "== setup $(date -u '+%Y-%m-%d %H:%M:%S UTC')"
scratch=$(mktemp -d)  # the wheels installed, a `tfm` command
if compgen -G "${WHEELS:-.gpu/wheels}/*.whl" > /dev/null; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$scratch/site" "${WHEELS:-.gpu/wheels}"/*.whl || exit 1
    export PYTHONPATH="$scratch/site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
fi
if ! command -v tfm > /dev/null; then  # the checkout itself, run by that machine's python3
    export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"
    mkdir -p "$scratch/bin"
    printf '#!/bin/sh\nexec python3 -m tfm "$@"\n' > "$scratch/bin/tfm"
    chmod +x "$scratch/bin/tfm"
    export PATH="$scratch/bin:$PATH"
fi
nvidia-smi -L 2>/dev/null || echo "no nvidia-smi"
python3 -c 'import torch; print("torch", torch.__version__, "cuda" if torch.cuda.is_available() else "no cuda", torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
python3 -c 'import datasets, sacrebleu, tokenizers, typer; print("datasets", datasets.__version__, "tokenizers", tokenizers.__version__)' || exit 1

# pack_back STAGE DIR: DIR's logs, scores, curves and final models into
# $OUT/STAGE.tgz.part-*: not the checkpoints, training states or prepared data, and of the
# weights only the final models' (the quick recipe's model; the distillation's last students,
# where they are at most 2: what comes back is limited, and more would not fit).
pack_back() {
    local final="$(basename "$2")/student" rounds=${ROUNDS:-1}
    if [ "$rounds" -gt 1 ]; then final="$(basename "$2")/round$rounds/student"; fi
    if [ "$1" = quick ]; then final="$(basename "$2")/model/"; fi
    if [ "${MEMBERS:-2}" -gt 2 ]; then final=/none; fi
    (cd "$(dirname "$2")" && find "$(basename "$2")" \
        \( -name checkpoints -o -name data -o -name corpus \) -prune -o -type f \
        ! -name 'train_state*' ! -name last.safetensors ! -name '*.lock' ! -name 'train.*' \
        ! \( -name '*.safetensors' ! -path "$final*" \) \
        -print | tar czf - -T -) | split -b 15m - "$OUT/$(basename "$2").tgz.part-"
    ls -la "$OUT"
}

# recipe STAGE SCRIPT: the recipe en→de into runs/gpu/NAME (RUN_NAME, else STAGE), fp32 (a `small` model is faster in
# fp32 than in bf16 on a GPU: docs/BENCHMARKS.md), timed, stopped after RECIPE_SECONDS.
recipe() {
    local name=${RUN_NAME:-$1} script=$2 start
    start=$(date +%s)
    timeout --signal=INT "${RECIPE_SECONDS:-540}" bash "recipes/$script" "$DATA" en de \
        "runs/gpu/$name" --precision fp32
    echo "== $name: exit $?, $(( $(date +%s) - start )) s wall, recipe included end to end"
    pack_back "$1" "runs/gpu/$name"
}

ssru_on_gpu=test_an_ssru_model_decodes_on_a_gpu_as_on_the_cpu_in_both_searches
for stage in "${@:-tests latency}"; do
    for stage in $stage; do
        echo "== $stage $(date -u '+%H:%M:%S')"
        case $stage in
            tests) python3 -m pytest -q -p no:cacheprovider -n 0 tests/test_cuda.py \
                       tests/test_graphs.py "tests/test_students.py::$ssru_on_gpu" ;;
            latency) python3 bench/latency.py .gpu/model "$DATA/test_2016_flickr.en.gz" \
                         --sentences "${SENTENCES:-200}" --precision fp32 \
                         --json "$OUT/latency.json" ;;
            quick) recipe quick multi30k.sh ;;
            distill) recipe distill multi30k-distill.sh ;;
            *) echo "unknown stage $stage: tests, latency, quick or distill"; exit 2 ;;
        esac
    done
done
echo "== done $(date -u '+%H:%M:%S')"
