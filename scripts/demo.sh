#!/usr/bin/env bash
# The main job on a fresh machine: set everything up (packages, model, build), then run chorus on
# the real model. Usage: scripts/demo.sh [-t THREADS]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
threads=$(nproc 2>/dev/null || echo 2)
if [ "${1:-}" = "-t" ] && [ -n "${2:-}" ]; then threads=$2; fi
scripts/setup.sh
model=$(scripts/fetch_model.sh)
echo
echo "==> chorus inspect"
build/bin/chorus inspect "$model" | head -16
echo
echo "==> chorus generate --chat (greedy, $threads threads)"
build/bin/chorus generate -m "$model" -t "$threads" --chat --temp 0 -n 96 \
  -p "In three sentences: why does a shared, compressed KV cache help many agents that read one long document?"
