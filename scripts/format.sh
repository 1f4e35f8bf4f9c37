#!/usr/bin/env bash
# Formats the C++/CUDA sources with the tree's .clang-format (clang-format 14, Debian 12's: other
# versions break lines differently, so the check would flap between machines).
#   scripts/format.sh                 formats every tracked .h .cpp .cu .cuh file in place
#   scripts/format.sh --check         changes nothing; lists the files that would change, exit 1 if any
#   scripts/format.sh [--check] FILE...   only these files
set -euo pipefail
cd "$(dirname "$0")/.."
check=0
if [ "${1:-}" = "--check" ]; then check=1; shift; fi

if ! command -v clang-format >/dev/null; then
  echo "[format] apt-get install clang-format"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  $SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq clang-format >/dev/null
fi
version=$(clang-format --version | grep -Eo 'version [0-9]+' | grep -Eo '[0-9]+')
[ "$version" = 14 ] || echo "[format] warning: clang-format $version; the style is checked with 14" >&2

if [ $# -gt 0 ]; then files=("$@"); else mapfile -t files < <(git ls-files '*.h' '*.cpp' '*.cu' '*.cuh'); fi
if [ "$check" = 1 ]; then
  bad=0
  for f in "${files[@]}"; do
    clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || { echo "$f"; bad=$((bad + 1)); }
  done
  echo "$bad of ${#files[@]} files need formatting"
  [ "$bad" -eq 0 ]
else
  clang-format -i "${files[@]}"
fi
