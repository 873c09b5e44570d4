// CUDA-on-CPU stand-in for <cuda_bf16.h>: the layer (../cuda_on_cpu.h).
#include "tests/gpu/cuda_on_cpu/cuda_on_cpu.h"
