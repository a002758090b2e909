#!/usr/bin/env bash
# Where a one-tool run's CPU goes, in figures that do not depend on the machine's load
# (docs/benchmarks.md, "Where the CPU goes"):
#
# - callgrind: the release `agentry` under `valgrind --tool=callgrind`, driven by
#   `agentry-bench runs`; counters zeroed after a warm-up and dumped after a measured window;
#   the runs in the window are read from the server's `agentry_runs_total` at both ends.
#   Prints instructions per run and the top inclusive functions per run.
# - context switches per thread group (voluntary and involuntary), from
#   /proc/<pid>/task/*/status over the same window, per run.
#
#   scripts/profile.sh [--database URL] [--clients N] [--warmup S] [--secs S] [--out DIR]
#   scripts/profile.sh --switches-only ...   # no valgrind: the release binary itself
#
# Needs the release build (`cargo build --release -p agentry-gateway -p agentry-bench`).
set -euo pipefail
cd "$(dirname "$0")/.."

database=sqlite
clients=1
warmup=30
secs=45
out=
valgrind=1
while [ $# -gt 0 ]; do
  case "$1" in
    --database) database=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --secs) secs=$2; shift 2 ;;
    --out) out=$2; shift 2 ;;
    --switches-only) valgrind=0; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done

target=${CARGO_TARGET_DIR:-target}/release
[ -x "$target/agentry" ] && [ -x "$target/agentry-bench" ] || {
  echo "build the release binaries first: cargo build --release -p agentry-gateway -p agentry-bench" >&2
  exit 1
}
out=${out:-$(mktemp -d /tmp/agentry-profile.XXXXXX)}
mkdir -p "$out"
wrapper=$out/agentry
if [ "$valgrind" = 1 ]; then
  cat >"$wrapper" <<EOF
#!/bin/sh
exec valgrind --tool=callgrind --callgrind-out-file=$out/callgrind.out.%p $(realpath "$target/agentry") "\$@"
EOF
else
  printf '#!/bin/sh\nexec %s "$@"\n' "$(realpath "$target/agentry")" >"$wrapper"
fi
chmod +x "$wrapper"

# The bench runs long enough for the warm-up, the window and its own start and stop.
"$target/agentry-bench" --agentry "$wrapper" --database "$database" --out "$out/records" \
  runs --clients "$clients" --duration-secs $((warmup + secs + 60)) >"$out/bench.log" 2>&1 &
bench=$!
pid=
# The bench is stopped before its duration is over: its server goes with it.
trap 'kill $bench ${pid:-} 2>/dev/null || true' EXIT

# The server: the child of the bench whose command line is the wrapper's target.
for _ in $(seq 1 600); do
  for c in $(pgrep -P "$bench" || true); do
    if tr '\0' ' ' <"/proc/$c/cmdline" 2>/dev/null | grep -q 'agentry serve\|agentry.*serve'; then
      pid=$c
    fi
  done
  [ -n "$pid" ] && break
  sleep 0.5
done
[ -n "$pid" ] || { echo "no server process found; see $out/bench.log" >&2; exit 1; }

port() {
  ss -ltnpH 2>/dev/null | awk -v p="pid=$pid," '$0 ~ p {split($4, a, ":"); print a[length(a)]; exit}'
}
for _ in $(seq 1 600); do
  [ -n "$(port)" ] && break
  sleep 0.5
done
metrics_url="http://127.0.0.1:$(port)/metrics"
runs_total() {
  curl -sf "$metrics_url" | awk '/^agentry_runs_total/ {s += $NF} END {printf "%d\n", s}'
}
statements_total() {
  curl -sf "$metrics_url" | awk '/^agentry_db_statements_total/ {s += $NF} END {printf "%d\n", s}'
}
snapshot() {
  for t in /proc/"$pid"/task/*; do
    name=$(cat "$t/comm" 2>/dev/null) || continue
    awk -v id="${t##*/}" -v n="$name" '/^voluntary_ctxt_switches/ {v = $2}
      /^nonvoluntary_ctxt_switches/ {i = $2} END {print id "\t" n "\t" v "\t" i}' "$t/status" 2>/dev/null
  done
}

sleep "$warmup"
[ "$valgrind" = 1 ] && callgrind_control -z "$pid" >/dev/null
runs0=$(runs_total)
sql0=$(statements_total)
snapshot >"$out/switches.0"
sleep "$secs"
[ "$valgrind" = 1 ] && callgrind_control -d "$pid" >/dev/null
snapshot >"$out/switches.1"
runs1=$(runs_total)
sql1=$(statements_total)
runs=$((runs1 - runs0))
echo "runs in the window: $runs (clients $clients, $secs s, database ${database%%:*})"
echo "SQL statements per run: $(awk -v a="$sql0" -v b="$sql1" -v n="$runs" 'BEGIN {printf "%.1f", (b - a) / n}')"

# Context switches per run by thread group (threads that came or went in the window are
# counted from zero or left out).
awk -F'\t' -v n="$runs" '
  function group(name) { sub(/[-_ #:]*[0-9]+$/, "", name); return name }
  NR == FNR { v0[$1] = $3; i0[$1] = $4; next }
  { g = group($2); v[g] += $3 - v0[$1]; i[g] += $4 - i0[$1]; cnt[g]++ }
  END {
    printf "%-28s %8s %12s %12s\n", "threads", "count", "voluntary", "involuntary"
    for (g in v) { printf "%-28s %8d %12.1f %12.1f\n", g, cnt[g], v[g] / n, i[g] / n; tv += v[g]; ti += i[g] }
    printf "%-28s %8s %12.1f %12.1f\n", "all (per run)", "", tv / n, ti / n
  }' "$out/switches.0" "$out/switches.1" | tee "$out/switches.txt"

if [ "$valgrind" = 1 ]; then
  sleep 2
  dump=$(ls -t "$out"/callgrind.out.* | head -1)
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/ {gsub(",", "", $1); print $1; exit}')
  echo "instructions in the window: $total; per run: $((total / runs))"
  callgrind_annotate --inclusive=yes --threshold=99 "$dump" 2>/dev/null | sed -n '1,400p' >"$out/inclusive.txt"
  echo "profile: $dump; inclusive costs: $out/inclusive.txt"
fi
echo "records and logs: $out"
