#!/usr/bin/env bash
# ASan + UBSan run of the engine: builds the _core extension with -DDQ_SANITIZE=ON into
# build/asan (separate from the normal build), stages it with the Python sources under
# build/asan/stage, and runs the engine tests against it in a throwaway venv (build/asan/venv,
# which borrows the main venv's third-party packages through a .pth path entry but not its
# editable dflash_qualify install) with the ASan runtime LD_PRELOADed into python.
#
# Usage: scripts/sanitize.sh [extra pytest args]      (from anywhere; needs a dev venv first:
#        python3 -m venv .venv && .venv/bin/pip install '.[test]', or DQ_VENV=path/to/venv)
#   The one command for a sanitized engine run; the last line says "sanitize: clean (...)" and
#   the exit status is 0 only when the kernel tests (every SIMD path) and the engine tests
#   (scheduler, exactness, MMVQ cap, errors, sessions and the fuzzed engine API) passed with no ASan or UBSan report.
# Env:   JOBS (default 2) build parallelism; PYTEST_TARGETS overrides the test selection;
#        DQ_CUDA (default AUTO) is passed to CMake (OFF skips the CUDA objects: CPU-only check).
# Leak detection is off (CPython keeps interned objects alive at exit); any ASan report or UB
# aborts the run (halt_on_error / -fno-sanitize-recover), so exit status 0 means clean.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MAIN_PY="${DQ_VENV:-$ROOT/.venv}/bin/python"
BUILD="$ROOT/build/asan"
STAGE="$BUILD/stage"
VENV="$BUILD/venv"
JOBS="${JOBS:-2}"

[ -x "$MAIN_PY" ] || { echo "sanitize: $MAIN_PY not found; create the dev venv first: python3 -m venv .venv && .venv/bin/pip install '.[test]' (or set DQ_VENV)" >&2; exit 2; }
PYBIND11_DIR="$("$MAIN_PY" -m pybind11 --cmakedir)"
CMAKE="$("$MAIN_PY" -c 'import cmake, os; print(os.path.join(cmake.CMAKE_BIN_DIR, "cmake"))' 2>/dev/null || command -v cmake)"

"$CMAKE" -S "$ROOT" -B "$BUILD/cmake" -DDQ_SANITIZE=ON -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDQ_CUDA="${DQ_CUDA:-AUTO}" \
    -Dpybind11_DIR="$PYBIND11_DIR" -DPython_EXECUTABLE="$MAIN_PY" >/dev/null
"$CMAKE" --build "$BUILD/cmake" -j "$JOBS"
SO="$(ls "$BUILD"/cmake/_core*.so | head -n1)"

# Stage the package: Python sources by symlink, the sanitized extension by copy.
rm -rf "$STAGE"
mkdir -p "$STAGE/dflash_qualify/engine"
for f in "$ROOT"/engine/*.py; do ln -s "$f" "$STAGE/dflash_qualify/engine/"; done
cp "$SO" "$STAGE/dflash_qualify/engine/"
ln -s "$ROOT/harness" "$STAGE/dflash_qualify/harness"
[ -d "$ROOT/protocols" ] && ln -s "$ROOT/protocols" "$STAGE/dflash_qualify/protocols"

if [ ! -x "$VENV/bin/python" ]; then
    "$MAIN_PY" -m venv --without-pip "$VENV"
fi
SITE_MAIN="$("$MAIN_PY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
SITE_VENV="$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')"
echo "$SITE_MAIN" > "$SITE_VENV/main_venv_packages.pth"

# libstdc++ is preloaded too: python itself does not link it, and ASan must find the real
# __cxa_throw at start-up or its interceptor aborts on the first C++ exception.
ASAN_LIB="$(gcc -print-file-name=libasan.so)"
STDCXX_LIB="$(g++ -print-file-name=libstdc++.so)"
export LD_PRELOAD="$ASAN_LIB:$STDCXX_LIB${LD_PRELOAD:+:$LD_PRELOAD}"
# Reports go to files as well as being fatal: pytest's fd capture would swallow stderr.
REPORT="$BUILD/report"
rm -f "$REPORT".*
export ASAN_OPTIONS="detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=0:log_path=$REPORT"
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:log_path=$REPORT"
export PYTHONPATH="$STAGE"
cd "$ROOT"
# Check we really test the sanitized build, then run the engine tests.
"$VENV/bin/python" -c 'from dflash_qualify.engine import _core; assert _core.sanitize(), _core.__file__; print("sanitized core:", _core.__file__)'
# shellcheck disable=SC2086
set +e
"$VENV/bin/python" -m pytest -q -p no:cacheprovider ${PYTEST_TARGETS:-tests/test_kernels.py tests/test_scheduler.py tests/test_engine_exact.py tests/test_engine_mmvq_cap.py tests/test_engine_errors.py tests/test_engine_session.py tests/test_engine_fuzz.py} "$@"
rc=$?
if ls "$REPORT".* >/dev/null 2>&1; then
    echo "sanitize: sanitizer reports:" >&2
    cat "$REPORT".* >&2
    exit 1
fi
[ "$rc" -eq 0 ] && echo "sanitize: clean (ASan + UBSan, engine tests passed)"
exit "$rc"
