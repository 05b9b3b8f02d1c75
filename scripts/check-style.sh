#!/usr/bin/env bash
# Clebsch: the formatter and the linter on the files changed since a base commit (.ci/run runs
# it before the tests). C++ and CUDA: clang-format with the repository's .clang-format (Debian's
# clang-format 14, installed when missing). Python: ruff (pinned below, installed into a venv
# under the cache) with ruff.toml: `ruff check` and `ruff format --check`.
#   scripts/check-style.sh [BASE]   BASE defaults to the commit in .ci/style-base; a clone without
#                                   that commit checks every file.
# kernels/templates/ is never formatted: its text is pasted into the generated modules and keys
# their caches (kernels/README.md).
set -euo pipefail
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
cache=${CLEBSCH_CACHE:-$HOME/.cache/clebsch}
ruff_version=0.17.6

base=${1:-$(cat .ci/style-base)}
if git cat-file -e "$base^{commit}" 2>/dev/null; then
  mapfile -t files < <(git diff --name-only --diff-filter=ACMR "$base" -- .)
  mapfile -t -O "${#files[@]}" files < <(git ls-files --others --exclude-standard)
  scope="changed since ${base:0:12}"
else
  mapfile -t files < <(git ls-files)
  scope="all (base $base not in this clone)"
fi
cxx=() py=()
for f in "${files[@]}"; do
  [ -f "$f" ] || continue
  case "$f" in
    kernels/templates/*|unittest/kernels/golden*) ;;
    *.h|*.cpp|*.cu|*.cuh) cxx+=("$f") ;;
    *.py) py+=("$f") ;;
  esac
done
echo "clebsch style: ${#cxx[@]} C++ and ${#py[@]} Python files, $scope"

if ! command -v clang-format >/dev/null; then
  sudo_cmd=(); [ "$(id -u)" -eq 0 ] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq --no-install-recommends clang-format >/dev/null
fi
ruff=$cache/venv-tools/bin/ruff
if ! "$ruff" --version 2>/dev/null | grep -qx "ruff $ruff_version"; then
  python3 -m venv "$cache/venv-tools"
  "$cache/venv-tools/bin/pip" install -q "ruff==$ruff_version"
fi

status=0
if [ ${#cxx[@]} -gt 0 ] && ! clang-format --dry-run -Werror "${cxx[@]}"; then
  echo "clebsch style: run clang-format -i on the files above" >&2
  status=1
fi
if [ ${#py[@]} -gt 0 ]; then
  "$ruff" check --quiet "${py[@]}" || { echo "clebsch style: ruff check failed (above)" >&2; status=1; }
  "$ruff" format --quiet --check "${py[@]}" || { echo "clebsch style: run $ruff format on the files above" >&2; status=1; }
fi
[ $status -eq 0 ] && echo "clebsch style: clean"
exit $status
