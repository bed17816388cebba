#!/usr/bin/env bash
# Fetch the pinned hiredis C sources (vendored in the `hiredis` PyPI sdist) into .cache/ for the
# remote block store (src/remote/): hiredis 1.5.0 with its TLS half (ssl.c, hiredis_ssl.h), which
# Debian's libhiredis 0.14 lacks. cmake/hiredis.cmake builds vendor/hiredis/ as two static
# libraries (hiredis, hiredis_ssl on OpenSSL); the sdist's Python parser (src/) is not built.
# Usage: scripts/fetch_hiredis.sh [CACHE_DIR]   — prints the source directory on success.
#   CACHE_DIR defaults to the repository's .cache/ (git-ignored). hiredis's COPYING (BSD-3-Clause)
#   stays in the directory.
#   env CHORUS_HIREDIS_SDIST=FILE: take the sdist from FILE instead of downloading it (offline use).
# scripts/fetch_sdist.sh does the fetching: the directory appears complete or not at all, and only
# from an archive whose sha256 is the pinned one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=3.5.0  # the PyPI package's version; it vendors hiredis 1.5.0
sha256=c227592cc56b7df247abe4755c26723965be68972be2149fa441ac33d82131ba  # PyPI's digest of the sdist
url=https://files.pythonhosted.org/packages/b4/72/64065841e93c3b8b507d7889d7de371e5f397b5efd60f18c2d82d5bd3636/hiredis-$version.tar.gz
case "${1:-}" in
  -h|--help) sed -n '2,11p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cache=${1:-$root/.cache}
need=(vendor/hiredis/COPYING vendor/hiredis/hiredis.h vendor/hiredis/hiredis.c vendor/hiredis/ssl.c
      vendor/hiredis/hiredis_ssl.h vendor/hiredis/net.c vendor/hiredis/read.c vendor/hiredis/sds.c
      vendor/hiredis/alloc.c vendor/hiredis/async.c vendor/hiredis/dict.c vendor/hiredis/sockcompat.c)
exec "$root/scripts/fetch_sdist.sh" hiredis "$version" "$sha256" "$url" "$cache" "${CHORUS_HIREDIS_SDIST:-}" "0.1 MB" "${need[@]}"
