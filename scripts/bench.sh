#!/usr/bin/env bash
# Every figure of docs/benchmarks.md, on SQLite and PostgreSQL: build the release binaries, make
# sure PostgreSQL answers (a fresh `agentry_bench` database), run the whole suite of scenarios
# on each database, write a JSON record per scenario into bench/results/, and rewrite the table
# in docs/benchmarks.md. Then the cluster-mode scenarios (issue 13: replicas of the release
# binary on the same PostgreSQL database and the local Redis, database 15 with a key prefix of
# the run's own). About 6 minutes for the suite and 6 more for the cluster scenarios after the
# build on a 2-core machine (the suite's 30-minute soak comes on top).
#
#   scripts/bench.sh                # the full suite, then the cluster scenarios
#   scripts/bench.sh --no-cluster   # without the cluster scenarios (no Redis needed)
#   scripts/bench.sh --cluster-only # only the cluster scenarios
#   scripts/bench.sh --smoke        # tiny counts: checks the harness, the figures mean nothing
#
# AGENTRY_BENCH_POSTGRES_URL points it at another PostgreSQL, AGENTRY_BENCH_REDIS_URL at another
# Redis (default redis://127.0.0.1:6379/15).
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/services.sh
. scripts/services.sh

cluster=yes
suite=yes
args=()
for arg in "$@"; do
  case "$arg" in
    --no-cluster) cluster=no ;;
    --cluster-only) suite=no ;;
    *) args+=("$arg") ;;
  esac
done
redis_url="${AGENTRY_BENCH_REDIS_URL:-redis://127.0.0.1:6379/15}"
if [ "$cluster" = yes ] && [ -z "${AGENTRY_BENCH_REDIS_URL:-}" ]; then
  ensure_redis
fi

pg_url="${AGENTRY_BENCH_POSTGRES_URL:-}"
if [ -z "$pg_url" ]; then
  ensure_postgres
  # A fresh database: tables grown by earlier runs would colour the figures.
  psql -h 127.0.0.1 -U postgres -qc "DROP DATABASE IF EXISTS agentry_bench" >/dev/null
  psql -h 127.0.0.1 -U postgres -qc "CREATE DATABASE agentry_bench" >/dev/null
  pg_url="postgres://postgres@127.0.0.1:5432/agentry_bench"
fi

say "building the release binaries"
cargo build --release --locked -p agentry-gateway -p agentry-bench

# Smoke figures mean nothing: they go to a temporary directory and leave the document alone.
out=bench/results
if [[ " ${args[*]-} " == *" --smoke "* ]]; then
  out=$(mktemp -d)
fi

if [ "$suite" = yes ]; then
  for db in sqlite "$pg_url"; do
    say "benchmarks on ${db%%:*}"
    target/release/agentry-bench --database "$db" --out "$out" all ${args[@]+"${args[@]}"}
  done
fi
if [ "$cluster" = yes ]; then
  say "cluster-mode benchmarks (PostgreSQL + Redis)"
  target/release/agentry-bench --database "$pg_url" --redis "$redis_url" --out "$out" \
    cluster ${args[@]+"${args[@]}"}
fi

if [ "$out" = bench/results ]; then
  say "docs/benchmarks.md"
  target/release/agentry-bench report
else
  say "smoke run done; records in $out (docs/benchmarks.md unchanged)"
fi
