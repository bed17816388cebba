#!/usr/bin/env bash
# The cost of TLS on a block fetch (docs/results/tenants.md): makes a throwaway CA and a server
# certificate with openssl, starts redis-server on loopback with a plaintext and a TLS port (the
# same data), runs bench/redis_fetch_bench against both, and stops the server.
# Usage: scripts/bench_redis_tls.sh [BUILD_DIR] [BLOCKS] [VALUE_BYTES] [REPS]
#   BUILD_DIR defaults to build; the defaults of the rest are the bench's (55 blocks of 183488
#   bytes: the 55-block document of tests/e2e/kv_store_tls_test.py in the default formats).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-build}
bin="$root/$build/bench/redis_fetch_bench"
[ -x "$bin" ] || { echo "bench_redis_tls.sh: no $bin (ninja -C $build redis_fetch_bench)" >&2; exit 1; }
d=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$d"' EXIT
ec=(-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes)
openssl req -x509 "${ec[@]}" -keyout "$d/ca.key" -out "$d/ca.pem" -days 1 -subj /CN=bench-ca 2>/dev/null
openssl req "${ec[@]}" -keyout "$d/server.key" -out "$d/server.csr" -subj /CN=server 2>/dev/null
echo "subjectAltName=IP:127.0.0.1" > "$d/ext"
openssl x509 -req -in "$d/server.csr" -CA "$d/ca.pem" -CAkey "$d/ca.key" -CAcreateserial -out "$d/server.pem" \
  -days 1 -extfile "$d/ext" 2>/dev/null
port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
plain=$(port) tls=$(port)
redis-server --port "$plain" --bind 127.0.0.1 --tls-port "$tls" --tls-cert-file "$d/server.pem" \
  --tls-key-file "$d/server.key" --tls-ca-cert-file "$d/ca.pem" --tls-auth-clients no --save '' \
  --appendonly no >"$d/redis.log" 2>&1 &
pid=$!
for _ in $(seq 100); do redis-cli -p "$plain" ping >/dev/null 2>&1 && break; sleep 0.05; done
"$bin" "$plain" "$tls" "$d/ca.pem" "${@:2}"
