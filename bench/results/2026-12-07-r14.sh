#!/usr/bin/env bash
# Round 14 (a partial round at 26b0489: the CNN rows the session's changes touch, as exported and
# folded, at 1 and 2 threads, MobileNetV2's and the others' training steps, and the CNNs busy), each
# command's output in bench/results/2026-12-07-r14-NAME.txt; the helpers are bench/roundlib.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/results/2026-12-07-r14
# shellcheck source=bench/roundlib.sh
source bench/roundlib.sh
for t in 1 2; do
    run "$out-models-cnn-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t"
    run "$out-models-cnn-fold-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" --fold-bn
done
run "$out-train-threads1.txt" python3 bench/bench_models_cpu.py --train small_cnn mobilenet_v2 resnet18 --calls 10 --threads 1
hogs=()
for _ in $(seq "$(nproc)"); do python3 -c "while True: pass" & hogs+=($!); done
sleep 2
for t in 1 2; do
    run "$out-models-cnn-fold-busy-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" --fold-bn
done
kill "${hogs[@]}"
# five more fresh processes of the CNN rows, as exported and folded (the medians)
cnn_repeats "$out" 5
