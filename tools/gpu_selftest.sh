#!/usr/bin/env bash
# Checks tf_ops's CUDA kernels on a GPU machine (TensorFlow is not needed; nvcc,
# CMake and a C++ compiler are) and ends with ONE summary block to paste into a
# note:
#   1. builds the TF-free self-test (tests/gpu/) with CMake;
#   2. runs it: every op family (tests/gpu/op_families.h) of every activation,
#      attribute variant, dtype and size, aligned, unaligned and in place,
#      against the CPU engine;
#   3. runs its quick set (--quick) under compute-sanitizer memcheck (leak check
#      on), racecheck and initcheck, or says why it could not;
#   4. times every kernel against a device-to-device copy of the same bytes.
# Each step leaves its output and exit status in the logs folder; the summary
# is read from there.
#
#   tools/gpu_selftest.sh [cmake args, e.g. -DCMAKE_CUDA_ARCHITECTURES=90-real]
#   tools/gpu_selftest.sh --summary LOGS   the summary of an earlier run again
#
# Environment:
#   GPU_BENCH_LOG2          benchmark size, log2 elements (28)
#   GPU_SELFTEST_BUILD_DIR  build directory (build-gpu-selftest); the logs go
#                           in its logs/ folder
#   COMPUTE_SANITIZER       the compute-sanitizer to use (default: on PATH,
#                           else beside nvcc, else /usr/local/cuda/bin)
# Exit status: 0 everything ran and passed; 1 a check failed or a sanitizer
# found errors; 2 no usable GPU; 3 only a bandwidth target was missed; 4 the
# build failed. A sanitizer that cannot run is reported, not failed.
set -uo pipefail
cd "$(dirname "$0")/.."

sanitizer_tools=(memcheck racecheck initcheck)

# The value of key=... in the first line "SUMMARY <kind> ..." of a log that
# also matches the optional pattern; "" when there is none.
summary_value() {  # log kind key [pattern]
  grep -E "^SUMMARY $2 .*${4:-}" "$1" 2>/dev/null | head -n 1 |
    sed -nE "s/.* $3=(\"([^\"]*)\"|([^ ]*)).*/\2\3/p"
}

# The exit status a step left in LOGS/<step>.rc; "" when it did not run.
step_rc() {  # logs step
  cat "$1/$2.rc" 2>/dev/null
}

# One sanitizer's line, from its log and exit status.
sanitizer_line() {  # logs tool
  local logs=$1 tool=$2 errors rc why
  if [ -f "$logs/$tool.skipped" ]; then
    echo "NOT RUN: $(cat "$logs/$tool.skipped")"
    return
  fi
  rc=$(step_rc "$logs" "$tool")
  # memcheck and initcheck end with "ERROR SUMMARY: N errors", racecheck with
  # "RACECHECK SUMMARY: N hazards displayed (E errors, W warnings)".
  errors=$(sed -nE 's/^========= (ERROR|RACECHECK) SUMMARY: ([0-9]+) (error|hazard).*/\2/p' \
    "$logs/$tool.log" 2>/dev/null | tail -n 1)
  if grep -qi "device not supported" "$logs/$tool.log" 2>/dev/null || [ -z "$errors" ]; then
    # The tool could not run the program (on some virtualised machines it
    # refuses the device): its complaint, not a kernel error.
    why=$(grep -m 1 -iE "not supported|error" "$logs/$tool.log" 2>/dev/null | sed 's/^========= //')
    echo "NOT RUN: the tool failed (exit ${rc:-?}: ${why:-see $logs/$tool.log})"
  elif [ "$errors" != 0 ]; then
    echo "FAILED: $errors errors (see $logs/$tool.log)"
  elif [ "$rc" = 0 ] && [ -n "$(summary_value "$logs/$tool.log" "checks total" passed)" ]; then
    echo "0 errors ($(summary_value "$logs/$tool.log" "checks total" passed) cases of the quick set)"
  else
    # A sanitizer counts 0 errors in a program that died or failed a check.
    echo "FAILED: 0 errors, but the program failed under it (exit ${rc:-?}; see $logs/$tool.log)"
  fi
}

# Prints the summary block of the run whose logs are in LOGS; returns the
# script's exit status.
summarize() {  # logs
  local logs=$1 build_rc checks_rc bench_rc result status tool line
  local checks=$logs/checks.log bench=$logs/bench.log
  build_rc=$(step_rc "$logs" build)
  checks_rc=$(step_rc "$logs" checks)
  bench_rc=$(step_rc "$logs" bench)
  declare -A sanitizer
  local sanitizers_clean=1 sanitizers_failed=0
  for tool in "${sanitizer_tools[@]}"; do
    sanitizer[$tool]=$(sanitizer_line "$logs" "$tool")
    case ${sanitizer[$tool]} in
      "0 errors"*) ;;
      FAILED*) sanitizers_failed=1; sanitizers_clean=0 ;;
      *) sanitizers_clean=0 ;;
    esac
  done
  if [ "$build_rc" != 0 ]; then
    result="FAIL (build)"; status=4
  elif [ "$checks_rc" = 2 ]; then
    result="NOTHING TESTED (no usable GPU)"; status=2
  elif [ "$checks_rc" != 0 ] || [ "$sanitizers_failed" = 1 ] ||
       { [ -n "$bench_rc" ] && [ "$bench_rc" != 0 ] && [ "$bench_rc" != 3 ]; }; then
    result=FAIL; status=1
  elif [ "$bench_rc" = 3 ]; then
    result="PASS, but a bandwidth target was missed"; status=3
  else
    result=PASS; status=0
  fi
  if [ "$status" = 0 ] && [ "$sanitizers_clean" = 0 ]; then
    result="PASS (sanitizers not run)"
  fi

  echo
  echo "===== tf_ops GPU self-test: $(cat "$logs/run.txt" 2>/dev/null) ====="
  if [ -n "$(summary_value "$checks" device name)" ]; then
    echo "GPU:          $(summary_value "$checks" device name) (sm_$(summary_value "$checks" device sm)), driver $(cat "$logs/driver.txt" 2>/dev/null || echo '?') (supports CUDA $(summary_value "$checks" device driver_cuda))"
    echo "CUDA runtime: $(summary_value "$checks" device runtime_cuda), linked statically"
  else
    echo "GPU:          none usable (driver: $(cat "$logs/driver.txt" 2>/dev/null || echo 'no nvidia-smi'))"
  fi
  line=$(sed -nE 's/^-- tf_ops: nvcc (.*)$/\1/p' "$logs/configure.log" 2>/dev/null | head -n 1)
  echo "Toolkit:      ${line:-unknown (see $logs/configure.log)}"
  if [ "$build_rc" != 0 ]; then
    echo "Build:        FAILED (see $logs/configure.log, $logs/build.log)"
  fi
  if [ -n "$(summary_value "$checks" "checks total" passed)" ]; then
    line=$(sed -nE 's/^SUMMARY checks family=([^ ]*) passed=([0-9]+) failed=([0-9]+).*/\1 \2\/\3/p' "$checks" |
      paste -sd ',' - | sed 's/,/, /g')
    echo "Checks:       $(summary_value "$checks" "checks total" passed) passed, $(summary_value "$checks" "checks total" failed) failed (passed/failed per family: $line)"
  else
    echo "Checks:       not run"
  fi
  for tool in "${sanitizer_tools[@]}"; do
    printf '%-13s %s\n' "$tool:" "${sanitizer[$tool]}"
  done
  if [ -n "$(summary_value "$bench" bench worst_pct)" ]; then
    echo "Bandwidth:    $(sed -nE 's/^([0-9]+) elements;.*/\1/p' "$bench" | head -n 1) elements; per dtype the slowest kernel, as % of a device-to-device copy of its bytes:"
    local dtype target
    for dtype in float32 float16 bfloat16 float64; do
      target=$(summary_value "$bench" bench target_pct "dtype=$dtype ")
      printf '              %-9s %s%% (%s; copy %s GB/s)%s\n' "$dtype" \
        "$(summary_value "$bench" bench worst_pct "dtype=$dtype ")" \
        "$(summary_value "$bench" bench where "dtype=$dtype ")" \
        "$(summary_value "$bench" bench copy_gbs "dtype=$dtype ")" \
        "$([ "${target:-0}" != 0 ] && echo ", target $target%")"
    done
  else
    echo "Bandwidth:    not run"
  fi
  echo "Result:       $result"
  echo "Logs:         $logs/"
  echo "====="
  return "$status"
}

if [ "${1:-}" = --summary ]; then
  summarize "${2:?usage: $0 --summary LOGS}"
  exit $?
fi

build=${GPU_SELFTEST_BUILD_DIR:-build-gpu-selftest}
logs=$build/logs
program=$build/tf_ops_gpu_selftest
rm -rf "$logs"
mkdir -p "$logs"
echo "$(date -u +%Y-%m-%dT%H:%MZ), $(git rev-parse --short HEAD 2>/dev/null || echo 'not a git checkout')" >"$logs/run.txt"
if command -v nvidia-smi >/dev/null 2>&1; then
  nvidia-smi --query-gpu=driver_version --format=csv,noheader 2>/dev/null | head -n 1 >"$logs/driver.txt"
fi

# 1. Build.
echo "== building the self-test in $build"
cmake -S . -B "$build" -DTF_OPS_WITH_TENSORFLOW=OFF -DTF_OPS_CUDA=ON "$@" >"$logs/configure.log" 2>&1 &&
  cmake --build "$build" --parallel "$(nproc)" --target tf_ops_gpu_selftest >"$logs/build.log" 2>&1
echo $? >"$logs/build.rc"

if [ "$(step_rc "$logs" build)" = 0 ]; then
  # 2. Checks.
  "$program" 2>&1 | tee "$logs/checks.log"
  echo "${PIPESTATUS[0]}" >"$logs/checks.rc"
else
  tail -n 30 "$logs/configure.log" "$logs/build.log" 2>/dev/null
fi

# 3. Sanitizers, on the quick set.
sanitizer=${COMPUTE_SANITIZER:-}
if [ -z "$sanitizer" ]; then
  for candidate in "$(command -v compute-sanitizer 2>/dev/null)" \
      "$(dirname "$(command -v nvcc 2>/dev/null || echo /none/nvcc)")/compute-sanitizer" \
      /usr/local/cuda/bin/compute-sanitizer; do
    if [ -n "$candidate" ] && [ -x "$candidate" ]; then sanitizer=$candidate; break; fi
  done
fi
checks_rc=$(step_rc "$logs" checks)
for tool in "${sanitizer_tools[@]}"; do
  if [ -z "$sanitizer" ] || [ ! -x "$sanitizer" ]; then
    echo "compute-sanitizer not found (set COMPUTE_SANITIZER=/path/to/it)" >"$logs/$tool.skipped"
  elif [ "$checks_rc" != 0 ] && [ "$checks_rc" != 1 ]; then
    echo "the self-test did not run (exit ${checks_rc:-none})" >"$logs/$tool.skipped"
  else
    options=(--tool "$tool")
    [ "$tool" = memcheck ] && options+=(--leak-check full)
    echo "== $sanitizer ${options[*]} $program --quick"
    "$sanitizer" "${options[@]}" "$program" --quick >"$logs/$tool.log" 2>&1
    echo $? >"$logs/$tool.rc"
    echo "   $(sanitizer_line "$logs" "$tool")"
  fi
done

# 4. Bandwidth.
if [ "$checks_rc" = 0 ] || [ "$checks_rc" = 1 ]; then
  "$program" --bench "${GPU_BENCH_LOG2:-28}" 2>&1 | tee "$logs/bench.log"
  echo "${PIPESTATUS[0]}" >"$logs/bench.rc"
fi

summarize "$logs"
