#!/usr/bin/env bash
# fuzz.sh BUDGET: runs every fuzz target of the module with -fuzztime=BUDGET,
# one after the other.
#
# BUDGET is a number of executions (20000x: what make test runs, the same
# work on every machine whatever its load) or a duration (5m: make fuzz).
# FUZZPARALLEL=N runs N fuzzing workers per target (default: one per CPU);
# make test runs 1 while the Go tests run beside it.
#
# With a duration, Go 1.26's fuzzing coordinator (internal/fuzz,
# CoordinateFuzzing) can report a bare "context deadline exceeded" when
# -fuzztime ends: its stop function only ignores the deadline when the
# workers' child context is already cancelled, and the parent's Done
# channel closes before that happens. No input failed and none is written.
# A target that fails that way, and only that way, is run once more; any
# other failure, and a second one, fails the run. A real finding always
# prints "Failing input written to" and fails again on every run. With a
# number of executions there is no deadline (the coordinator stops when the
# count is reached), so that race cannot happen and any failure fails the
# run at once.
set -uo pipefail
budget=${1:?usage: fuzz.sh BUDGET (e.g. 20000x or 5m)}
go=${GO:-go}
cd "$(dirname "$0")/.."

case $budget in
*x) attempts=1 ;; # executions: no deadline, no race to retry
*) attempts=2 ;;
esac
flags=()
[ -n "${FUZZPARALLEL:-}" ] && flags+=(-parallel "$FUZZPARALLEL")

targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort |
	xargs -r grep -H -o '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/')
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in $targets; do
	dir=$(dirname "${t%%:*}") name=${t##*:}
	for attempt in $(seq "$attempts"); do
		echo "fuzz $name in $dir: -fuzztime=$budget"
		"$go" test -run='^$' -fuzz="^$name\$" -fuzztime="$budget" "${flags[@]}" "./$dir" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		[ $rc -eq 0 ] && break
		if [ "$attempt" -lt "$attempts" ] && grep -q '^    context deadline exceeded$' "$log" &&
			! grep -q 'Failing input written to' "$log"; then
			echo "fuzz.sh: $name stopped on Go's fuzzing coordinator deadline race, no failing input; running it again"
			continue
		fi
		exit $rc
	done
done
