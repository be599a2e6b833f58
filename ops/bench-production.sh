#!/usr/bin/env bash
# The configuration a scheme runs, one row at a time, in one sitting:
# `kasi bench` (transfers) against an embedded hub in plain HTTP, then with
# mutual TLS, the hub's signatures (ES256, RS256), the DFSPs' signatures
# checked by the hub, on PostgreSQL alone and with a synchronous streaming
# standby, and all of it together. Each run measures the null hub just
# before (plain HTTP, same flow and users) for the ratio beside it.
#
#   ops/bench-production.sh ROUNDS BINARY [ROWS] [-- BENCH FLAGS]
#   ops/bench-production.sh 2 target/release/kasi
#   ops/bench-production.sh 1 target/release/kasi plain,mtls-es256 -- --duration 30
#
# ROWS (comma-separated, default all): plain mtls mtls-es256 mtls-rs256
# mtls-es256-verify pg pg-sync mtls-es256-pg-sync all. Bench flags default to 64 users for
# 15 s after 3 s of warm-up, null hub 5 s.
#
# The PostgreSQL rows run on two throw-away clusters this script makes
# (initdb, pg_basebackup; Debian's postgresql package, run as the postgres
# user when this runs as root) on ports 55432 (primary) and 55433
# (standby), removed at the end: `pg` with no synchronous standby
# (synchronous_commit on: the primary's fsync), `pg-sync` with the standby
# synchronous (synchronous_commit on: every commit waits for the standby's
# flush). A fresh database per run.
#
# The columns: transfers per second, e2e p99 ms, the null hub's transfers
# per second, kasi's share of it, the hub's and the harness's CPU µs per
# transfer, signatures the DFSPs verified, the hub's JWS pool's busy
# share (warm-up included), and whether positions net to zero. BENCH_PRODUCTION_OUT=DIR keeps each run's JSON summary there.
#
# BENCH_PRODUCTION_PERF=SECONDS also profiles the embedded hub of each run
# (`perf record -F 999 -g` attached for that long, from 3 s after the warm-
# up starts) and keeps, beside the JSON, the shares by shared object and
# the top symbols (`ROW-ROUND.perf.txt`).
set -euo pipefail

usage="usage: ops/bench-production.sh ROUNDS BINARY [ROWS] [-- BENCH FLAGS]"
rounds=${1:?$usage}
binary=$(realpath "${2:?$usage}")
shift 2
rows=plain,mtls,mtls-es256,mtls-rs256,mtls-es256-verify,pg,pg-sync,mtls-es256-pg-sync,all
if [[ $# -gt 0 && $1 != -- ]]; then
    rows=$1
    shift
fi
[[ ${1:-} == -- ]] && shift
flags=("$@")
if [[ ${#flags[@]} -eq 0 ]]; then
    flags=(--concurrency 64 --duration 15 --warmup 3 --null-hub-baseline 5)
fi

if [[ -n ${BENCH_PRODUCTION_OUT:-} ]]; then
    out=$BENCH_PRODUCTION_OUT
    mkdir -p "$out"
else
    out=$(mktemp -d)
fi

pg_dir=""
as_pg() {
    if [[ $(id -u) -eq 0 ]]; then
        runuser -u postgres -- "$@"
    else
        "$@"
    fi
}
stop_pg() {
    if [[ -n $pg_dir ]]; then
        as_pg "$pg_bin/pg_ctl" -D "$pg_dir/standby" -m immediate stop >/dev/null 2>&1 || true
        as_pg "$pg_bin/pg_ctl" -D "$pg_dir/primary" -m immediate stop >/dev/null 2>&1 || true
        rm -rf "$pg_dir"
    fi
    [[ -n ${BENCH_PRODUCTION_OUT:-} ]] || rm -rf "$out"
}
trap stop_pg EXIT

needs_pg=false
[[ ,$rows, == *pg* || ,$rows, == *,all,* ]] && needs_pg=true
if $needs_pg; then
    pg_bin=$(dirname "$(realpath "$(command -v initdb 2>/dev/null || ls /usr/lib/postgresql/*/bin/initdb | tail -1)")")
    pg_dir=$(mktemp -d /tmp/kasi-bench-pg-XXXXXX)
    chmod 755 "$pg_dir"
    [[ $(id -u) -eq 0 ]] && chown postgres "$pg_dir"
    as_pg "$pg_bin/initdb" -D "$pg_dir/primary" -U postgres -A trust >/dev/null
    cat >>"$pg_dir/primary/postgresql.conf" <<EOF
port = 55432
listen_addresses = '127.0.0.1'
unix_socket_directories = '$pg_dir'
wal_level = replica
max_wal_senders = 4
synchronous_standby_names = ''
max_connections = 100
shared_buffers = 256MB
EOF
    echo "host replication postgres 127.0.0.1/32 trust" >>"$pg_dir/primary/pg_hba.conf"
    as_pg "$pg_bin/pg_ctl" -D "$pg_dir/primary" -l "$pg_dir/primary.log" -w start >/dev/null
    as_pg "$pg_bin/pg_basebackup" -h 127.0.0.1 -p 55432 -U postgres -D "$pg_dir/standby" -R \
        -d "application_name=standby1" >/dev/null
    sed -i "s/^port = 55432/port = 55433/" "$pg_dir/standby/postgresql.conf"
    as_pg "$pg_bin/pg_ctl" -D "$pg_dir/standby" -l "$pg_dir/standby.log" -w start >/dev/null
fi
psql_primary() {
    as_pg psql -h 127.0.0.1 -p 55432 -U postgres -qAtc "$1" postgres
}
synchronous() { # '' or standby1
    psql_primary "ALTER SYSTEM SET synchronous_standby_names = '$1'" >/dev/null
    psql_primary "SELECT pg_reload_conf()" >/dev/null
    local deadline=$((SECONDS + 30))
    until [[ $(psql_primary "SHOW synchronous_standby_names") == "$1" ]]; do
        ((SECONDS < deadline)) || { echo "the primary did not take synchronous_standby_names='$1'" >&2; exit 1; }
        sleep 0.1
    done
    if [[ -n $1 ]]; then
        until [[ $(psql_primary "SELECT sync_state FROM pg_stat_replication WHERE application_name = '$1'") == sync ]]; do
            ((SECONDS < deadline)) || { echo "the standby did not become synchronous" >&2; exit 1; }
            sleep 0.1
        done
    fi
}
database=0
fresh_store() {
    database=$((database + 1))
    psql_primary "DROP DATABASE IF EXISTS kasibench$database" >/dev/null 2>&1
    psql_primary "CREATE DATABASE kasibench$database" >/dev/null
    echo "postgres://postgres@127.0.0.1:55432/kasibench$database"
}

row_flags() { # row
    case $1 in
        plain) ;;
        mtls) echo --tls ;;
        mtls-es256) echo --tls --hub-jws es256 ;;
        mtls-rs256) echo --tls --hub-jws rs256 ;;
        mtls-es256-verify) echo --tls --hub-jws es256 --dfsp-jws es256 ;;
        pg) synchronous ''; echo --store "$(fresh_store)" ;;
        pg-sync) synchronous standby1; echo --store "$(fresh_store)" ;;
        mtls-es256-pg-sync) synchronous standby1; echo --tls --hub-jws es256 --store "$(fresh_store)" ;;
        all) synchronous standby1; echo --tls --hub-jws es256 --dfsp-jws es256 --store "$(fresh_store)" ;;
        *) echo "unknown row $1" >&2; exit 2 ;;
    esac
}

profile() { # bench-pid out-prefix
    local hub="" deadline=$((SECONDS + 60))
    # The embedded hub: the bench's child `kasi serve`, after its null hub.
    until [[ -n $hub ]]; do
        ((SECONDS < deadline)) || return 0
        sleep 0.2
        hub=$(pgrep -P "$1" -f ' serve ' | head -1 || true)
    done
    sleep 5
    perf record -F 999 -g -o "$2.perf.data" -p "$hub" -- sleep "$BENCH_PRODUCTION_PERF" >/dev/null 2>&1 || return 0
    {
        echo "## by shared object"
        perf report -i "$2.perf.data" --no-children --sort dso --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -12
        echo "## top symbols"
        perf report -i "$2.perf.data" --no-children --sort sym --stdio -g none 2>/dev/null | grep -v '^#' | grep -v '^$' | head -40
    } >"$2.perf.txt"
    rm -f "$2.perf.data"
}

printf '%-18s %5s %9s %8s %8s %6s %7s %8s %9s %6s %s\n' \
    row round xfers/s p99_ms null/s ratio hub_us harn_us verified jws% net_zero
for round in $(seq 1 "$rounds"); do
    for row in ${rows//,/ }; do
        extra=$(row_flags "$row")
        result="$out/$row-$round.json"
        # shellcheck disable=SC2086 # the row's flags are words
        "$binary" bench --flow transfer "${flags[@]}" $extra \
            --no-report --quiet --json >"$result" 2>"$out/$row-$round.err" &
        bench=$!
        if [[ -n ${BENCH_PRODUCTION_PERF:-} ]]; then
            profile "$bench" "$out/$row-$round" &
        fi
        if ! wait "$bench"; then
            echo "$row round $round failed:" >&2
            tail -5 "$out/$row-$round.err" >&2
            exit 1
        fi
        wait
        python3 - "$row" "$round" "$result" <<'EOF'
import json, sys
row, round_, path = sys.argv[1:]
d = json.load(open(path))
c = d.get("cpu") or {}
null = d.get("null_hub_ratio") or {}
s = d.get("security") or {}
rate = d["completed_in_window"] / d["duration_s"]
fmt = lambda v, f: "-" if v is None else format(v, f)
failed = d["errors"] + d["timeouts"] + s.get("signatures_invalid", 0) + s.get("signatures_missing", 0)
print(f'{row:<18} {round_:>5} {rate:>9.0f} {d["e2e_p99_ms"]:>8.1f} '
      f'{fmt(null.get("null_hub_throughput_per_s"), ".0f"):>8} {fmt(null.get("ratio"), ".2f"):>6} '
      f'{fmt(c.get("hub_us_per_flow"), ".0f"):>7} {fmt(c.get("harness_us_per_flow"), ".0f"):>8} '
      f'{s.get("signatures_verified", 0):>9} '
      f'{fmt((d.get("hub_jws_pool") or {}).get("utilisation", None) and 100 * d["hub_jws_pool"]["utilisation"], ".0f"):>6} '
      f'{d["positions_net_zero"]}'
      + (f'  FAILED {failed}' if failed else ''))
EOF
    done
done
