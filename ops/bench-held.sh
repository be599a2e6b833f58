#!/usr/bin/env bash
# The whole hub process's memory with many finished transfers held: a
# `kasi serve` on a fresh SQLite directory with its defaults (24 h
# retention, at most --finished-transfers-in-memory = 2,000,000 held),
# `kasi bench` driving TRANSFERS transfers through it (64 users), and the
# hub's RSS (/proc/PID/status VmRSS) with kasi_ledger_transfers_in_memory
# (/metrics) sampled every 10 s. Prints the samples and the marginal bytes
# of RSS per transfer held (a least-squares line over the samples from
# 400,000 held to just below the cap, so that the start-up growth and the
# first eviction's fixed structures stay out of it).
#
#   ops/bench-held.sh BINARY [TRANSFERS]
#   ops/bench-held.sh target/release/kasi 2000000
set -euo pipefail
binary=$(realpath "${1:?usage: ops/bench-held.sh BINARY [TRANSFERS]}")
transfers=${2:-2000000}
work=$(mktemp -d)
trap 'kill "$hub" 2>/dev/null || true; rm -rf "$work"' EXIT
"$binary" serve --data-dir "$work/data" --api-listen 127.0.0.1:47100 \
    --admin-listen 127.0.0.1:47101 > "$work/serve.log" 2>&1 &
hub=$!
for _ in $(seq 50); do
    curl -sf 127.0.0.1:47101/health > /dev/null && break
    sleep 0.2
done
(
    while kill -0 "$hub" 2> /dev/null; do
        rss_kb=$(awk '/VmRSS/{print $2}' "/proc/$hub/status" 2> /dev/null || true)
        held=$(curl -s 127.0.0.1:47101/metrics | awk '/^kasi_ledger_transfers_in_memory /{print $2}')
        echo "$(date +%s) $rss_kb ${held:-0}"
        sleep 10
    done
) > "$work/samples" &
"$binary" bench --api http://127.0.0.1:47100 --admin http://127.0.0.1:47101 \
    --count "$transfers" --warmup 5 --concurrency 64 --null-hub-baseline 0 \
    --no-report --json > "$work/bench.json"
sleep 11
echo "# unix-time rss-kB transfers-held"
cat "$work/samples"
python3 - "$work/samples" "$work/bench.json" <<'PY'
import json, sys
samples = [line.split() for line in open(sys.argv[1]) if len(line.split()) == 3]
points = [(float(held), int(rss) * 1024) for _, rss, held in samples if rss]
cap = max(held for held, _ in points)
line = [(h, r) for h, r in points if 400_000 <= h < cap * 0.995]
if len(line) < 3:
    sys.exit("too few samples between 400,000 held and the cap: run more transfers")
mx = sum(h for h, _ in line) / len(line)
my = sum(r for _, r in line) / len(line)
slope = sum((h - mx) * (r - my) for h, r in line) / sum((h - mx) ** 2 for h, _ in line)
bench = json.load(open(sys.argv[2]))
print(f"transfers {bench['completed_in_window']:,} at {bench['throughput_per_s']:,.0f}/s, "
      f"errors {bench['errors']}")
print(f"RSS {points[-1][1] / 2**20:,.1f} MiB with {points[-1][0]:,.0f} held; "
      f"{slope:,.1f} B of RSS per transfer held (from {len(line)} samples, "
      f"{line[0][0]:,.0f} to {line[-1][0]:,.0f} held)")
PY
