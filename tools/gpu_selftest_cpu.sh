#!/usr/bin/env bash
# The GPU self-test where there is no GPU: tf_ops's CUDA kernels and their
# self-test (tests/gpu/) compiled as C++ against the CUDA-on-CPU layer
# (tests/gpu/cuda_on_cpu/, where each CUDA thread is an OS thread), needing
# only CMake and g++ (no nvcc, no TensorFlow, no GPU). Ends with one summary
# block, like tools/gpu_selftest.sh:
#   1. configures and builds, in one CMake tree (cmake/TfOpsCudaOnCpu.cmake),
#      three builds of the self-test and of the layer's own test: plain,
#      AddressSanitizer + UndefinedBehaviorSanitizer, ThreadSanitizer; and
#      the deliberate breaks (tests/gpu/cuda_on_cpu/breaks.cmake), each the
#      self-test of one build with one kernel bug patched in;
#   2. runs each build's layer test, then its self-test on the small set
#      (--small: every family, dtype, odd size, tail, aliasing and in-place
#      way, fewer activations and shapes than the GPU's run);
#   3. runs each break on its family, which must fail with a line naming the
#      family and the case (breaks.tsv's pattern).
# Each step leaves its output and exit status in the logs folder and its
# time in the summary.
#
#   tools/gpu_selftest_cpu.sh                 (make gpu-selftest-cpu)
#   tools/gpu_selftest_cpu.sh --summary LOGS  the summary of an earlier run
#
# Environment: GPU_SELFTEST_CPU_BUILD_DIR (build-gpu-selftest-cpu), the
# build tree; its logs/ folder holds the logs.
# Exit status: 0 every check passed and every break was caught; 1 a check
# failed, a sanitizer reported, or a break went uncaught; 4 the build failed
# (a break whose text is no longer in its kernel fails it too).
set -uo pipefail
cd "$(dirname "$0")/.."

builds=(plain asan tsan)
declare -A build_names=([plain]="plain" [asan]="asan+ubsan" [tsan]="tsan")

# The value of key=... in the first "SUMMARY <kind> ..." line of a log.
summary_value() {  # log kind key
  grep -E "^SUMMARY $2 " "$1" 2>/dev/null | head -n 1 |
    sed -nE "s/.* $3=(\"([^\"]*)\"|([^ ]*)).*/\2\3/p"
}

step_rc() { cat "$1/$2.rc" 2>/dev/null; }
step_seconds() { cat "$1/$2.seconds" 2>/dev/null || echo 0; }

# Runs a command as step NAME: its output in LOGS/NAME.log, its exit status
# and seconds beside it.
run_step() {  # logs name command...
  local logs=$1 name=$2 start=$SECONDS rc
  shift 2
  "$@" >"$logs/$name.log" 2>&1
  rc=$?
  echo "$rc" >"$logs/$name.rc"
  echo $((SECONDS - start)) >"$logs/$name.seconds"
  return "$rc"
}

# Sanitizer reports in a log ("SUMMARY: AddressSanitizer: ...",
# "UndefinedBehaviorSanitizer" runtime errors, "WARNING: ThreadSanitizer").
sanitizer_reports() {  # log
  grep -cE "^SUMMARY: [A-Za-z]+Sanitizer|runtime error:|^WARNING: ThreadSanitizer" \
    "$1" 2>/dev/null || true
}

# One build's line: its checks, time, and what went wrong.
build_line() {  # logs build
  local logs=$1 b=$2 log=$1/$2.log rc passed failed families reports layer
  rc=$(step_rc "$logs" "$b")
  passed=$(summary_value "$log" "checks total" passed)
  failed=$(summary_value "$log" "checks total" failed)
  layer=$(sed -nE 's/^layer test: ([0-9]+) passed, ([0-9]+) failed/\1 passed, \2 failed/p' \
    "$logs/$b-layer.log" 2>/dev/null)
  if [ -z "$passed" ]; then
    echo "FAILED: did not finish (exit ${rc:-?}; see $log); layer test: ${layer:-not run}"
    return
  fi
  families=$(sed -nE 's/^SUMMARY checks family=(.*) passed=([0-9]+) failed=([0-9]+).*/\1 \2\/\3/p' "$log" |
    paste -sd ',' - | sed 's/,/, /g')
  reports=$(sanitizer_reports "$log")
  echo "$passed passed, $failed failed in $(step_seconds "$logs" "$b") s (exit $rc, $reports sanitizer reports; layer test $layer; passed/failed per family: $families)"
}

# Whether a build passed: its self-test and layer test exited 0 with no
# sanitizer report (a report outside a kernel also makes the exit 1).
build_ok() {  # logs build
  [ "$(step_rc "$1" "$2")" = 0 ] && [ "$(step_rc "$1" "$2-layer")" = 0 ] &&
    [ -n "$(summary_value "$1/$2.log" "checks total" passed)" ] &&
    [ "$(sanitizer_reports "$1/$2.log")" = 0 ]
}

# Prints the summary block of the run whose logs are in LOGS; returns the
# script's exit status.
summarize() {  # logs
  local logs=$1 status=0 result=PASS b line caught=0 total=0 name build family expect why
  local breaks_text=""
  echo
  echo "===== tf_ops GPU self-test on the CPU: $(cat "$logs/run.txt" 2>/dev/null) ====="
  echo "GPU:          none: the CUDA sources ran as C++ on the CPU (tests/gpu/cuda_on_cpu/), each CUDA thread an OS thread"
  echo "Toolkit:      $(head -n 1 "$logs/compiler.txt" 2>/dev/null || echo unknown)"
  if [ "$(step_rc "$logs" build)" != 0 ]; then
    echo "Build:        FAILED in $(step_seconds "$logs" build) s (see $logs/configure.log, $logs/build.log)"
    tail -n 5 "$logs/build.log" 2>/dev/null | sed 's/^/              /'
    echo "Result:       FAIL (build)"
    echo "Logs:         $logs/"
    echo "====="
    return 4
  fi
  echo "Build:        3 builds and their breaks in $(step_seconds "$logs" build) s"
  for b in "${builds[@]}"; do
    printf '%-13s %s\n' "${build_names[$b]}:" "$(build_line "$logs" "$b")"
    build_ok "$logs" "$b" || status=1
  done
  if [ -f "$logs/breaks.tsv" ]; then
    while IFS=$'\t' read -r name build family expect why; do
      [ -n "$name" ] || continue
      total=$((total + 1))
      if [ "$(step_rc "$logs" "break-$name")" != 0 ] &&
         grep -qE -- "$expect" "$logs/break-$name.log" 2>/dev/null; then
        caught=$((caught + 1))
        breaks_text+="              caught: $name ($why; $build build): $(grep -m 1 -E -- "$expect" "$logs/break-$name.log" | cut -c 1-160)"$'\n'
      else
        status=1
        breaks_text+="              NOT CAUGHT: $name ($why; $build build, family $family): exit $(step_rc "$logs" "break-$name"), no line matching /$expect/ in $logs/break-$name.log"$'\n'
      fi
    done <"$logs/breaks.tsv"
  fi
  echo "Breaks:       $caught of $total caught in $(step_seconds "$logs" breaks) s"
  printf '%s' "$breaks_text"
  line="build $(step_seconds "$logs" build) s"
  for b in "${builds[@]}"; do
    line+=", ${build_names[$b]} $(($(step_seconds "$logs" "$b") + $(step_seconds "$logs" "$b-layer"))) s"
  done
  echo "Time:         $line, breaks $(step_seconds "$logs" breaks) s; total $(step_seconds "$logs" total) s"
  [ "$status" = 0 ] || result=FAIL
  echo "Result:       $result"
  echo "Logs:         $logs/"
  echo "====="
  return "$status"
}

if [ "${1:-}" = --summary ]; then
  summarize "${2:?usage: $0 --summary LOGS}"
  exit $?
fi

build=${GPU_SELFTEST_CPU_BUILD_DIR:-build-gpu-selftest-cpu}
logs=$build/logs
rm -rf "$logs"
mkdir -p "$logs"
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')" >"$logs/run.txt"
"${CXX:-c++}" --version 2>/dev/null | head -n 1 >"$logs/compiler.txt"
begin=$SECONDS

# 1. Configure and build everything in one make, so that both cores work.
echo "== building the self-test on the CPU (plain, asan+ubsan, tsan) and its breaks in $build"
build_all() {
  local targets=() b name
  cmake -S . -B "$build" -DTF_OPS_CUDA_ON_CPU=ON >"$logs/configure.log" 2>&1 ||
    { cat "$logs/configure.log"; return 1; }
  cp "$build/breaks.tsv" "$logs/breaks.tsv"
  for b in "${builds[@]}"; do
    targets+=(tf_ops_gpu_selftest_cpu_$b tf_ops_cuda_on_cpu_test_$b)
  done
  while IFS=$'\t' read -r name _; do
    [ -n "$name" ] && targets+=(tf_ops_gpu_selftest_cpu_break_$name)
  done <"$logs/breaks.tsv"
  cmake --build "$build" --parallel "$(nproc)" --target "${targets[@]}"
}
if ! run_step "$logs" build build_all; then
  tail -n 30 "$logs/build.log"
  echo $((SECONDS - begin)) >"$logs/total.seconds"
  summarize "$logs"
  exit $?
fi
echo "   built in $(step_seconds "$logs" build) s"

# 2. Each build in turn, one at a time (a block is up to 1024 OS threads;
# on a machine shared with other jobs, three programs at once would be three
# times that): the layer's test, then the self-test's small set.
for b in "${builds[@]}"; do
  echo "== ${build_names[$b]}: layer test, then tf_ops_gpu_selftest --small"
  run_step "$logs" "$b-layer" "$build/tf_ops_cuda_on_cpu_test_$b"
  run_step "$logs" "$b" "$build/tf_ops_gpu_selftest_cpu_$b" --small
  echo "   ${build_names[$b]}: $(build_line "$logs" "$b")"
done

# 3. The breaks, one at a time: each on its family; each must fail.
start=$SECONDS
while IFS=$'\t' read -r name b family _; do
  [ -n "$name" ] || continue
  echo "== break $name (${build_names[$b]}, family $family)"
  run_step "$logs" "break-$name" "$build/tf_ops_gpu_selftest_cpu_break_$name" \
    --small --family "$family" </dev/null
done <"$logs/breaks.tsv"
echo $((SECONDS - start)) >"$logs/breaks.seconds"
echo $((SECONDS - begin)) >"$logs/total.seconds"

summarize "$logs"
