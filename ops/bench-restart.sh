#!/usr/bin/env bash
# Restart time: `kasi serve` on an existing store, from exec to its
# `serving` log line (polled every 10 ms), then SIGINT; N runs in a row.
# Prints each run's recovery line and time, then min / median / max.
# Usage: ops/bench-restart.sh N STORE-FLAGS...   e.g.
#   ops/bench-restart.sh 6 --data-dir /work/bench/sq1m
#   RETENTION=1m ops/bench-restart.sh 3 --store postgres://…/h10m --data-dir /tmp/x
# (RETENTION: --transfer-retention, default 24h; KASI: the binary.)
set -euo pipefail
n=$1; shift
kasi=${KASI:-./target/release/kasi}
log=$(mktemp)
times=()
for _ in $(seq 1 "$n"); do
  start=$(date +%s.%N)
  $kasi serve --api-listen 127.0.0.1:0 --admin-listen 127.0.0.1:0 --hub-name Hub \
    --transfer-retention "${RETENTION:-24h}" "$@" >"$log" 2>&1 &
  pid=$!
  until grep -q "serving api" "$log"; do
    kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
    sleep 0.01
  done
  end=$(date +%s.%N)
  kill -INT "$pid"; wait "$pid" 2>/dev/null || true
  took=$(echo "$end - $start" | bc)
  times+=("$took")
  echo "$(grep -o 'recovered the ledger.*' "$log" | sed 's/store=[a-z]* [^ ]* //') to serving: $took s"
done
rm -f "$log"
printf '%s\n' "${times[@]}" | sort -n | awk '{a[NR]=$1} END {printf "min %.2f s, median %.2f s, max %.2f s (n=%d)\n", a[1], a[int((NR+1)/2)], a[NR], NR}'
