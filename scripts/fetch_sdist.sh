#!/usr/bin/env bash
# Fetch a pinned PyPI sdist and unpack it into CACHE_DIR/NAME-VERSION, for the fetch_*.sh scripts.
# Usage: scripts/fetch_sdist.sh NAME VERSION SHA256 URL CACHE_DIR LOCAL_SDIST SIZE FILE...
#   FILE...: paths the unpacked tree must hold (checked before and after); LOCAL_SDIST, when not
#   empty, is taken instead of downloading (offline use); SIZE is for the progress line.
#   Prints the source directory on success.
# Invariant: the directory appears complete or not at all (unpacked beside it, then renamed), and
# only from an archive whose sha256 is the pinned one.
set -euo pipefail
name=$1 version=$2 sha256=$3 url=$4 cache=$5 local_sdist=$6 size=$7
shift 7
need=("$@")
me="fetch_$name.sh"
dir="$cache/$name-$version"
complete=1
for f in "${need[@]}"; do [ -s "$dir/$f" ] || complete=0; done
if [ "$complete" -eq 1 ]; then echo "$dir"; exit 0; fi
if [ -e "$dir" ]; then
  echo "$me: $dir exists but is incomplete; remove it and run again" >&2
  exit 1
fi
mkdir -p "$cache"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp" "$dir.part"' EXIT
archive="$tmp/$name-$version.tar.gz"
if [ -n "$local_sdist" ]; then
  cp "$local_sdist" "$archive"
else
  echo "fetching $name $version sdist from PyPI ($size) ..." >&2
  if command -v curl >/dev/null 2>&1; then
    curl -fsSL --retry 3 -o "$archive" "$url"
  else
    python3 -c 'import sys, urllib.request; urllib.request.urlretrieve(sys.argv[1], sys.argv[2])' "$url" "$archive"
  fi
fi
got=$(sha256sum "$archive" | cut -d' ' -f1)
if [ "$got" != "$sha256" ]; then
  echo "$me: $name-$version.tar.gz has sha256 $got, expected $sha256 — not the PyPI sdist" >&2
  exit 1
fi
rm -rf "$dir.part"
mkdir -p "$dir.part"
tar -xzf "$archive" -C "$dir.part" --strip-components=1 --no-same-owner
for f in "${need[@]}"; do
  if [ ! -s "$dir.part/$f" ]; then
    echo "$me: the sdist lacks $f" >&2
    exit 1
  fi
done
mv "$dir.part" "$dir"
echo "$dir"
