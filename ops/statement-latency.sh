#!/usr/bin/env bash
# Times a DFSP's statement on a hub's admin address, as BENCHMARKS.md
# reports it: every page of its USD movements (1,000 a page) from FROM_MS
# (default: the start) to the end, each page's whole HTTP request; the
# first page carries the opening balance, read in the middle of the
# history when FROM_MS is.
#
#   ops/statement-latency.sh ADMIN_URL [DFSP] [FROM_MS]
#   ops/statement-latency.sh http://127.0.0.1:4101 dfsp0007
#
# KASI_ADMIN_TOKEN, when set, is sent as the bearer token.
set -euo pipefail

admin=${1:?usage: ops/statement-latency.sh ADMIN_URL [DFSP] [FROM_MS]}
dfsp=${2:-dfsp0007}
from=${3:-0}

python3 - "$admin" "$dfsp" "$from" <<'PY'
import json, os, sys, time, urllib.request
admin, dfsp, from_ms = sys.argv[1:]
token = os.environ.get("KASI_ADMIN_TOKEN")
started = time.monotonic()
pages, movements, after, page_ms, incomplete = 0, 0, None, [], 0
while True:
    url = f"{admin}/participants/{dfsp}/statement?currency=USD&limit=1000&from={from_ms}"
    if after:
        url += f"&after={after}"
    request = urllib.request.Request(url)
    if token:
        request.add_header("Authorization", f"Bearer {token}")
    t = time.monotonic()
    page = json.load(urllib.request.urlopen(request))
    page_ms.append((time.monotonic() - t) * 1000)
    pages += 1
    movements += len(page.get("movements", []))
    incomplete += page.get("complete") is False
    after = page.get("next")
    if not after:
        break
total = time.monotonic() - started
first = page_ms[0]
page_ms.sort()
print(f"statement of {dfsp} (USD) from {from_ms}: {movements} movements in {pages} pages "
      f"({incomplete} cut short by the scan budget), {total:.2f} s in all; first page "
      f"{first:.0f} ms, median page {page_ms[len(page_ms)//2]:.0f} ms, slowest {page_ms[-1]:.0f} ms")
PY
