#!/usr/bin/env bash
# Round 13 of issue 37 (its outputs: the `-r13-` files beside this one): the round, then five more runs
# of the CNN rows, as exported and with their BatchNorms folded, each a fresh process.
#   bash bench/results/2026-12-07-r13.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-07-r13
for fold in "" --fold-bn; do
    out="bench/results/2026-12-07-r13-models-cnn${fold:+-fold}-repeats.txt"
    {
        echo "# for i in 1..5, t in 1 2: python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads t $fold (fresh process each)"
        date
        uptime
        for i in 1 2 3 4 5; do
            for t in 1 2; do
                python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" $fold
            done
        done
        uptime
    } > "$out" 2>&1
done
