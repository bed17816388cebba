#!/usr/bin/env bash
# Fetch the pinned xgrammar source (the PyPI sdist) into .cache/ for the grammar engine (src/grammar/).
# Usage: scripts/fetch_xgrammar.sh [CACHE_DIR]   — prints the source directory on success.
#   CACHE_DIR defaults to the repository's .cache/ (git-ignored). The build (cmake/xgrammar.cmake)
#   compiles its C++ core only: cpp/ and include/ with the header-only picojson and dlpack; no Python
#   bindings, no tvm-ffi, no cpptrace. Its LICENSE (Apache-2.0) and NOTICE stay in the directory.
#   env CHORUS_XGRAMMAR_SDIST=FILE: take the sdist from FILE instead of downloading it (offline use).
# scripts/fetch_sdist.sh does the fetching: the directory appears complete or not at all, and only
# from an archive whose sha256 is the pinned one.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
version=0.2.9
sha256=87b466bca2475e29bb0323abc62c6c33cbcbcff47e5fb800a3e2099ac9620b90  # PyPI's digest of the sdist
url=https://files.pythonhosted.org/packages/3a/2f/5bf8e8fa6619cff534932f79b0abc81a417d354bc5093252c1a6081d0a93/xgrammar-$version.tar.gz
case "${1:-}" in
  -h|--help) sed -n '2,9p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
esac
cache=${1:-$root/.cache}
need=(LICENSE include/xgrammar/xgrammar.h cpp/grammar_matcher.cc 3rdparty/picojson/picojson.h
      3rdparty/dlpack/include/dlpack/dlpack.h)
exec "$root/scripts/fetch_sdist.sh" xgrammar "$version" "$sha256" "$url" "$cache" "${CHORUS_XGRAMMAR_SDIST:-}" "2.7 MB" "${need[@]}"
