#!/usr/bin/env bash
# Round 8 of issue 37 (its outputs: the `-r8-` files beside this one).
#   bash bench/results/2026-12-06-r8.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-06-r8
