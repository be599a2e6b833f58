#!/usr/bin/env bash
# The chaos benchmark: transfers under load through a pair of kasi
# processes on one throw-away PostgreSQL cluster while, on a seeded
# schedule, kasi processes are SIGKILLed or paused, the database is
# crashed, restarted or made to hang, and either process is cut off from
# it (crates/kasi/tests/chaos.rs; CI runs the same test for 60 s with
# seed 1). Prints the schedule and the report: acknowledged vs found,
# payers never told, seconds with nobody serving while the database was
# up, the longest such gap. The test fails if anything is lost or untold.
#
#   ops/chaos.sh [SECONDS [SEED]]     # default: 600 s, a random seed
#   CHAOS_PROFILE=release ops/chaos.sh  # the kasi processes built optimized
#
# Needs PostgreSQL's server binaries (initdb, pg_ctl), as `bash .ci/run`.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds=${1:-600}
seed=${2:-$(od -An -N4 -tu4 /dev/urandom | tr -d ' ')}
echo "chaos: ${seconds} s, seed ${seed}; $(date -u +%FT%TZ); $(git rev-parse --short HEAD); $(nproc) cores" >&2
profile=()
[ "${CHAOS_PROFILE:-}" = release ] && profile=(--release)
KASI_CHAOS_SECONDS=$seconds KASI_CHAOS_SEED=$seed \
  cargo test --locked "${profile[@]}" -p kasi --test chaos -- --nocapture 2>&1 \
  | grep --line-buffered -E '^chaos|^test |panicked|assertion|nobody' 
