#!/usr/bin/env bash
# The eagle rows of issue 27, in one sitting on an otherwise idle machine (run under flock -x).
set -euo pipefail
cd "$(dirname "$0")/../../.."
OUT=benchmarks/results/eagle
lscpu | grep -E "Model name|^CPU\(s\)" > $OUT/cpu.txt
python benchmarks/proposers.py --workloads code,prose --methods none,draft,ngram,eagle --temperatures 1 \
    --couplings standard --k 4 --n 4 --new-tokens 128 --repeats 3 --batch 1 --out $OUT/proposers-b1
python benchmarks/proposers.py --workloads code,prose --methods none,draft,ngram,eagle --temperatures 1 \
    --couplings standard --k 4 --n 8 --new-tokens 128 --repeats 3 --batch 4 --out $OUT/proposers-b4
python benchmarks/proposer_cost.py --methods draft,eagle --k 4 --out $OUT/cost
python benchmarks/plot_positions.py $OUT/proposers-b1/proposers.json --methods eagle,draft,ngram \
    --out docs/img/acceptance_by_position.png
# what a deeper target would change: the head's cost against a 32-layer target of the same width
for shape in target-32-layers bundled-8-layers; do
  cfg=$OUT/shapes/$shape.json
  [ -f $cfg ] || cp specdec/bundled/target/config.json $cfg
  specdec analyze --what-if-shape $cfg --draft-shape $OUT/shapes/head-as-1-layer.json \
      --draft-dtype int8 --alpha 0.6,0.7,0.8 --batch-sizes 1,4 --out $OUT/what-if-$shape
done
