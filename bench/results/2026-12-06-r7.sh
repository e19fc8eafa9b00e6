#!/usr/bin/env bash
# Round 7 of issue 37 (its outputs: the `-r7-` files beside this one).
#   bash bench/results/2026-12-06-r7.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-06-r7
