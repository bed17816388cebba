#!/usr/bin/env bash
# The OpenAI Agents SDK workflow of issue 41 (tests/server/agents_workflow.py) against chorus serve
# and against llama-server (the peer, scripts/build_peer.sh), same model, same threads, one run each.
# Usage: scripts/peer_agents.sh [MODEL.gguf]  — prints one JSON line per step and server. Outside CI.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
model=${1:-$root/models/SmolLM2-135M-Instruct.Q4_1.gguf}
peer=$(ls -d "$root"/.cache/peer/build-*/bin 2>/dev/null | head -1)
[ -x "$peer/llama-server" ] || { echo "peer_agents.sh: no llama-server: run scripts/build_peer.sh" >&2; exit 1; }
port_c=18561 port_p=18562
"$root/build/bin/chorus" serve -m "$model" --port $port_c -t 2 >/dev/null 2>&1 & pc=$!
"$peer/llama-server" -m "$model" --port $port_p -t 2 --jinja -c 8192 >/dev/null 2>&1 & pp=$!
trap 'kill $pc $pp 2>/dev/null || true' EXIT
for p in $port_c $port_p; do
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$p/health" >/dev/null && break; sleep 0.2; done
done
lscpu | sed -n 's/^Model name: *//p'
for s in "chorus $port_c" "llama-server $port_p"; do
  set -- $s
  python3 "$root/tests/server/agents_workflow.py" "http://127.0.0.1:$2/v1" model | sed "s/^/$1 /"
done
