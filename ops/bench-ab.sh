#!/usr/bin/env bash
# Alternates `kasi bench` runs of two or more variants, round by round, and
# prints one line per run: the comparisons of BENCHMARKS.md ("CPU per
# transfer") are taken this way, because this machine's speed drifts by
# more than the differences being measured.
#
# A variant is NAME=BINARY[,VAR=VALUE...]: the binary runs `bench` with the
# environment given (the embedded `kasi serve` inherits it). A NAME that
# begins with "null" runs the null hub of BINARY instead.
#
#   ops/bench-ab.sh ROUNDS VARIANT... [-- BENCH FLAGS]
#   ops/bench-ab.sh 5 one=/tmp/kasi,KASI_PIPELINE_THREADS=1 \
#       two=/tmp/kasi,KASI_PIPELINE_THREADS=2 null=/tmp/kasi
#
# Bench flags default to the transfer flow at 64 users for 15 s. The
# columns: transfers (flows) per second, e2e p99 ms, the hub's and the
# harness's CPU µs per flow, and their ratio — the harness's CPU is the
# machine-speed yardstick of its own run, so "hub/harness" compares across
# rounds when the absolute numbers drift.
set -euo pipefail

rounds=${1:?usage: ops/bench-ab.sh ROUNDS NAME=BINARY[,VAR=VALUE...]... [-- BENCH FLAGS]}
shift
variants=()
while [[ $# -gt 0 && $1 != -- ]]; do
    variants+=("$1")
    shift
done
[[ ${1:-} == -- ]] && shift
flags=("$@")
if [[ ${#flags[@]} -eq 0 ]]; then
    flags=(--flow transfer --concurrency 64 --duration 15 --warmup 3)
fi
[[ ${#variants[@]} -ge 1 ]] || { echo "give at least one NAME=BINARY variant" >&2; exit 2; }

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
printf '%-10s %5s %9s %8s %8s %8s %7s\n' variant round flows/s p99_ms hub_us harn_us hub/harn
for round in $(seq 1 "$rounds"); do
    for variant in "${variants[@]}"; do
        name=${variant%%=*}
        spec=${variant#*=}
        IFS=, read -r binary settings <<<"$spec"
        env_args=()
        if [[ -n ${settings:-} ]]; then
            IFS=, read -r -a env_args <<<"$settings"
        fi
        extra=()
        [[ $name == null* ]] && extra=(--null-hub)
        result="$out/$name-$round.json"
        if ! env "${env_args[@]}" "$binary" bench "${flags[@]}" "${extra[@]}" \
            --no-report --quiet --json >"$result" 2>"$out/$name-$round.err"; then
            echo "$name round $round failed:" >&2
            tail -5 "$out/$name-$round.err" >&2
            exit 1
        fi
        python3 - "$name" "$round" "$result" <<'EOF'
import json, sys
name, round_, path = sys.argv[1:]
d = json.load(open(path))
c = d["cpu"]
rate = d["completed_in_window"] / d["duration_s"]
ratio = c["hub_us_per_flow"] / c["harness_us_per_flow"]
print(f'{name:<10} {round_:>5} {rate:>9.0f} {d["e2e_p99_ms"]:>8.1f} '
      f'{c["hub_us_per_flow"]:>8.1f} {c["harness_us_per_flow"]:>8.1f} {ratio:>7.2f}')
EOF
    done
done
