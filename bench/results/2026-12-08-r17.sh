#!/usr/bin/env bash
# Round 17 (a partial round, as round 16: the CNN rows as exported (opc.load_onnx folds their
# BatchNorms, as onnxruntime does) and folded, medians of five, training, busy; ResNet-18 and
# MobileNetV2 at 224x224 at 1 and 2 threads; the ONNX CNNs' compile and cached load), each command's
# output in bench/results/2026-12-08-r17-NAME.txt; the helpers are bench/roundlib.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/results/2026-12-08-r17
# shellcheck source=bench/roundlib.sh
source bench/roundlib.sh
cnn_imagenet "$out"
run "$out-compile.txt" python3 bench/bench_compile.py --sizes 100,1000 --repeat 2
