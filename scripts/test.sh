#!/usr/bin/env bash
# Clebsch: README command 2: set up what is missing, build, and run every test (ctest). Suites
# that cannot run here (no GPU, no CUDA toolkit) are reported as skipped, with their reasons.
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CLEBSCH_BUILD_DIR:-$root/build}
bash "$root/scripts/bootstrap.sh"
printf '\n== Tests\n' >&2
status=0
ctest --test-dir "$build" --output-on-failure -j "${CLEBSCH_TEST_JOBS:-2}" "$@" || status=$?
# ctest prints "Skipped" without the reason; the reasons are in its log (GoogleTest's
# GTEST_SKIP messages, pytest -rs lines, the placeholders of suites not built).
log="$build/Testing/Temporary/LastTest.log"
if [ -f "$log" ]; then
  # pytest -rs: "SKIPPED [n] file:line: reason"; GoogleTest: "file:line: Skipped" then the reason.
  reasons=$({
    grep -hE '^SKIPPED: |^SKIPPED \[' "$log" | sed -E 's/^SKIPPED \[([0-9]+)\] [^ ]+: /(x\1) /'
    awk '/: Skipped$/ { getline reason; print reason }' "$log"
  } | sort | uniq -c | sort -rn || true)
  if [ -n "$reasons" ]; then
    printf '\n== Skipped tests and why (from %s)\n%s\n' "$log" "$reasons" >&2
  fi
fi
exit $status
