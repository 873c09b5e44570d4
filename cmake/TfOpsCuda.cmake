# What the build knows about CUDA toolkits, in one place: the oldest toolkit
# tf_ops builds with, and the GPU architectures each toolkit compiles for by
# default. Included by CMakeLists.txt; tests/package/test_cmake_cuda.py calls these
# functions with `cmake -P` on versions this machine does not have.
#
# The driver each runtime needs is the loader's business (it checks the driver
# at import time): tf_ops/python/core/gpu.py holds that table.

# CUDA 12.0 is the oldest toolkit tf_ops builds with (TensorFlow 2.21's own GPU
# build is CUDA 12.5).
set(TF_OPS_MIN_CUDA_VERSION 12.0)

# tf_ops_nvcc_version(<nvcc> <out-var>)
# Sets <out-var> to "<major>.<minor>" read from `<nvcc> --version` ("Cuda
# compilation tools, release 13.0, V13.0.88"), or to "" when nvcc cannot be run
# or prints no release.
function(tf_ops_nvcc_version nvcc out_var)
  execute_process(
    COMMAND "${nvcc}" --version
    OUTPUT_VARIABLE text
    ERROR_QUIET
    RESULT_VARIABLE result)
  if(result EQUAL 0 AND text MATCHES "release ([0-9]+)\\.([0-9]+)")
    set(${out_var} "${CMAKE_MATCH_1}.${CMAKE_MATCH_2}" PARENT_SCOPE)
  else()
    set(${out_var} "" PARENT_SCOPE)
  endif()
endfunction()

# tf_ops_default_cuda_architectures(<version> <out-var>)
# The CMAKE_CUDA_ARCHITECTURES tf_ops uses with CUDA <version> ("12.4") when the
# user sets none: real code (SASS) for every architecture family the toolkit
# and TensorFlow's GPU build both support, up to Hopper, plus Hopper PTX that
# the driver compiles for newer GPUs (Blackwell) at first use. Sets <out-var>
# to "" for toolkits older than TF_OPS_MIN_CUDA_VERSION.
#   CUDA 12.x: sm_60 (Pascal) and newer. 12.x also compiles sm_50 (Maxwell),
#              but TensorFlow's own GPU kernels start at sm_60.
#   CUDA 13.x and newer: sm_75 (Turing) and newer; CUDA 13 dropped sm_50 to
#              sm_72.
function(tf_ops_default_cuda_architectures version out_var)
  set(hopper_and_ptx 80-real 86-real 89-real 90-real 90-virtual)
  if(version VERSION_LESS TF_OPS_MIN_CUDA_VERSION)
    set(archs "")
  elseif(version VERSION_LESS 13.0)
    set(archs 60-real 70-real 75-real ${hopper_and_ptx})
  else()
    set(archs 75-real ${hopper_and_ptx})
  endif()
  set(${out_var} "${archs}" PARENT_SCOPE)
endfunction()
