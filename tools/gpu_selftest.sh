#!/usr/bin/env bash
# Builds the TF-free CUDA self-test (tests/gpu/gpu_selftest.cu) on a machine
# with a GPU, nvcc and CMake (TensorFlow is not needed), checks every kernel
# against the CPU engine, then times them against a device-to-device copy.
#   tools/gpu_selftest.sh [cmake args, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
# GPU_BENCH_LOG2=28 sets the benchmark size (2^28 elements by default).
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu-selftest
cmake -S . -B "$build" -DTF_OPS_WITH_TENSORFLOW=OFF -DTF_OPS_CUDA=ON "$@" >/dev/null
cmake --build "$build" --parallel "$(nproc)" --target tf_ops_gpu_selftest
check=0
bench=0
"$build/tf_ops_gpu_selftest" || check=$?
"$build/tf_ops_gpu_selftest" --bench "${GPU_BENCH_LOG2:-28}" || bench=$?
# The check's failure outranks a missed bandwidth target.
exit $((check != 0 ? check : bench))
