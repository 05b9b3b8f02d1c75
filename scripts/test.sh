#!/usr/bin/env bash
# Clebsch: README command 2: set up what is missing, build, and run every test (ctest).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build=${CLEBSCH_BUILD_DIR:-$root/build}
bash "$root/scripts/bootstrap.sh"
printf '\n== Tests\n' >&2
ctest --test-dir "$build" --output-on-failure -j "${CLEBSCH_TEST_JOBS:-2}" "$@"
