#!/usr/bin/env bash
# Instructions per transfer of a `kasi serve`, counted by callgrind: the
# same for the same binary and load whatever else the machine is doing, so
# two builds compare on a noisy or slow machine where timings cannot.
#
#   ops/count-instructions.sh BINARY [RATE] [SHORT_S] [LONG_S]
#
# Runs the hub under `valgrind --tool=callgrind` twice on a fresh data
# directory, each driven by `kasi bench --api … --admin … --flow transfer
# --rate RATE` (default 10/s) for SHORT_S and LONG_S seconds (default 10
# and 40), and prints (instructions(long) - instructions(short)) divided
# by the transfers between: start-up and onboarding cancel, per-second
# costs (the bench's /metrics scrapes, timers) do not. Valgrind hides
# SHA-NI, so SHA-256 counts in software. The callgrind files are kept in
# $COUNT_OUT (default a temporary directory) for callgrind_annotate.
set -euo pipefail
binary=$(realpath "${1:?usage: ops/count-instructions.sh BINARY [RATE] [SHORT_S] [LONG_S]}")
rate=${2:-10}
short=${3:-10}
long=${4:-40}
out=${COUNT_OUT:-$(mktemp -d)}
mkdir -p "$out"
api=127.0.0.1:47001
admin=127.0.0.1:47002

run() { # seconds -> "instructions completed"
    local seconds=$1 data
    data=$(mktemp -d)
    valgrind --tool=callgrind --callgrind-out-file="$out/callgrind.$seconds.out" \
        "$binary" serve --data-dir "$data" --api-listen $api --admin-listen $admin --hub-name Hub \
        --max-connections-per-client 1000000 --log-level warn >"$data/serve.log" 2>&1 &
    local hub=$!
    for _ in $(seq 1 300); do
        curl -sf -o /dev/null "http://$admin/health" && break
        sleep 0.5
    done
    "$binary" bench --api "http://$api" --admin "http://$admin" --flow transfer --rate "$rate" \
        --duration "$seconds" --warmup 0 --null-hub-baseline 0 --no-report --quiet --json \
        >"$out/bench.$seconds.json"
    kill -INT $hub
    wait $hub || true
    rm -rf "$data"
    python3 - "$out/callgrind.$seconds.out" "$out/bench.$seconds.json" <<'PY'
import json, sys
total = next(int(l.split()[1]) for l in open(sys.argv[1]) if l.startswith("summary:"))
bench = json.load(open(sys.argv[2]))
assert bench["errors"] == 0, bench["errors_by_code"]
print(total, bench["completed"])
PY
}
read -r i_short n_short < <(run "$short")
read -r i_long n_long < <(run "$long")
python3 -c "print(f'{($i_long - $i_short) / ($n_long - $n_short):,.0f} instructions per transfer ($n_long - $n_short transfers at $rate/s; files in $out)')"
