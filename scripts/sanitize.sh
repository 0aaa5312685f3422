#!/usr/bin/env bash
# The CPU suite built with AddressSanitizer and UndefinedBehaviorSanitizer (-Db_sanitize=address,
# undefined, -O1 and line tables as ASan advises: a third of -O2 -g's compile time; no CUDA; LibTorch
# loaded but not itself instrumented: its allocations still go
# through ASan's malloc, so our misuse of its memory is caught). docs/testing.md says what it
# covers and what it does not.
#
# Usage: scripts/sanitize.sh [--elements] [builddir] [-- extra meson test args]
#   (default)    builds everything in builddir (default: build-asan) and runs every CPU test.
#   --elements   builds and runs only the elements' test binaries (every file under tests/elements/,
#                all nine elements, but the GPU ones) and what they run: the part CI runs.
# Any sanitizer report fails the test that produced it; the report is in the test's log (printed
# with --print-errorlogs, and in builddir/meson-logs/testlog.txt).
set -euo pipefail
cd "$(dirname "$0")/.."
ELEMENTS=0
if [ "${1:-}" = "--elements" ]; then
  ELEMENTS=1
  shift
fi
BUILD="build-asan"
if [ $# -gt 0 ] && [ "$1" != "--" ]; then
  BUILD="$1"
  shift
fi
[ "${1:-}" = "--" ] && shift

bash scripts/setup.sh

if [ ! -f "$BUILD/build.ninja" ]; then
  # No typelib: g-ir-scanner's dump program would link the instrumented library, and the
  # Python tests run an uninstrumented interpreter (the unsanitized build runs them).
  meson setup "$BUILD" -Dpython="$PWD/.venv/bin/python" -Dcuda=disabled -Ddebuginfo=lines \
    -Db_sanitize=address,undefined -Doptimization=1 -Dintrospection=disabled
fi

if [ $ELEMENTS = 1 ]; then
  # Every element's tests: the binaries tests/meson.build makes of tests/elements/*/test_*.cpp
  # (named after their files), those this configuration builds (an element whose library is
  # missing is not built, nor its tests).
  ELEMENT_TESTS=()
  all_targets=$(ninja -C "$BUILD" -t targets all)
  for f in tests/elements/*/test_*.cpp; do
    t=$(basename "$f" .cpp)
    case "$t" in *_gpu) continue ;; esac
    grep -q "^tests/$t:" <<<"$all_targets" && ELEMENT_TESTS+=("$t")
  done
  targets=()
  for t in "${ELEMENT_TESTS[@]}"; do targets+=("tests/$t"); done
  # test_pi0infer runs tools/pi0-model and gst-launch-1.0 with the plugin, test_pi0actionsink
  # runs tools/pi0-robotsim; the tokenizer's shim is a module loaded at run time.
  targets+=(tools/pi0-model/pi0-model tools/pi0-robotsim/pi0-robotsim gst/libgstpi0.so)
  grep -q '^inference/io/libpi0spm.so:' <<<"$all_targets" && targets+=(inference/io/libpi0spm.so)
  ninja -C "$BUILD" "${targets[@]}"
  selection=("${ELEMENT_TESTS[@]}")
else
  ninja -C "$BUILD"
  selection=(--no-suite gpu)
fi

SUPP="$PWD/scripts/sanitize"
# ASan: the first error ends the process with its stack. Leaks: see scripts/sanitize/lsan.supp
# for what is suppressed and why. Tools the tests start (pi0-model, pi0-robotsim) are
# instrumented too and read the same options; uninstrumented children (the Python oracles,
# gst-plugin-scanner) ignore them.
export ASAN_OPTIONS="halt_on_error=1:abort_on_error=0:print_summary=1:detect_leaks=1:check_initialization_order=1:strict_init_order=1"
export LSAN_OPTIONS="suppressions=$SUPP/lsan.supp:print_suppressions=0"
# UBSan goes on after a report by default: every report is fatal here, with its stack.
export UBSAN_OPTIONS="halt_on_error=1:print_stacktrace=1:print_summary=1:suppressions=$SUPP/ubsan.supp"

status=0
meson test -C "$BUILD" --no-rebuild --print-errorlogs --num-processes 2 --timeout-multiplier 4 \
  "${selection[@]}" "$@" || status=$?
exit $status
