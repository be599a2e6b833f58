#!/usr/bin/env bash
# kasi bench (transfers, 64 users, 20 s) against kasi serve on SQLite, then on PostgreSQL.
set -euo pipefail
mkdir -p "${BENCH_DIR:-/tmp/kasi-bench}"
kasi=./target/release/kasi
run() { # label store-args...
  label=$1; shift
  $kasi serve --api-listen 127.0.0.1:3300 --admin-listen 127.0.0.1:3301 "$@" >/dev/null 2>${BENCH_DIR:-/tmp/kasi-bench}/http-$label.log &
  pid=$!
  until grep -q '"serving"\|serving api' ${BENCH_DIR:-/tmp/kasi-bench}/http-$label.log 2>/dev/null; do sleep 0.05; done
  $kasi bench --api http://127.0.0.1:3300 --admin http://127.0.0.1:3301 --flow transfer --concurrency 64 --duration 20 --warmup 3 --no-report --quiet --json 2>/dev/null | python3 -c "import json,sys; d=json.load(sys.stdin); print('$label', {k: d.get(k) for k in ['throughput_per_s','e2e_p99_ms','errors','timeouts','positions_net_zero']}, 'cpu:', d.get('cpu'))" || echo "$label: bench failed"
  kill $pid; wait $pid 2>/dev/null || true
}
for round in 1 2; do
  rm -rf ${BENCH_DIR:-/tmp/kasi-bench}/http-sq$round
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS kasihttp$round" -c "CREATE DATABASE kasihttp$round" 2>/dev/null
  run sqlite$round --data-dir ${BENCH_DIR:-/tmp/kasi-bench}/http-sq$round
  run postgres$round --store postgres://postgres@127.0.0.1/kasihttp$round --instance-name bench
done
