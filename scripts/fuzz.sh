#!/usr/bin/env bash
# fuzz.sh DURATION: runs every fuzz target of the module for DURATION each.
#
# Go 1.26's fuzzing coordinator (internal/fuzz, CoordinateFuzzing) can
# report a bare "context deadline exceeded" when -fuzztime ends: its stop
# function only ignores the deadline when the workers' child context is
# already cancelled, and the parent's Done channel closes before that
# happens. No input failed and none is written. A target that
# fails that way, and only that way, is run once more; any other failure,
# and a second one, fails the run. A real finding always prints "Failing
# input written to" and fails again on every run.
set -uo pipefail
duration=${1:?usage: fuzz.sh DURATION}
go=${GO:-go}
cd "$(dirname "$0")/.."

targets=$(grep -rl --include='*_test.go' '^func Fuzz' . | sort |
	xargs -r grep -H -o '^func Fuzz[A-Za-z0-9_]*' | sed 's/:func /:/')
[ -n "$targets" ] || { echo "fuzz.sh: no fuzz targets found" >&2; exit 1; }

log=$(mktemp)
trap 'rm -f "$log"' EXIT

for t in $targets; do
	dir=$(dirname "${t%%:*}") name=${t##*:}
	for attempt in 1 2; do
		echo "fuzz $name in $dir for $duration"
		"$go" test -run='^$' -fuzz="^$name\$" -fuzztime="$duration" "./$dir" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		[ $rc -eq 0 ] && break
		if [ $attempt -eq 1 ] && grep -q '^    context deadline exceeded$' "$log" &&
			! grep -q 'Failing input written to' "$log"; then
			echo "fuzz.sh: $name stopped on Go's fuzzing coordinator deadline race, no failing input; running it again"
			continue
		fi
		exit $rc
	done
done
