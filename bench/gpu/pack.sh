#!/usr/bin/env bash
# Packs, on this machine, what bench/gpu/run.sh needs on a lent GPU machine, into .gpu/ (kept
# out of git by .git/info/exclude; the device tool takes it along with `carry: [".gpu"]`):
#
#   bash bench/gpu/pack.sh DATA_DIR MODEL_DIR
#   bash bench/gpu/pack.sh ../shared/data/multi30k runs/multi30k-en-de/model
#
#   .gpu/wheels  tfm's dependencies that the GPU machine's image lacks (datasets, dill,
#                multiprocess, sacremoses), at constraints.txt's versions, for its Python 3.12
#   .gpu/data    DATA_DIR's Multi30k files ({train,val,test_2016_flickr}.{lang}.gz)
#   .gpu/model   MODEL_DIR's weights, config, manifest and tokenizer: the model whose
#                one-sentence latency bench/latency.py measures (a `small` model, en→de)
#
# Everything must fit the device tool's limit on what travels, with the repository
# (the device tool's README, Limits; this prints the size).
set -euo pipefail
data=${1:?usage: bench/gpu/pack.sh DATA_DIR MODEL_DIR}
model=${2:?usage: bench/gpu/pack.sh DATA_DIR MODEL_DIR}
cd "$(dirname "$0")/../.."
grep -qxF /.gpu/ .git/info/exclude || echo /.gpu/ >> .git/info/exclude
rm -rf .gpu
mkdir -p .gpu/wheels .gpu/data .gpu/model
pins=$(for name in datasets dill multiprocess sacremoses; do grep -i "^$name==" constraints.txt; done)
# shellcheck disable=SC2086  # one argument per pin
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
    --platform manylinux2014_x86_64 -d .gpu/wheels $pins
cp "$data"/{train,val,test_2016_flickr}.*.gz .gpu/data/
for file in model.safetensors config.json manifest.json tokenizer.json; do
    if [ -e "$model/$file" ]; then cp "$model/$file" .gpu/model/; fi
done
du -sh .gpu
echo "then: the device tool's run with command 'bash bench/gpu/run.sh' and carry [\".gpu\"]"
