#!/usr/bin/env bash
# Fetch the pinned xgrammar source (the PyPI sdist) into .cache/ for the grammar engine (src/grammar/).
# Usage: scripts/fetch_xgrammar.sh [CACHE_DIR]   — prints the source directory on success.
#   CACHE_DIR defaults to the repository's .cache/ (git-ignored). The build (cmake/xgrammar.cmake)
#   compiles its C++ core only: cpp/ and include/ with the header-only picojson and dlpack; no Python
#   bindings, no tvm-ffi, no cpptrace. Its LICENSE (Apache-2.0) and NOTICE stay in the directory.
#   env CHORUS_XGRAMMAR_SDIST=FILE: take the sdist from FILE instead of downloading it (offline use).
# Invariant: the directory appears complete or not at all (unpacked beside it, then renamed), and
# only from an archive whose sha256 is the pinned one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90  # PyPI's digest of the sdist
url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$version.tar.gz
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cache=${1:-$root/.cache}
dir="$cache/xgrammar-$version"
need=(LICENSE include/xgrammar/xgrammar.h cpp/grammar_matcher.cc 3rdparty/picojson/picojson.h
      3rdparty/dlpack/include/dlpack/dlpack.h)
complete=1
for f in "${need[@]}"; do [ -s "$dir/$f" ] || complete=0; done
if [ "$complete" -eq 1 ]; then echo "$dir"; exit 0; fi
if [ -e "$dir" ]; then
  echo "fetch_xgrammar.sh: $dir exists but is incomplete; remove it and run again" >&2
  exit 1
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dir.part"' EXIT
archive="$tmp/xgrammar-$version.tar.gz"
if [ -n "${CHORUS_XGRAMMAR_SDIST:-}" ]; then
  cp "$CHORUS_XGRAMMAR_SDIST" "$archive"
else
  echo "fetching xgrammar $version sdist from PyPI (2.7 MB) ..." >&2
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$archive" "$url"
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$archive"
  fi
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "fetch_xgrammar.sh: xgrammar-$version.tar.gz has sha256 $got, expected $sha256 — not the PyPI sdist" >&2
  exit 1
fi
rm -rf "$dir.part"
mkdir -p "$dir.part"
tar -xzf "$archive" -C "$dir.part" --strip-components=1 --no-same-owner
for f in "${need[@]}"; do
  if [ ! -s "$dir.part/$f" ]; then
    echo "fetch_xgrammar.sh: the sdist lacks $f" >&2
    exit 1
  fi
done
mv "$dir.part" "$dir"
echo "$dir"
