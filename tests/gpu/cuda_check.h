// CUDA_CHECK(expr): exits with the file, line, call and CUDA's message when a
// CUDA runtime call fails. For the GPU self-test and its benchmark mode.

#ifndef TF_OPS_TESTS_GPU_CUDA_CHECK_H_
#define TF_OPS_TESTS_GPU_CUDA_CHECK_H_

#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>

#define CUDA_CHECK(expr)                                                 \
  do {                                                                   \
    cudaError_t e = (expr);                                              \
    if (e != cudaSuccess) {                                              \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #expr, \
                   cudaGetErrorString(e));                               \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

#endif  // TF_OPS_TESTS_GPU_CUDA_CHECK_H_
