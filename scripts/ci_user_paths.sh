#!/usr/bin/env bash
# CI: the paths a new user takes, on this checkout (.ci/run calls it after scripts/test.sh).
#  1. pip wheel . in a fresh virtual environment (ATTNSERVE_CUDA=OFF: a CUDA wheel takes too long on
#     the 2-core CI machine), install it there, import it from outside the tree and run an op.
#  2. cmake --install of the test build into a prefix; a tiny consumer finds it with
#     find_package(attnserve), builds and runs.
#  3. attnserve as a subproject: configure only, tests/demo/install must be off.
#  4. the Python API fuzz test (tests/fuzz): a fixed seed and a random one, each case in a subprocess.
# Prints the seconds each step took.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
BUILD=${BUILD_DIR:-build}
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
JOBS=${JOBS:-$(nproc)}
step() { echo "[user-paths] $*"; }
t0=$SECONDS

# ---- 1. wheel in a fresh venv
python3 -m venv "$WORK/venv"
VPY="$WORK/venv/bin/python"
step "pip wheel . (ATTNSERVE_CUDA=OFF)"
# A fresh build folder inside the tree (build-wheel, git-ignored): its paths are relative to the tree,
# so ccache (when present) serves another clone's compiles of the same sources.
rm -rf "$ROOT/build-wheel"
ATTNSERVE_CUDA=OFF CMAKE_BUILD_PARALLEL_LEVEL=$JOBS "$VPY" -m pip wheel -q --disable-pip-version-check \
  --config-settings=build-dir="$ROOT/build-wheel" -w "$WORK/wheels" . >"$WORK/wheel.log" 2>&1 \
  || { tail -50 "$WORK/wheel.log"; exit 1; }
wheel=$(ls "$WORK"/wheels/attnserve-*.whl)
size=$(stat -c %s "$wheel")
step "built $(basename "$wheel") ($size bytes)"
python3 - "$wheel" <<'PY'
import sys, zipfile
names = zipfile.ZipFile(sys.argv[1]).namelist()
need = ["attnserve/__init__.py", "attnserve/py.typed", "attnserve/_attnserve.pyi"]
missing = [n for n in need if n not in names] + ([] if any(n.startswith("attnserve/_attnserve.") and n.endswith(".so") for n in names) else ["attnserve/_attnserve*.so"])
if missing: sys.exit(f"wheel lacks {missing}")
PY
"$VPY" -m pip install -q --disable-pip-version-check "$wheel"
(cd "$WORK" && "$VPY" "$ROOT/tests/install/smoke.py")
t1=$SECONDS

# ---- 2. cmake --install + find_package consumer
step "cmake --install $BUILD -> prefix; consumer with find_package(attnserve)"
cmake --install "$BUILD" --prefix "$WORK/prefix" >/dev/null
test -f "$WORK/prefix/lib/cmake/attnserve/attnserveConfig.cmake"
test -f "$WORK/prefix/include/attnserve/version.h"
cmake -S tests/install -B "$WORK/consumer" -DCMAKE_PREFIX_PATH="$WORK/prefix" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$WORK/consumer" -j "$JOBS" >/dev/null
"$WORK/consumer/consumer"
t2=$SECONDS

# ---- 3. subproject defaults (configure only)
step "add_subdirectory(attnserve): tests/demo/install default OFF"
cmake -S tests/install/subproject -B "$WORK/subproject" -DATTNSERVE_CUDA=OFF >/dev/null
t3=$SECONDS

# ---- 4. fuzz the Python API (in-tree extension, as the test suite uses it)
step "fuzz the Python API"
PYTHONPATH="$ROOT/python" python3 tests/fuzz/fuzz_api.py --seed 1234 --cases "${FUZZ_CASES:-300}"
PYTHONPATH="$ROOT/python" python3 tests/fuzz/fuzz_api.py --cases "${FUZZ_CASES:-300}"
t4=$SECONDS

echo "[user-paths] seconds: wheel+venv $((t1 - t0)), install+consumer $((t2 - t1)), subproject $((t3 - t2)), fuzz $((t4 - t3)), total $((t4 - t0))"
echo "user paths: ok"
