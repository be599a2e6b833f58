#!/usr/bin/env bash
# How long the console's pages take with a big scheme: 1,000 DFSPs and
# 1,000,000 transfers in the store (built by `kasi bench ledger`), served by
# `kasi serve` (release build), each page fetched 20 times with one session.
# Prints median, p95 and max per page, in milliseconds (time to the last
# byte, as curl sees it on loopback).
#   usage: ops/bench-console.sh [DFSPS] [TRANSFERS_PER_PHASE]
set -euo pipefail
dfsps=${1:-1000}
per_phase=${2:-500000}
dir=${BENCH_DIR:-/tmp/kasi-bench}/console
kasi=./target/release/kasi
rm -rf "$dir" && mkdir -p "$dir"
echo "building the store: $dfsps DFSPs, $((2 * per_phase)) transfers" >&2
$kasi bench ledger --dfsps "$dfsps" --transfers "$per_phase" --fsync off \
  --data-dir "$dir/data" --log-level warn >"$dir/build.txt"
$kasi serve --data-dir "$dir/data" --api-listen 127.0.0.1:3310 --admin-listen 127.0.0.1:3311 \
  >/dev/null 2>"$dir/serve.log" &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
until grep -q 'serving api' "$dir/serve.log" 2>/dev/null; do sleep 0.1; done
admin=http://127.0.0.1:3311
jar="$dir/cookies"
curl -s -c "$jar" -o /dev/null "$admin/console/participants"
# A transfer to find by id (the bench's own ids are not FSPIOP UUIDs): a
# funds in, made through the admin API as an operator would.
transfer=$(python3 - "$admin" <<'EOF2'
import json, sys, urllib.request, uuid
admin = sys.argv[1]
accounts = json.load(urllib.request.urlopen(admin + "/participants/dfsp0500/accounts"))
account = next(a["id"] for a in accounts if a["ledgerAccountType"] == "SETTLEMENT")
transfer = str(uuid.uuid4())
body = json.dumps({"transferId": transfer, "externalReference": "bench", "action": "recordFundsIn",
                   "reason": "console bench", "amount": {"amount": "100", "currency": accounts[0]["currency"]}})
request = urllib.request.Request(f"{admin}/participants/dfsp0500/accounts/{account}", data=body.encode(),
                                 headers={"Content-Type": "application/json"}, method="POST")
assert urllib.request.urlopen(request).status == 202
print(transfer)
EOF2
)
printf '%-44s %8s %8s %8s %9s\n' page median_ms p95_ms max_ms bytes
for page in "/console/" "/console/?all=1" "/console/participants" "/console/participants/dfsp0500" \
  "/console/transfers?id=$transfer" "/console/settlement" "/console/audit"; do
  times=()
  for _ in $(seq 20); do
    times+=("$(curl -s -b "$jar" -o "$dir/page.html" -w '%{http_code} %{time_total} %{size_download}' "$admin$page")")
  done
  printf '%s\n' "${times[@]}" | python3 -c "
import sys
rows = [l.split() for l in sys.stdin if l.strip()]
bad = [r[0] for r in rows if r[0] != '200']
if bad: sys.exit('$page answered ' + ','.join(bad))
if 'The admin API refused' in open('$dir/page.html').read() or 'error 3' in open('$dir/page.html').read(): sys.exit('$page shows an error')
ms = sorted(float(r[1]) * 1000 for r in rows)
print('%-44s %8.1f %8.1f %8.1f %9s' % ('$page'[:44], ms[len(ms)//2], ms[int(len(ms)*0.95)-1], ms[-1], rows[-1][2]))
"
done
grep -o 'recovered the ledger.*' "$dir/serve.log" | head -1 >&2
