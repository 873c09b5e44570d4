#!/usr/bin/env bash
# Builds and runs the TF-free CUDA self-test (tests/gpu/gpu_selftest.cu) on a
# machine with a GPU, nvcc and CMake; TensorFlow is not needed.
#   tools/gpu_selftest.sh [cmake args, e.g. -DCMAKE_CUDA_ARCHITECTURES=90]
set -euo pipefail
cd "$(dirname "$0")/.."
build=build-gpu-selftest
cmake -S . -B "$build" -DTF_OPS_WITH_TENSORFLOW=OFF -DTF_OPS_CUDA=ON "$@"
cmake --build "$build" --parallel "$(nproc)" --target tf_ops_gpu_selftest
"$build/tf_ops_gpu_selftest"
