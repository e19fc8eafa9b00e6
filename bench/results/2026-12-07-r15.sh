#!/usr/bin/env bash
# Round 15 (a partial round: the CNN rows this session's changes touch, as round 14's, and the
# ImageNet-sized forwards, ResNet-18 and MobileNetV2 at 224x224, at 1 and 2 threads), each command's
# output in bench/results/2026-12-07-r15-NAME.txt; the helpers are bench/roundlib.sh's.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=bench/results/2026-12-07-r15
# shellcheck source=bench/roundlib.sh
source bench/roundlib.sh
cnn_imagenet "$out"
