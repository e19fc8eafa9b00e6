#!/usr/bin/env bash
# Round 13 of issue 37 (its outputs: the `-r13-` files beside this one): the round, then five more runs
# of the CNN rows, as exported and with their BatchNorms folded, each a fresh process.
#   bash bench/results/2026-12-07-r13.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
bash bench/round.sh bench/results/2026-12-07-r13 5
