#!/usr/bin/env bash
# The test suite under load: one busy loop per core (or BUSY of them) runs beside `make test`
# (or `make $TARGET`) RUNS times; each run's result and time is printed and the loops are
# ended, whatever happens.
# A test that fails only here depends on the machine's speed: hold its children instead
# (docs/development.md, "Holding children").
#
#   scripts/loaded_suite.sh                  # 3 runs, one busy loop per core
#   RUNS=10 BUSY=2 TEST_WORKERS=3 scripts/loaded_suite.sh
#   TARGET=test-ray RUNS=3 scripts/loaded_suite.sh   # the Ray cluster's tests
set -uo pipefail
cd "$(dirname "$0")/.."
runs="${RUNS:-3}"
busy="${BUSY:-$(nproc)}"
workers="${TEST_WORKERS:-2}"
target="${TARGET:-test}"
log_dir="$(mktemp -d)"

loops=()
stop_loops() {
  for pid in "${loops[@]}"; do kill "$pid" 2>/dev/null; done
  wait "${loops[@]}" 2>/dev/null
}
trap stop_loops EXIT
for _ in $(seq "$busy"); do
  (while :; do :; done) &
  loops+=("$!")
done

echo "$busy busy loops (pids ${loops[*]}), $runs runs of make $target TEST_WORKERS=$workers"
green=0
for run in $(seq "$runs"); do
  start=$(date +%s)
  if make "$target" TEST_WORKERS="$workers" >"$log_dir/run$run.log" 2>&1; then
    green=$((green + 1))
    verdict=green
  else
    verdict=RED
  fi
  summary="$(grep -E '(passed|failed|error)' "$log_dir/run$run.log" | tail -1)"
  echo "run $run: $verdict in $(($(date +%s) - start)) s: $summary"
  grep -E '^(FAILED|ERROR) ' "$log_dir/run$run.log" | sed 's/^/    /'
done
echo "$green of $runs green; logs in $log_dir"
[ "$green" -eq "$runs" ]
