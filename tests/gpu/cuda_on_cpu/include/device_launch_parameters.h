// CUDA-on-CPU stand-in for <device_launch_parameters.h>: the layer (../cuda_on_cpu.h).
#include "tests/gpu/cuda_on_cpu/cuda_on_cpu.h"
