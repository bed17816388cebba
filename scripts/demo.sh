#!/usr/bin/env bash
# The main job on a fresh machine: set everything up (packages, model, build), then a multi-agent
# demo on the real model: one shared, compressed document, one agent per question. Usage: scripts/demo.sh [-t THREADS]
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
echo "==> chorus agents: 7 agents share one compressed document (WikiText-2 'Du Fu'), $threads threads"
build/bin/chorus agents -m "$model" -t "$threads" --doc examples/du_fu.txt --questions examples/du_fu_questions.txt -n 64
