#!/usr/bin/env bash
# Onboards a hub and two DFSPs through kasi's admin API, with the same
# requests a Mojaloop hub operator sends to central-ledger (curl only).
#
#   bash examples/onboard.sh                 # against http://127.0.0.1:3001
#   KASI_ADMIN=http://hub:3001 PAYER_URL=http://payer:4000 PAYEE_URL=http://payee:4000 \
#     bash examples/onboard.sh
#
# Settings (environment):
#   KASI_ADMIN       the hub's admin address       (default http://127.0.0.1:3001)
#   KASI_TOKEN       an admin bearer token, if the admin API requires one
#   CURRENCY         the currency of the accounts  (default USD)
#   PAYER, PAYEE     the two DFSPs' FSP ids         (default payerfsp, payeefsp)
#   PAYER_URL        where the payer DFSP takes callbacks (default http://127.0.0.1:4001)
#   PAYEE_URL        where the payee DFSP takes callbacks (default http://127.0.0.1:4002)
#   NET_DEBIT_CAP    each DFSP's net debit cap     (default 10000)
#   DEPOSIT          each DFSP's funds in          (default 5000)
#
# Stops at the first request the hub refuses, printing its answer.
set -euo pipefail

ADMIN=${KASI_ADMIN:-http://127.0.0.1:3001}
CURRENCY=${CURRENCY:-USD}
PAYER=${PAYER:-payerfsp}
PAYEE=${PAYEE:-payeefsp}
PAYER_URL=${PAYER_URL:-http://127.0.0.1:4001}
PAYEE_URL=${PAYEE_URL:-http://127.0.0.1:4002}
NET_DEBIT_CAP=${NET_DEBIT_CAP:-10000}
DEPOSIT=${DEPOSIT:-5000}

auth=()
if [ -n "${KASI_TOKEN:-}" ]; then
  auth=(-H "Authorization: Bearer $KASI_TOKEN")
fi

# admin METHOD PATH [BODY]: the request, its answer on stdout; fails on a
# status that is not 2xx.
admin() {
  local method=$1 path=$2 body=${3:-}
  local args=(-sS -X "$method" "${auth[@]}" -w '\n%{http_code}')
  if [ -n "$body" ]; then
    args+=(-H 'Content-Type: application/json' -d "$body")
  fi
  local answer status
  answer=$(curl "${args[@]}" "$ADMIN$path")
  status=${answer##*$'\n'}
  answer=${answer%$'\n'*}
  if [ "${status:0:1}" != 2 ]; then
    echo "onboard: $method $path answered $status: $answer" >&2
    exit 1
  fi
  printf '%s' "$answer"
}

step() { printf '%s\n' "-- $*" >&2; }

step "the hub's own accounts in $CURRENCY"
for type in HUB_MULTILATERAL_SETTLEMENT HUB_RECONCILIATION; do
  admin POST /participants/Hub/accounts "{\"type\":\"$type\",\"currency\":\"$CURRENCY\"}" >/dev/null
done

step "a settlement model: deferred net settlement"
admin POST /settlementModels '{
  "name": "DEFERREDNET",
  "settlementGranularity": "NET",
  "settlementInterchange": "MULTILATERAL",
  "settlementDelay": "DEFERRED",
  "requireLiquidityCheck": true,
  "ledgerAccountType": "POSITION",
  "autoPositionReset": true
}' >/dev/null

for dfsp in "$PAYER" "$PAYEE"; do
  if [ "$dfsp" = "$PAYER" ]; then url=$PAYER_URL; else url=$PAYEE_URL; fi

  step "$dfsp: the participant, with its POSITION and SETTLEMENT accounts"
  admin POST /participants "{\"name\":\"$dfsp\",\"currency\":\"$CURRENCY\"}" >/dev/null

  step "$dfsp: net debit cap $NET_DEBIT_CAP, initial position 0"
  admin POST "/participants/$dfsp/initialPositionAndLimits" "{
    \"currency\": \"$CURRENCY\",
    \"limit\": {\"type\": \"NET_DEBIT_CAP\", \"value\": $NET_DEBIT_CAP},
    \"initialPosition\": 0
  }" >/dev/null

  step "$dfsp: callback endpoints under $url"
  for endpoint in \
    "FSPIOP_CALLBACK_URL_TRANSFER_POST $url/transfers" \
    "FSPIOP_CALLBACK_URL_TRANSFER_PUT $url/transfers/{{transferId}}" \
    "FSPIOP_CALLBACK_URL_TRANSFER_ERROR $url/transfers/{{transferId}}/error" \
    "FSPIOP_CALLBACK_URL_PARTIES_GET $url/parties/{{partyIdType}}/{{partyIdentifier}}" \
    "FSPIOP_CALLBACK_URL_PARTIES_PUT $url/parties/{{partyIdType}}/{{partyIdentifier}}" \
    "FSPIOP_CALLBACK_URL_PARTIES_PUT_ERROR $url/parties/{{partyIdType}}/{{partyIdentifier}}/error" \
    "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT $url/participants/{{partyIdType}}/{{partyIdentifier}}" \
    "FSPIOP_CALLBACK_URL_PARTICIPANT_PUT_ERROR $url/participants/{{partyIdType}}/{{partyIdentifier}}/error" \
    "FSPIOP_CALLBACK_URL_QUOTES $url"; do
    read -r type value <<<"$endpoint"
    admin POST "/participants/$dfsp/endpoints" "{\"type\":\"$type\",\"value\":\"$value\"}" >/dev/null
  done

  step "$dfsp: $DEPOSIT $CURRENCY of liquidity into its SETTLEMENT account"
  # The SETTLEMENT account's id, from the account list (no jq needed).
  settlement=$(admin GET "/participants/$dfsp/accounts" | tr '{' '\n' \
    | grep '"ledgerAccountType":"SETTLEMENT"' | grep "\"currency\":\"$CURRENCY\"" \
    | sed -E 's/.*"id":([0-9]+).*/\1/' | head -n 1)
  transfer_id=$(cat /proc/sys/kernel/random/uuid 2>/dev/null || uuidgen | tr 'A-Z' 'a-z')
  admin POST "/participants/$dfsp/accounts/$settlement" "{
    \"transferId\": \"$transfer_id\",
    \"externalReference\": \"onboarding deposit\",
    \"action\": \"recordFundsIn\",
    \"reason\": \"initial liquidity\",
    \"amount\": {\"amount\": \"$DEPOSIT\", \"currency\": \"$CURRENCY\"}
  }" >/dev/null
done

step "done: positions and limits"
for dfsp in "$PAYER" "$PAYEE"; do
  printf '%s positions: %s\n' "$dfsp" "$(admin GET "/participants/$dfsp/positions")"
  printf '%s limits:    %s\n' "$dfsp" "$(admin GET "/participants/$dfsp/limits")"
done
