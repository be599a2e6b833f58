#!/usr/bin/env bash
# Times the back office's reads on a hub's admin address, as BENCHMARKS.md
# reports them: each `GET /transfers` search RUNS times (median, min, max
# of the whole HTTP request, with what it found), then a DFSP's statement
# read page by page to its end.
#
#   ops/search-latency.sh ADMIN_URL [RUNS] [DFSP] [PARTY]
#   ops/search-latency.sh http://127.0.0.1:3001 5 dfsp0007 MSISDN/255700012345
#
# The defaults fit a store built by `kasi bench ledger --history N --dfsps
# 100` (DFSPs dfsp0000.., parties MSISDN/2557xxxxxxxx, ~10 transfers each
# as payer and as payee in 10 M).
set -euo pipefail

admin=${1:?usage: ops/search-latency.sh ADMIN_URL [RUNS] [DFSP] [PARTY]}
runs=${2:-5}
dfsp=${3:-dfsp0007}
party=${4:-MSISDN/255700012345}
other=dfsp0011
party_type=${party%%/*}
party_id=${party#*/}
party_q="partyIdType=${party_type}&partyIdentifier=${party_id}"

time_one() { # path -> "seconds found complete"
    local body seconds
    body=$(mktemp)
    seconds=$(curl -sS -o "$body" -w '%{time_total}' "$admin$1")
    python3 - "$body" "$seconds" <<'PY'
import json, sys
page = json.load(open(sys.argv[1]))
print(sys.argv[2], len(page.get("transfers", [])), page.get("complete"))
PY
    rm -f "$body"
}

search() { # label path
    local label=$1 path=$2 times=() found complete
    for _ in $(seq 1 "$runs"); do
        read -r seconds found complete < <(time_one "$path")
        times+=("$seconds")
    done
    python3 - "$label" "$found" "$complete" "${times[@]}" <<'PY'
import statistics, sys
label, found, complete, *times = sys.argv[1:]
ms = sorted(float(t) * 1000 for t in times)
print(f"| {label} | {statistics.median(ms):.1f} ({ms[0]:.1f}–{ms[-1]:.1f}) | {found} | {complete} |")
PY
}

# A recent second, for the time ranges: the newest transfer's.
newest=$(curl -sS "$admin/transfers?limit=1" | python3 -c 'import json,sys; t=json.load(sys.stdin)["transfers"][0]; print(t.get("prepareTime") or t.get("preparedAt") or "")')

echo "| query | median (min–max) ms | found | complete |"
echo "|---|---|---|---|"
search "no filter, 50" "/transfers?limit=50"
search "no filter, 1,000" "/transfers?limit=1000"
search "payer, 50" "/transfers?payer=$dfsp&limit=50"
search "payee, 50" "/transfers?payee=$dfsp&limit=50"
search "payer and payee, 50" "/transfers?payer=$dfsp&payee=$other&limit=50"
search "currency=USD, 50" "/transfers?currency=USD&limit=50"
search "state=ABORTED" "/transfers?state=ABORTED&limit=50"
search "errorCode=4001" "/transfers?errorCode=4001&limit=50"
search "settlementWindowId=1, 50" "/transfers?settlementWindowId=1&limit=50"
search "minAmount=maxAmount=100" "/transfers?minAmount=100&maxAmount=100&limit=50"
search "a party, either side" "/transfers?${party_q}&limit=50"
search "a party as payer" "/transfers?${party_q}&partyRole=payer&limit=50"
search "a party as payee, with a DFSP" "/transfers?${party_q}&partyRole=payee&payer=$dfsp&limit=50"
search "a party nobody names" "/transfers?partyIdType=MSISDN&partyIdentifier=999999999999&limit=50"
if [[ -n $newest ]]; then
    search "a party, to the newest transfer's time" "/transfers?${party_q}&to=$newest&limit=50"
fi

# The statement: every page of the DFSP's USD movements.
"$(dirname "$0")/statement-latency.sh" "$admin" "$dfsp"
