#!/usr/bin/env bash
# Round 11 of issue 37 (its outputs: the `-r11-` files beside this one).
#   bash bench/results/2026-12-07-r11.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-07-r11
