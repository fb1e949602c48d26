#!/usr/bin/env bash
# Runs every fuzz target in the module for a bounded time each
# (FUZZTIME, default 30s). A crasher fails the run; Go writes its input
# under the package's testdata/fuzz/, where it becomes a regression test
# that `go test` runs from then on: commit it.
set -euo pipefail
cd "$(dirname "$0")/.."
fuzztime="${FUZZTIME:-30s}"
found=0
while IFS=: read -r file name; do
  pkg="./$(dirname "$file")"
  tags=()
  case "$file" in integration/*) tags=(-tags integration) ;; esac # against the broker at AMQP_URL
  echo "== $name ($pkg, $fuzztime)"
  go test "${tags[@]}" -run '^$' -fuzz "^${name}\$" -fuzztime "$fuzztime" "$pkg"
  found=$((found + 1))
done < <(grep -r -o -E '^func Fuzz[A-Za-z0-9_]+' --include='*_test.go' . | sed -E 's#^\./##; s#:func #:#' | sort)
if [ "$found" -eq 0 ]; then
  echo "fuzz: no fuzz targets found" >&2
  exit 1
fi
echo "fuzz: $found targets ran $fuzztime each without a crash"
