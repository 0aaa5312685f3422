#!/usr/bin/env bash
# SPDX-License-Identifier: LGPL-2.1-or-later
#
# The GPU check (docs/gpu.md says how to call it through the device tool and how to read what
# it writes). On a machine with an NVIDIA GPU, nvcc, a C++ compiler, meson, ninja and a Python
# whose torch has CUDA, but no GStreamer and no network: unpacks the bundle made by
# scripts/gpu-bundle.sh into a private prefix (nothing is installed system-wide), builds gst-pi0
# against it with all cores, then runs the STAGES below, each under its own timeout and all
# inside one time budget, and writes one summary ($OUT/gpu-summary.md) and the logs
# ($OUT/gpu-logs.tar.gz).
#
# usage: scripts/gpu-check.sh [BUNDLE_DIR [WORK_DIR]]   (defaults: .gpu/bundle, build-gpu)
# env:   OUT=DIR             where the summary and the logs go (default: WORK_DIR)
#        GPU_CHECK_STAGES    stage names to run, in list order (default: every stage of STAGES;
#                            "none": unpack, configure and build only; EXTRA_STAGES by name)
#        GPU_CHECK_BUDGET    seconds for everything, unpack and build included (default 480)
#        GPU_CHECK_BUILD     "auto" (what the chosen stages run) or "all" (default auto)
#        GPU_CHECK_JOBS      build jobs (default: all cores)
#        GPU_ARCHS           compute capabilities, e.g. 90 (default: nvidia-smi's, else 80;90)
#        PYTHON              Python whose torch provides LibTorch (default: python3)
#        CONFIGURE_ONLY=1    stop after meson setup
set -uo pipefail

# ---- the stages: one line each, "name|timeout in s|command" ----
# A command runs with bash in the repository root, with the bundle's environment and these
# variables: $BUILD (the build folder), $PI0_MODEL, $E2E, $PREP_BENCH (its binaries), $BUNDLE,
# $WORK. It passes when it exits 0; 77 means skipped (with its reason as the last line printed).
# Each gets min(its timeout, what is left of the budget); one left with under 15 s is skipped.
# model-rtc: real-time chunking's cost per chunk (plain, guided J = I, guided VJP; issue 13).
# model-pi05: pi0.5 at full size, CUDA graph then eager (issue 26); its e2e is an extra stage
# (GPU_CHECK_STAGES=e2e-pi05), as the budget has no room for it after the others.
# vs-peers: our column of bench/vs-peers (issue 43) at full size, bf16, CUDA graph: the peers
# cannot run there (no network, and LeRobot's and openpi's environments are far over the
# call's 64 MiB), so our worker runs alone on observations of the same layout (vs_peers below).
# Later GPU rows (batched serving throughput): add a line here; what it prints goes into the
# summary.
STAGES=(
  'gpu-suite|150|meson test -C "$BUILD" --no-rebuild --suite gpu --print-errorlogs && no_skip_with_gpu'
  'prep-bench|45|"$PREP_BENCH" --cuda-only --iterations 200'
  'model-graph|90|"$PI0_MODEL" bench --config pi0 --device cuda --dtype bf16 --iters 30 --warmup 5'
  'model-eager|75|"$PI0_MODEL" bench --config pi0 --device cuda --dtype bf16 --iters 30 --warmup 5 --no-graph'
  'e2e|90|"$E2E" --model builtin:pi0 --device cuda --precision bf16 --width 1920 --height 1080 --fps 30 --duration 15'
  'vs-peers|90|vs_peers builtin:pi0'
  'model-rtc|60|"$PI0_MODEL" bench --config pi0 --device cuda --dtype bf16 --iters 10 --warmup 3 --rtc'
  'model-pi05|100|"$PI0_MODEL" bench --config pi05 --device cuda --dtype bf16 --iters 20 --warmup 3 && "$PI0_MODEL" bench --config pi05 --device cuda --dtype bf16 --iters 20 --warmup 3 --no-graph'
  'gpu-decode|60|gpu_decode'
  'memcheck|120|meson test -C "$BUILD" --no-rebuild test_cudaprep_gpu --timeout-multiplier 4 --print-errorlogs --wrapper "compute-sanitizer --tool memcheck --error-exitcode 1"'
)
# Run only when named in GPU_CHECK_STAGES. The CPU suite's timeouts are stretched (a shared or
# traced machine, as in the rehearsal, is slow; timeouts are no assertions).
EXTRA_STAGES=(
  'e2e-pi05|90|"$E2E" --model builtin:pi05 --device cuda --precision bf16 --width 1920 --height 1080 --fps 30 --duration 15'
  'vs-peers-pi05|90|vs_peers builtin:pi05'
  'cpu-suite|3000|meson test -C "$BUILD" --no-rebuild --suite cpu --print-errorlogs --timeout-multiplier "${GPU_CHECK_TIMEOUT_MULTIPLIER:-3}"'
)
# The binaries the stages run (besides the gpu suite's tests, found by meson introspection);
# GPU_CHECK_BUILD=auto builds these, the libraries and modules, and nothing else.
STAGE_TARGETS=(bench/pi0-prep-bench tools/pi0-model/pi0-model bench/e2e bench/vs-peers-chain
               tools/pi0-robotsim/pi0-robotsim tests/test_cudaprep_gpu)

root=$(cd "$(dirname "$0")/.." && pwd)
t_start=$(date +%s)
budget=${GPU_CHECK_BUDGET:-480}
deadline=$((t_start + budget))
bundle=${1:-$root/.gpu/bundle}
[ -d "$bundle/debs" ] || { echo "gpu-check: no bundle in $bundle (make one with scripts/gpu-bundle.sh)" >&2; exit 2; }
bundle=$(cd "$bundle" && pwd)
work=${2:-$root/build-gpu}
mkdir -p "$work"
work=$(cd "$work" && pwd)
prefix=$work/prefix
build=$work/build
logs=$work/logs
out=${OUT:-$work}
mkdir -p "$prefix" "$logs" "$out"
summary=$out/gpu-summary.md

say() { printf '== [%3ds] %s\n' "$(($(date +%s) - t_start))" "$*" >&2; }
left() { echo $((deadline - $(date +%s))); }

# ---- 1. unpack the bundle (gpu-rehearse.sh proves this in a root without GStreamer) ----
multiarch=$( (gcc -print-multiarch 2>/dev/null || true) | head -1)
[ -n "$multiarch" ] || multiarch=$(uname -m)-linux-gnu
lib=$prefix/usr/lib/$multiarch

unpack_bundle() {
  local d tmp keep f
  for d in "$bundle"/debs/*.deb; do
    if command -v dpkg-deb >/dev/null 2>&1; then
      dpkg-deb -x "$d" "$prefix" || return 1
    else
      # No dpkg: a .deb is an ar archive holding data.tar.*.
      tmp=$(mktemp -d)
      (cd "$tmp" && ar x "$d" && tar -xf data.tar.* -C "$prefix") || return 1
      rm -rf "$tmp"
    fi
  done
  # Only the plugins the checks use: the rest of each plugin package needs libraries that are
  # not bundled, and the registry would try to load them.
  for f in "$lib"/gstreamer-1.0/libgst*.so; do
    keep=$(basename "$f" .so)
    grep -qxF "${keep#libgst}" "$bundle/plugins.keep" || rm -f "$f"
  done
  rm -rf "$prefix/usr/share/doc" "$prefix/usr/share/man" "$prefix/usr/share/locale"
  # pkg-config files and a few scripts name /usr: point them at the prefix.
  find "$prefix" -name '*.pc' -print0 | xargs -0 -r sed -i \
    -e "s|^prefix=/usr\$|prefix=$prefix/usr|" -e "s|=/usr/|=$prefix/usr/|g" \
    -e "s|-I/usr/|-I$prefix/usr/|g" -e "s|-L/usr/|-L$prefix/usr/|g"
  mkdir -p "$work/bin"
  ln -sf "$prefix/usr/bin/pkgconf" "$work/bin/pkg-config"
}

if [ ! -f "$prefix/.unpacked" ] || [ "$bundle/MANIFEST" -nt "$prefix/.unpacked" ]; then
  say "unpacking $(ls "$bundle"/debs/*.deb | wc -l) packages into $prefix"
  rm -rf "$prefix" && mkdir -p "$prefix"
  unpack_bundle || { echo "gpu-check: unpacking the bundle failed" >&2; exit 1; }
  touch "$prefix/.unpacked"
fi

# The bundle's environment, also written to $WORK/env.sh for whoever wants the same (the
# rehearsal's proof uses it). PKG_CONFIG_LIBDIR, not _PATH: only the bundle's .pc files.
# GST_REGISTRY, not GST_REGISTRY_1_0, which would override the tests' own registries.
cat >"$work/env.sh" <<EOF
export PKG_CONFIG_LIBDIR=$lib/pkgconfig:$prefix/usr/share/pkgconfig
unset PKG_CONFIG_PATH
export PKG_CONFIG=$prefix/usr/bin/pkgconf
export LD_LIBRARY_PATH=$lib:$prefix/lib/$multiarch\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}
export PATH=$work/bin:$prefix/usr/bin\${CUDA_BIN:+:\$CUDA_BIN}:\$PATH
export GST_PLUGIN_SYSTEM_PATH_1_0=$lib/gstreamer-1.0
export GST_PLUGIN_SCANNER_1_0=$lib/gstreamer1.0/gstreamer-1.0/gst-plugin-scanner
export GST_REGISTRY=$work/registry.bin
export GIO_MODULE_DIR=$lib/gio/modules
EOF
CUDA_BIN=
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  CUDA_BIN=/usr/local/cuda/bin
fi
# shellcheck disable=SC1091
. "$work/env.sh"

# ---- 2. what this machine has ----
py=${PYTHON:-python3}
torch_info=$("$py" -c 'import torch; print(torch.__version__, "cuda", torch.version.cuda, "available" if torch.cuda.is_available() else "no device")' 2>/dev/null || echo "none")
if [ -z "${GPU_ARCHS:-}" ]; then
  GPU_ARCHS=$( (nvidia-smi --query-gpu=compute_cap --format=csv,noheader 2>/dev/null || true) |
              head -1 | tr -d '. ')
  [ -n "$GPU_ARCHS" ] || GPU_ARCHS='80;90'
fi
gpu_name=$( (nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader 2>/dev/null || true) | head -1)
nvcc_v=$( (nvcc --version 2>/dev/null || true) | sed -n 's/.*release \([0-9.]*\).*/\1/p')
jobs=${GPU_CHECK_JOBS:-$(nproc)}
say "GPU: ${gpu_name:-none found} (archs $GPU_ARCHS); torch: $torch_info ($py); nvcc $nvcc_v; $jobs jobs"
# meson and ninja may be Python packages without their scripts on PATH.
mkdir -p "$work/bin"
if ! command -v meson >/dev/null && "$py" -c 'import mesonbuild' 2>/dev/null; then
  printf '#!/bin/sh\nexec "%s" -m mesonbuild.mesonmain "$@"\n' "$(command -v "$py")" >"$work/bin/meson"
  chmod +x "$work/bin/meson"
fi
if ! command -v ninja >/dev/null && "$py" -c 'import ninja' 2>/dev/null; then
  ln -sf "$("$py" -c 'import ninja, os; print(os.path.join(ninja.BIN_DIR, "ninja"))')" "$work/bin/ninja"
fi
for t in meson ninja nvcc g++ gcc; do
  command -v $t >/dev/null || { echo "gpu-check: $t not found" >&2; exit 1; }
done
# The bundle's programs run here (a C library older than the bundle needs fails here, clearly).
for t in "pkgconf --version" "gst-inspect-1.0 --version"; do
  $t >/dev/null 2>"$logs/bundle-run.log" ||
    { echo "gpu-check: the bundle's $t does not run here ($(getconf GNU_LIBC_VERSION 2>/dev/null);" \
           "$(sed -n 's/^# needs: //p' "$bundle/MANIFEST")):" >&2; cat "$logs/bundle-run.log" >&2; exit 1; }
done

# ---- 3. configure, build ----
results=()   # "name|result|seconds|limit"
record() { results+=("$1|$2|$3|$4"); }
step() {     # name limit command...: a timed step whose log is $logs/name.log
  local name=$1 limit=$2 t0 rc
  shift 2
  t0=$(date +%s)
  timeout -k 10 "$limit" "$@" >"$logs/$name.log" 2>&1
  rc=$?
  local res=PASS
  [ $rc = 0 ] || res="FAIL (rc $rc)"
  [ $rc = 124 ] || [ $rc = 137 ] && res="TIMEOUT"
  record "$name" "$res" $(($(date +%s) - t0)) "$limit"
  return $rc
}

# Recording (lerobot: Arrow from a pyarrow wheel) is not a GPU path and the device has no
# pyarrow; it is off so that the build is the same here in the rehearsal, where the bound .venv has one.
setup_args=(-Dcuda=enabled -Dtorch=enabled "-Dpython=$(command -v "$py")" "-Dgpu_archs=$GPU_ARCHS"
            -Dtests=enabled -Dlerobot=disabled --buildtype=release)
say "configuring"
if [ -f "$build/build.ninja" ]; then
  step configure 120 meson setup --reconfigure "$build" "$root" "${setup_args[@]}"
else
  step configure 120 meson setup "$build" "$root" "${setup_args[@]}"
fi || { tail -30 "$logs/configure.log" >&2; build_failed=configure; }
grep -A6 '^  Features' "$logs/configure.log" >&2 || true
if [ -z "${build_failed:-}" ] && [ -n "${CONFIGURE_ONLY:-}" ]; then
  say "configured in $build (CONFIGURE_ONLY set: stopping)"
  exit 0
fi

# Which stages run.
selected=()
if [ -n "${GPU_CHECK_STAGES+x}" ]; then
  for want in ${GPU_CHECK_STAGES}; do
    [ "$want" = none ] && continue
    found=
    for s in "${STAGES[@]}" "${EXTRA_STAGES[@]}"; do
      [ "${s%%|*}" = "$want" ] && { selected+=("$s"); found=1; }
    done
    [ -n "$found" ] || { echo "gpu-check: no stage '$want'" >&2; exit 2; }
  done
else
  selected=("${STAGES[@]}")
fi

# Build targets: everything, or the gpu suite's tests, the stage binaries, libraries, modules.
build_targets=()
want_all=${GPU_CHECK_BUILD:-auto}
for s in "${selected[@]}"; do [ "${s%%|*}" = cpu-suite ] && want_all=all; done
if [ -z "${build_failed:-}" ] && [ "$want_all" != all ]; then
  mapfile -t build_targets < <(
    { meson introspect --tests "$build"; echo; meson introspect --targets "$build"; } |
    "$py" -c '
import json, os, sys
build, wanted = sys.argv[1], set(sys.argv[2:])
docs = [json.loads(d) for d in sys.stdin.read().split("\n\n") if d.strip()]
tests, targets = docs
out = set()
for t in tests:
    if any(s == "gpu" or s.endswith(":gpu") for s in t["suite"]):
        out.add(os.path.relpath(t["cmd"][0], build))
for t in targets:
    for f in t["filename"]:
        rel = os.path.relpath(f, build)
        if t["type"] != "executable" or rel in wanted:
            out.add(rel)
print("\n".join(sorted(out)))' "$build" "${STAGE_TARGETS[@]}")
fi
if [ -z "${build_failed:-}" ]; then
  say "building (${#build_targets[@]} targets; 0 = all) with $jobs jobs"
  step build $(($(left) > 60 ? $(left) - 30 : 30)) ninja -C "$build" -j "$jobs" "${build_targets[@]}" ||
    { tail -40 "$logs/build.log" >&2; build_failed=build; }
fi

# ---- 4. the stages ----
export BUILD=$build WORK=$work BUNDLE=$bundle ROOT=$root
export PI0_MODEL=$build/tools/pi0-model/pi0-model E2E=$build/bench/e2e
export PREP_BENCH=$build/bench/pi0-prep-bench

# gpu-decode: pipelines/gpu-decode.txt as a user runs it (nvh264dec into CUDA memory ->
# pi0viewmux -> cudaprep device=cuda in place -> pi0infer device=cuda -> pi0actionsink ->
# pi0-robotsim), on the bundle's three 1080p H.264 files (else encoded here with nvh264enc).
gpu_decode() {
  local dir=$BUNDLE/h264 v log
  if [ ! -f "$dir/main.mkv" ]; then
    dir=$WORK/h264
    mkdir -p "$dir"
    gst-inspect-1.0 nvh264enc >/dev/null 2>&1 ||
      { echo "skipped: no H.264 files in the bundle and no nvh264enc here"; return 77; }
    for v in main:smpte side:ball top:pinwheel; do
      gst-launch-1.0 -q videotestsrc num-buffers=90 pattern="${v#*:}" \
        ! video/x-raw,format=NV12,width=1920,height=1080,framerate=30/1 ! nvh264enc \
        ! h264parse ! matroskamux ! filesink location="$dir/${v%%:*}.mkv" || return 1
    done
  fi
  gst-inspect-1.0 nvh264dec || { echo "nvh264dec is not registered:"; gst-inspect-1.0 nvcodec; return 1; }
  log=$WORK/gpu-decode.out
  BUILD=$(realpath --relative-to="$ROOT" "$BUILD") H264_DIR=$dir DURATION=40 \
    pipelines/run.sh gpu-decode 2>&1 | tee "$log"
  grep -qE '^robot: [1-9][0-9]* action rows executed' "$log" ||
    { echo "the robot executed no action row"; return 1; }
}
export -f gpu_decode

# vs-peers: bench/vs-peers-chain (our column of bench/vs-peers) alone, as the peers cannot run
# here: 10 raw observations of the driver's layout (1920x1080, 1280x720, 640x480 RGB, a 14-dim
# state), the full-size model $1 in bf16 (CUDA graph, pi0infer's default on CUDA), cudaprep's
# filter=bilinear (LeRobot's resize, as the CPU run); prints our median / p95 table.
vs_peers() {
  local obs=$WORK/vs-peers-obs
  "$BUILD/bench/vs-peers-chain" --make-obs "$obs" --count 10 --state-dim 14 || return 1
  "$BUILD/bench/vs-peers-chain" --obs "$obs" --checkpoint "$1" --device cuda --precision bf16 \
    --filter bilinear --tokenizer "$ROOT/tests/data/tokenizer/tiny_paligemma.model" --summary
}
export -f vs_peers

# A gpu-suite test skips itself when it finds no CUDA device (or torch sees none): where
# nvidia-smi sees a GPU, that is a failure of the check, not a pass.
no_skip_with_gpu() {
  nvidia-smi -L >/dev/null 2>&1 || return 0
  if grep -E '^\[  SKIPPED \]' "$BUILD/meson-logs/testlog.txt"; then
    echo "tests skipped although nvidia-smi sees a GPU (torch.cuda.is_available():" \
      "$("${PYTHON:-python3}" -c 'import torch; print(torch.cuda.is_available())' 2>&1 | tail -1))"
    return 1
  fi
}
export -f no_skip_with_gpu

run_stage() {   # "name|timeout|command"
  local spec=$1 name limit cmd t0 rc res l
  name=${spec%%|*}
  limit=${spec#*|}
  limit=${limit%%|*}
  cmd=${spec#*|*|}
  l=$(left)
  if [ -n "${build_failed:-}" ]; then
    record "$name" "SKIP (the $build_failed failed)" 0 "$limit"
    return
  fi
  if [ "$l" -lt 15 ]; then
    record "$name" "SKIP (out of budget)" 0 "$limit"
    return
  fi
  [ "$limit" -le "$l" ] || limit=$l
  say "$name (up to ${limit}s): $cmd"
  t0=$(date +%s)
  (cd "$root" && timeout -k 10 "$limit" bash -c "$cmd") >"$logs/$name.log" 2>&1
  rc=$?
  case $rc in
    0) res=PASS ;;
    77) res="SKIP ($(tail -1 "$logs/$name.log" | tr -d '|'))" ;;
    124 | 137) res=TIMEOUT ;;
    *) res="FAIL (rc $rc)" ;;
  esac
  record "$name" "$res" $(($(date +%s) - t0)) "$limit"
  # A meson test stage: keep its per-test results (the next meson test overwrites them).
  if [ "$(stat -c %Y "$build/meson-logs/testlog.json" 2>/dev/null || echo 0)" -ge "$t0" ]; then
    cp "$build/meson-logs/testlog.json" "$logs/$name.testlog.json"
  fi
  say "$name: $res"
}

# ---- 5. the summary ----
write_summary() {
  local r name res secs limit bad=0
  {
    echo "# gst-pi0 GPU check"
    echo
    echo "- date: $(date -u +%Y-%m-%dT%H:%MZ); commit: $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')"
    echo "- GPU: ${gpu_name:-none found}; archs $GPU_ARCHS"
    echo "- torch: $torch_info ($py); nvcc $nvcc_v; $(nproc) cores, $jobs build jobs"
    echo "- bundle: $(grep -c '^[a-z0-9]' "$bundle/MANIFEST") packages, $(du -sh "$bundle" | cut -f1) ($(head -1 "$bundle/MANIFEST" | sed 's/^# //'))"
    echo "- total: $(($(date +%s) - t_start)) s of a $budget s budget"
    echo
    echo "| stage | result | seconds | limit |"
    echo "|---|---|---|---|"
    for r in "${results[@]}"; do
      IFS='|' read -r name res secs limit <<<"$r"
      echo "| $name | $res | $secs | $limit |"
    done
    for r in "${results[@]}"; do
      IFS='|' read -r name res secs limit <<<"$r"
      [ -f "$logs/$name.log" ] || continue
      echo
      echo "## $name: $res"
      echo
      if [ -f "$logs/$name.testlog.json" ]; then
        echo "| test | result | seconds |"
        echo "|---|---|---|"
        "$py" - "$logs/$name.testlog.json" <<'PYEOF' || true
import json, sys
for line in open(sys.argv[1]):
    t = json.loads(line)
    print(f"| {t['name']} | {t['result']} | {t['duration']:.1f} |")
PYEOF
        echo
      fi
      echo '```'
      if [ "$res" = PASS ]; then tail -n 60 "$logs/$name.log"; else tail -n 120 "$logs/$name.log"; fi
      echo '```'
    done
  } >"$summary"
  tar -C "$work" -czf "$out/gpu-logs.tar.gz" logs 2>/dev/null || true
  say "summary: $summary (logs: $out/gpu-logs.tar.gz)"
}

for s in "${selected[@]}"; do run_stage "$s"; done
write_summary
sed -n '1,/^## /p' "$summary" | sed '$d'
for r in "${results[@]}"; do
  IFS='|' read -r _ res _ _ <<<"$r"
  case $res in PASS | SKIP*) ;; *) exit 1 ;; esac
done
exit 0
