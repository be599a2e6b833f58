#!/usr/bin/env bash
# FX payments beside same-currency payments, in one sitting: alternates
# `kasi bench --flow quote+transfer` (a payment in one currency: quote,
# transfer) and `kasi bench --flow fx` (the same payment across
# currencies: FX quote, quote, conversion, the dependent transfer) round
# by round with one binary, each with its own null-hub baseline, and
# prints one line per run and the FX/same-currency ratios of each round.
# BENCHMARKS.md's FX figures are taken this way: this machine's speed
# drifts by more than a single run can tell.
#
#   ops/bench-fx.sh ROUNDS BINARY [-- BENCH FLAGS]
#   ops/bench-fx.sh 3 target/release/kasi -- --concurrency 64 --duration 15
#
# Bench flags default to 64 users for 15 s after 3 s of warm-up. The
# columns: payments per second, e2e p99 ms, the null hub's payments per
# second (same flow, just before), kasi's share of it, the hub's and the
# harness's CPU µs per payment, and whether every currency netted to zero.
set -euo pipefail

rounds=${1:?usage: ops/bench-fx.sh ROUNDS BINARY [-- BENCH FLAGS]}
binary=${2:?usage: ops/bench-fx.sh ROUNDS BINARY [-- BENCH FLAGS]}
shift 2
[[ ${1:-} == -- ]] && shift
flags=("$@")
if [[ ${#flags[@]} -eq 0 ]]; then
    flags=(--concurrency 64 --duration 15 --warmup 3)
fi

# BENCH_FX_OUT=DIR keeps each run's JSON summary there.
if [[ -n ${BENCH_FX_OUT:-} ]]; then
    out=$BENCH_FX_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d)
    trap 'rm -rf "$out"' EXIT
fi
printf '%-15s %5s %9s %8s %9s %6s %8s %8s %s\n' \
    flow round flows/s p99_ms null/s ratio hub_us harn_us net_zero
for round in $(seq 1 "$rounds"); do
    for flow in quote+transfer fx; do
        result="$out/$flow-$round.json"
        if ! "$binary" bench --flow "$flow" "${flags[@]}" \
            --no-report --quiet --json >"$result" 2>"$out/$flow-$round.err"; then
            echo "$flow round $round failed:" >&2
            tail -5 "$out/$flow-$round.err" >&2
            exit 1
        fi
    done
    python3 - "$round" "$out/quote+transfer-$round.json" "$out/fx-$round.json" <<'EOF'
import json, sys
round_, same_path, fx_path = sys.argv[1:]
runs = {}
for flow, path in (("quote+transfer", same_path), ("fx", fx_path)):
    d = json.load(open(path))
    c = d.get("cpu") or {}
    null = (d.get("null_hub_ratio") or {})
    rate = d["completed_in_window"] / d["duration_s"]
    runs[flow] = (rate, d["e2e_p99_ms"], c.get("hub_us_per_flow"))
    fmt = lambda v, f: "-" if v is None else format(v, f)
    failed = d["errors"] + d["timeouts"]
    print(f'{flow:<15} {round_:>5} {rate:>9.0f} {d["e2e_p99_ms"]:>8.1f} '
          f'{fmt(null.get("null_hub_throughput_per_s"), ".0f"):>9} {fmt(null.get("ratio"), ".2f"):>6} '
          f'{fmt(c.get("hub_us_per_flow"), ".0f"):>8} {fmt(c.get("harness_us_per_flow"), ".0f"):>8} '
          f'{d["positions_net_zero"]}' + (f'  FAILED {failed}' if failed else ''))
(same_rate, same_p99, same_us), (fx_rate, fx_p99, fx_us) = runs["quote+transfer"], runs["fx"]
cpu = f', hub CPU per payment {fx_us / same_us:.2f}x' if fx_us and same_us else ''
print(f'{"fx/same":<15} {round_:>5} {fx_rate / same_rate:>9.2f} {fx_p99 / same_p99:>8.2f}{cpu}')
EOF
done
