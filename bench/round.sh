#!/usr/bin/env bash
# Every figure of an issue-37 round side by side in one run: the CNNs (as exported, and with their
# BatchNorms folded as torch's eval export does), the LSTM, the training steps,
# the transformer block and ResNet-18 at 224x224 at 1 and 2 threads on a quiet machine, the peak
# fractions, the compile times, then the CNNs again with the machine busy. Each command's output goes
# to its own file, PREFIX-NAME.txt. With REPEATS, then REPEATS more runs of the CNN rows, as exported and
# folded, each a fresh process (PREFIX-models-cnn-repeats.txt, PREFIX-models-cnn-fold-repeats.txt): the
# medians the docs quote.
#   bash bench/round.sh bench/results/2026-12-06-r8 [REPEATS]
set -euo pipefail
out="$(realpath -m "$1")"
repeats="${2:-0}"
cd "$(dirname "$0")/.."
# shellcheck source=bench/roundlib.sh
source bench/roundlib.sh
for t in 1 2; do
    run "$out-models-cnn-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t"
    run "$out-models-cnn-fold-threads$t.txt" python3 bench/bench_models_cpu.py small_cnn mobilenet_v2 resnet18 --calls 30 --threads "$t" --fold-bn
    run "$out-models-lstm-threads$t.txt" python3 bench/bench_control_flow.py --only lstm --seq 64 300 --threads "$t"
    run "$out-train-threads$t.txt" python3 bench/bench_models_cpu.py --train small_cnn mobilenet_v2 resnet18 --calls 10 --threads "$t"
    run "$out-transformer-threads$t.txt" python3 bench/bench_transformer.py --threads "$t"
    run "$out-resnet224-threads$t.txt" python3 bench/bench_cpu.py --threads "$t" --only resnet18
done
run "$out-peak.txt" python3 bench/bench_cpu.py --threads 1 --clock thread --only matmul-1024,gemm-fc1,gemm-fc2,conv3x3,conv3x3-fwd-bwd,bf16-fc1,bf16-conv3x3
run "$out-compile.txt" python3 bench/bench_compile.py --sizes 100,1000 --repeat 2
cnn_busy "$out"
cnn_repeats "$out" "$repeats"
