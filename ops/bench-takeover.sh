#!/usr/bin/env bash
# Takeover time on a PostgreSQL store holding a hub's history: A serves,
# B waits as a standby, A is SIGKILLed; how long until B serves.
# Usage: ops/bench-takeover.sh URL   (URL: a store made by `kasi bench ledger --store URL`
# or `kasi bench ledger --history N --store URL`); RETENTION=1m passes
# --transfer-retention 1m (default: kasi's, 24h).
set -euo pipefail
url=$1
kasi=${KASI:-./target/release/kasi}
log=$(mktemp -d)
start() { # name api admin
  $kasi serve --store "$url" --instance-name "$1" --api-listen "127.0.0.1:$2" \
    --admin-listen "127.0.0.1:$3" --log-format json ${RETENTION:+--transfer-retention "$RETENTION"} \
    >/dev/null 2>"$log/$1.log" &
  echo $!
}
a=$(start a 3100 3101)
t0=$(date +%s.%N)
until grep -q '"serving"' "$log/a.log" 2>/dev/null; do sleep 0.01; done
t1=$(date +%s.%N)
echo "a: serving $(echo "$t1 - $t0" | bc) s after start (recovery: $(grep -o '"load_ms":[0-9]*' "$log/a.log"), $(grep -o '"rebuild_ms":[0-9]*' "$log/a.log"))"
b=$(start b 3200 3201)
until grep -q "kept current" "$log/b.log" 2>/dev/null; do sleep 0.01; done
kill -9 "$a"
t2=$(date +%s.%N)
until grep -q '"serving"' "$log/b.log" 2>/dev/null; do sleep 0.01; done
t3=$(date +%s.%N)
echo "b: serving $(echo "$t3 - $t2" | bc) s after a's SIGKILL ($(grep -o '"load_ms":[0-9]*' "$log/b.log"), $(grep -o '"rebuild_ms":[0-9]*' "$log/b.log"), $(grep -o '"transfers":[0-9]*' "$log/b.log" | head -1))"
curl -s "http://127.0.0.1:3201/health" ; echo
kill "$b"; wait "$b" 2>/dev/null || true
grep -o "\"timestamp\":\"[^\"]*\",\"level\":\"[A-Z]*\",\"message\":\"[^\"]*" "$log/b.log" | sed "s/\"level\":\"INFO\",//" | cut -c 25-; rm -rf "$log"
