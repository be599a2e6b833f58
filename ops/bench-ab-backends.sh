#!/usr/bin/env bash
# Alternates variants of the kasi binary on both backends, round by round:
# each run starts an external `kasi serve` on a fresh store (SQLite data
# directory, or a fresh PostgreSQL database on the local server), drives it
# with `kasi bench` (transfer flow, 64 users), and prints transfers/s, p99,
# and the hub's CPU per transfer (from /proc, over the measured window),
# beside the harness's own CPU per transfer (the machine-speed yardstick).
#
#   ops/bench-ab-backends.sh ROUNDS NAME=BINARY[,SERVE FLAG...]... [-- BENCH FLAGS]
#   ops/bench-ab-backends.sh 2 base=/tmp/kasi-base head=target/release/kasi \
#       head2=target/release/kasi,--pipeline-threads,2
#
# Needs a PostgreSQL server on 127.0.0.1:5432 that user postgres can reach
# without a password (the machine's local one); BACKENDS="sqlite postgres"
# by default.
set -euo pipefail

rounds=${1:?usage: ops/bench-ab-backends.sh ROUNDS NAME=BINARY... [-- BENCH FLAGS]}
shift
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do
    variants+=("$1")
    shift
done
[[ ${1:-} == -- ]] && shift
flags=("$@")
if [[ ${#flags[@]} -eq 0 ]]; then
    flags=(--flow transfer --concurrency 64 --duration 20 --warmup 3)
fi
backends=${BACKENDS:-sqlite postgres}
out=$(mktemp -d)
trap 'rm -rf "$out"; [[ -n ${pid:-} ]] && kill "$pid" 2>/dev/null || true' EXIT

cpu_ticks() { # utime + stime of a process, in clock ticks
    awk '{print $14 + $15}' "/proc/$1/stat"
}

printf '%-8s %-9s %5s %9s %8s %8s %8s %7s\n' variant backend round flows/s p99_ms hub_us harn_us hub/harn
for round in $(seq 1 "$rounds"); do
    for backend in $backends; do
        for variant in "${variants[@]}"; do
            name=${variant%%=*}
            IFS=, read -r -a spec <<<"${variant#*=}"
            binary=${spec[0]}
            serve_flags=("${spec[@]:1}")
            case $backend in
                sqlite) store=(--data-dir "$out/$name-$round") ;;
                postgres)
                    db="kasiab_${name}_$round"
                    psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS $db" -c "CREATE DATABASE $db" >/dev/null 2>&1
                    store=(--store "postgres://postgres@127.0.0.1/$db" --instance-name ab)
                    ;;
            esac
            log="$out/$name-$backend-$round.log"
            "$binary" serve --api-listen 127.0.0.1:3300 --admin-listen 127.0.0.1:3301 "${store[@]}" "${serve_flags[@]}" >/dev/null 2>"$log" &
            pid=$!
            until grep -q 'serving api' "$log" 2>/dev/null; do
                kill -0 "$pid" 2>/dev/null || { echo "serve failed:"; tail -5 "$log"; exit 1; }
                sleep 0.05
            done
            result="$out/$name-$backend-$round.json"
            # The hub's CPU over the whole run, warm-up and onboarding
            # included, divided by the flows of the measured window: an
            # upper bound, the same for every variant.
            before=$(cpu_ticks "$pid")
            "$binary" bench --api http://127.0.0.1:3300 --admin http://127.0.0.1:3301 "${flags[@]}" \
                --no-report --quiet --json >"$result" 2>/dev/null
            after=$(cpu_ticks "$pid")
            kill "$pid"
            wait "$pid" 2>/dev/null || true
            pid=
            python3 - "$name" "$backend" "$round" "$result" "$before" "$after" "$(getconf CLK_TCK)" <<'EOF'
import json, sys
name, backend, round_, path, before, after, tick = sys.argv[1:]
d = json.load(open(path))
flows = d["completed_in_window"]
rate = flows / d["duration_s"]
hub_us = (int(after) - int(before)) / int(tick) * 1e6 / max(flows, 1)
harness_us = d["cpu"]["harness_us_per_flow"]
print(f'{name:<8} {backend:<9} {round_:>5} {rate:>9.0f} {d["e2e_p99_ms"]:>8.1f} '
      f'{hub_us:>8.1f} {harness_us:>8.1f} {hub_us / harness_us:>7.2f}'
      + ('' if d.get("errors", 0) == 0 else f'  errors={d["errors"]}'))
EOF
        done
    done
done
