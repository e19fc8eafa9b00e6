#!/usr/bin/env bash
# Round 10 of issue 37 (its outputs: the `-r10-` files beside this one).
#   bash bench/results/2026-12-07-r10.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-07-r10
