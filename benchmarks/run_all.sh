#!/usr/bin/env bash
# Every benchmark quoted in docs/ and models/README.md, in the order and with the settings used
# for the published tables. Run on an otherwise idle machine; results go to results/.
set -uo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1
mkdir -p results
run() { echo "== $* ($(date -u +%H:%M:%S))"; "$@" 2>&1 | tee "results/$1.log" | tail -n 40; }
step() { local name=$1; shift; echo "== $name: $* ($(date -u +%H:%M:%S))"; "$@" > "results/$name.log" 2>&1; echo "   rc=$? ($(date -u +%H:%M:%S))"; }
step decode_cost python benchmarks/decode_cost.py --out results/decode_cost
step ceiling     python benchmarks/ceiling.py --out results/ceiling
step model_card  python benchmarks/model_card.py --n 6 --new-tokens 96 --out results/model_card
step analyze     specdec analyze --quick --no-progress --threads 2 --out results/analyze
step peers       python benchmarks/peers.py --prompts 2 --reps 3 --ks 4,8 --threads 2 --profile --out results/peers
step proposers   python benchmarks/proposers.py --n 2 --new-tokens 96 --repeats 3 --out results/proposers
step adaptive    python benchmarks/adaptive.py --repeats 5 --out results/adaptive
step serve_load  python benchmarks/serve_load.py --concurrency 1,4,16,32 --max-tokens 32 --out results/serve
