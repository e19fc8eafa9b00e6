#!/usr/bin/env bash
# Round 14 (a partial round at 26b0489: the CNN rows the session's changes touch, as exported and
# folded, at 1 and 2 threads, MobileNetV2's and the others' training steps, and the CNNs busy), each
# command's output in bench/results/2026-12-07-r14-NAME.txt; the helpers are bench/roundlib.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/results/2026-12-07-r14
# shellcheck source=bench/roundlib.sh
source bench/roundlib.sh
cnn_partial "$out"
