#!/usr/bin/env bash
# Every figure of docs/benchmarks.md, on SQLite and PostgreSQL: build the release binaries, make
# sure PostgreSQL answers (a fresh `agentry_bench` database), run the whole suite of scenarios
# on each database, write a JSON record per scenario into bench/results/, and rewrite the table
# in docs/benchmarks.md. About 6 minutes after the build on a 2-core machine.
#
#   scripts/bench.sh            # the full suite
#   scripts/bench.sh --smoke    # tiny counts: checks the harness, the figures mean nothing
#
# AGENTRY_BENCH_POSTGRES_URL points it at another PostgreSQL.
set -euo pipefail
cd "$(dirname "$0")/.."

# shellcheck source=scripts/services.sh
. scripts/services.sh

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
if [[ " $* " == *" --smoke "* ]]; then
  out=$(mktemp -d)
fi

for db in sqlite "$pg_url"; do
  say "benchmarks on ${db%%:*}"
  target/release/agentry-bench --database "$db" --out "$out" all "$@"
done

if [ "$out" = bench/results ]; then
  say "docs/benchmarks.md"
  target/release/agentry-bench report
else
  say "smoke run done; records in $out (docs/benchmarks.md unchanged)"
fi
