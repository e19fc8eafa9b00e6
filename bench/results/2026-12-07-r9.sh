#!/usr/bin/env bash
# Round 9 of issue 37 (its outputs: the `-r9-` files beside this one).
#   bash bench/results/2026-12-07-r9.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-07-r9
