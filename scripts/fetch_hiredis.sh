#!/usr/bin/env bash
# Fetch the pinned hiredis C sources (vendored in the `hiredis` PyPI sdist) into .cache/ for the
# remote block store (src/remote/): hiredis 1.5.0 with its TLS half (ssl.c, hiredis_ssl.h), which
# Debian's libhiredis 0.14 lacks. cmake/hiredis.cmake builds vendor/hiredis/ as two static
# libraries (hiredis, hiredis_ssl on OpenSSL); the sdist's Python parser (src/) is not built.
# Usage: scripts/fetch_hiredis.sh [CACHE_DIR]   — prints the source directory on success.
#   CACHE_DIR defaults to the repository's .cache/ (git-ignored). hiredis's COPYING (BSD-3-Clause)
#   stays in the directory.
#   env CHORUS_HIREDIS_SDIST=FILE: take the sdist from FILE instead of downloading it (offline use).
# Invariant: the directory appears complete or not at all (unpacked beside it, then renamed), and
# only from an archive whose sha256 is the pinned one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=3.5.0  # the PyPI package's version; it vendors hiredis 1.5.0
sha256=c227592cc56b7df247abe4755c26723965be68972be2149fa441ac33d82131ba  # PyPI's digest of the sdist
url=https://files.pythonhosted.org/packages/b4/72/64065841e93c3b8b507d7889d7de371e5f397b5efd60f18c2d82d5bd3636/hiredis-$version.tar.gz
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cache=${1:-$root/.cache}
dir="$cache/hiredis-$version"
need=(vendor/hiredis/COPYING vendor/hiredis/hiredis.h vendor/hiredis/hiredis.c vendor/hiredis/ssl.c
      vendor/hiredis/hiredis_ssl.h vendor/hiredis/net.c vendor/hiredis/read.c vendor/hiredis/sds.c
      vendor/hiredis/alloc.c vendor/hiredis/async.c vendor/hiredis/dict.c vendor/hiredis/sockcompat.c)
complete=1
for f in "${need[@]}"; do [ -s "$dir/$f" ] || complete=0; done
if [ "$complete" -eq 1 ]; then echo "$dir"; exit 0; fi
if [ -e "$dir" ]; then
  echo "fetch_hiredis.sh: $dir exists but is incomplete; remove it and run again" >&2
  exit 1
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dir.part"' EXIT
archive="$tmp/hiredis-$version.tar.gz"
if [ -n "${CHORUS_HIREDIS_SDIST:-}" ]; then
  cp "$CHORUS_HIREDIS_SDIST" "$archive"
else
  echo "fetching hiredis $version sdist from PyPI (0.1 MB) ..." >&2
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$archive" "$url"
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$archive"
  fi
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "fetch_hiredis.sh: hiredis-$version.tar.gz has sha256 $got, expected $sha256 — not the PyPI sdist" >&2
  exit 1
fi
rm -rf "$dir.part"
mkdir -p "$dir.part"
tar -xzf "$archive" -C "$dir.part" --strip-components=1 --no-same-owner
for f in "${need[@]}"; do
  if [ ! -s "$dir.part/$f" ]; then
    echo "fetch_hiredis.sh: the sdist lacks $f" >&2
    exit 1
  fi
done
mv "$dir.part" "$dir"
echo "$dir"
