#!/usr/bin/env bash
# Heap allocations per transfer of the embedded hub, counted with uprobes on
# mimalloc's entry points (kasi's global allocator): a count, not a time, so
# two builds compare on a noisy machine.
#
#   ops/count-allocations.sh BINARY [SECONDS] [-- BENCH FLAGS]
#
# Needs perf with uprobes (run as root). Default load: `--flow transfer
# --rate 400`. Per-second allocations (timers, the bench's /metrics
# scrapes) are spread over the transfers, so compare at the same rate.
set -euo pipefail
binary=$(realpath "${1:?usage: ops/count-allocations.sh BINARY [SECONDS] [-- BENCH FLAGS]}")
shift
seconds=8
if [[ $# -gt 0 && $1 != -- ]]; then
    seconds=$1
    shift
fi
[[ ${1:-} == -- ]] && shift
flags=("$@")
[[ ${#flags[@]} -gt 0 ]] || flags=(--flow transfer --rate 400)
out=$(mktemp -d)
trap 'rm -rf "$out"; perf probe -q -d "probe_kasi:*" 2>/dev/null || true' EXIT
perf probe -q -d 'probe_kasi:*' 2>/dev/null || true
for f in mi_malloc_aligned mi_zalloc_aligned mi_realloc_aligned; do
    perf probe -q -x "$binary" --add "$f" >/dev/null
done
"$binary" bench "${flags[@]}" --duration $((seconds + 6)) --warmup 3 --null-hub-baseline 0 \
    --no-report --quiet --json >"$out/bench.json" &
bench=$!
hub=""
for _ in $(seq 1 100); do
    sleep 0.2
    hub=$(pgrep -P "$bench" -f ' serve | null-hub' | head -1 || true)
    [[ -n $hub ]] && break
done
[[ -n $hub ]] || { echo "no hub process under the bench" >&2; exit 1; }
sleep 5
perf stat -x, -e 'probe_kasi:mi_malloc_aligned,probe_kasi:mi_zalloc_aligned,probe_kasi:mi_realloc_aligned' \
    -p "$hub" -- sleep "$seconds" 2>"$out/stat"
wait $bench
python3 - "$out/stat" "$out/bench.json" "$seconds" <<'PY'
import json, sys
stat, bench, seconds = sys.argv[1], json.load(open(sys.argv[2])), float(sys.argv[3])
rate = bench["completed_in_window"] / bench["duration_s"]
total = sum(int(l.split(",")[0]) for l in open(stat) if l.split(",")[0].strip().isdigit())
print(f"{total / (rate * seconds):.1f} allocations per transfer (rate {rate:.0f}/s, errors {bench['errors']})")
PY
