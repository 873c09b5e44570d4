# The GPU self-test (tests/gpu/) on the CPU: every CUDA source of every
# family (tf_ops_cuda_sources, from the tf_ops_family() lines) and the
# self-test's own .cu files compiled by the C++ compiler against the
# CUDA-on-CPU layer (tests/gpu/cuda_on_cpu/), in three builds:
#   plain  the layer's own checks (barriers, lane masks, launch limits,
#          faults, deadlocks) and the self-test's comparisons;
#   asan   AddressSanitizer + UndefinedBehaviorSanitizer;
#   tsan   ThreadSanitizer (each CUDA thread is an OS thread).
# Targets, per build B:
#   tf_ops_gpu_selftest_cpu_B   the self-test (run it with --quick)
#   tf_ops_cuda_on_cpu_test_B   the layer's own test (layer_test.cu)
#   tf_ops_gpu_selftest_cpu_break_NAME  (not built by default) the self-test
#            with one deliberate bug (tests/gpu/cuda_on_cpu/breaks.cmake)
#            in its build's objects, which must make it fail.
# Included by CMakeLists.txt when TF_OPS_CUDA_ON_CPU is on (no TensorFlow,
# no nvcc); tools/gpu_selftest_cpu.sh drives it. The CPU engine objects
# (tf_ops_cpu_engine) are the library's, shared by every build.

set(cuda_on_cpu_dir ${PROJECT_SOURCE_DIR}/tests/gpu/cuda_on_cpu)
# The benchmarks (gpu_bench.cu) are left out: on the CPU they would time the
# layer's thread switches; no_bench.cc stands in for their entry point.
file(GLOB cuda_on_cpu_harness CONFIGURE_DEPENDS
     ${PROJECT_SOURCE_DIR}/tests/gpu/*.cu)
list(FILTER cuda_on_cpu_harness EXCLUDE REGEX "/gpu_bench\\.cu$")
list(APPEND cuda_on_cpu_harness ${cuda_on_cpu_dir}/no_bench.cc)
set(cuda_on_cpu_runtime
    ${cuda_on_cpu_dir}/executor.cc
    ${cuda_on_cpu_dir}/runtime_api.cc
    ${cuda_on_cpu_dir}/sanitizer_hooks.cc)

# -O0 and line tables only (-g1): these templates compile three times
# faster than at -O1 with full debug info, and the run's time is the
# threads' switches, not the code; the sanitizers' reports still name
# functions and lines.
set(cuda_on_cpu_common -O0 -g1 -fno-omit-frame-pointer -Wall -Wno-sign-compare
    -Wno-unknown-pragmas)
set(cuda_on_cpu_flags_plain)
set(cuda_on_cpu_flags_asan -fsanitize=address,undefined
    -fsanitize-recover=address,undefined)
set(cuda_on_cpu_flags_tsan -fsanitize=thread)
set(cuda_on_cpu_link_plain)
set(cuda_on_cpu_link_asan -fsanitize=address,undefined)
set(cuda_on_cpu_link_tsan -fsanitize=thread)
set(cuda_on_cpu_builds plain asan tsan)

# tf_ops_cuda_on_cpu_objects(<target> <build> <sources>...): an object
# library of sources in that build; .cu files are compiled as C++ with the
# layer included first, as nvcc includes cuda_runtime.h.
function(tf_ops_cuda_on_cpu_objects target build)
  add_library(${target} OBJECT EXCLUDE_FROM_ALL ${ARGN})
  foreach(source IN LISTS ARGN)
    if(source MATCHES "\\.cu$")
      set_source_files_properties(${source} PROPERTIES LANGUAGE CXX
        COMPILE_OPTIONS "-x;c++;-include;${cuda_on_cpu_dir}/cuda_on_cpu.h")
    endif()
  endforeach()
  target_include_directories(${target} PRIVATE ${cuda_on_cpu_dir}/include
                             ${PROJECT_SOURCE_DIR})
  target_compile_options(${target} PRIVATE ${cuda_on_cpu_common}
                         ${cuda_on_cpu_flags_${build}})
endfunction()

# tf_ops_cuda_on_cpu_program(<target> <build> <object targets>...)
function(tf_ops_cuda_on_cpu_program target build)
  set(objects)
  foreach(library IN LISTS ARGN)
    list(APPEND objects $<TARGET_OBJECTS:${library}>)
  endforeach()
  add_executable(${target} ${objects})
  set_target_properties(${target} PROPERTIES LINKER_LANGUAGE CXX)
  target_link_options(${target} PRIVATE ${cuda_on_cpu_link_${build}})
  find_package(Threads REQUIRED)
  target_link_libraries(${target} PRIVATE Threads::Threads)
endfunction()

# The kernels of each build, one object library per source so that a break
# replaces exactly one.
foreach(build IN LISTS cuda_on_cpu_builds)
  set(kernels_${build})
  foreach(source IN LISTS tf_ops_cuda_sources)
    get_filename_component(stem ${source} NAME_WE)
    tf_ops_cuda_on_cpu_objects(tf_ops_cpu_${build}_${stem} ${build}
                               ${PROJECT_SOURCE_DIR}/${source})
    list(APPEND kernels_${build} tf_ops_cpu_${build}_${stem})
  endforeach()
  tf_ops_cuda_on_cpu_objects(tf_ops_cpu_${build}_harness ${build}
                             ${cuda_on_cpu_harness})
  tf_ops_cuda_on_cpu_objects(tf_ops_cpu_${build}_runtime ${build}
                             ${cuda_on_cpu_runtime})
  tf_ops_cuda_on_cpu_program(tf_ops_gpu_selftest_cpu_${build} ${build}
    tf_ops_cpu_${build}_harness tf_ops_cpu_${build}_runtime
    ${kernels_${build}} tf_ops_cpu_engine)
  tf_ops_cuda_on_cpu_objects(tf_ops_cpu_${build}_layer_test ${build}
                             ${cuda_on_cpu_dir}/layer_test.cu)
  tf_ops_cuda_on_cpu_program(tf_ops_cuda_on_cpu_test_${build} ${build}
    tf_ops_cpu_${build}_layer_test tf_ops_cpu_${build}_runtime)
endforeach()

# The deliberate breaks: breaks.cmake calls tf_ops_selftest_break() once per
# break. Each gets its patched copy of one file (made at build time by
# TfOpsApplyBreak.cmake, which fails unless the text to replace is there
# exactly once) and a self-test program of its build with that copy in place
# of the original: a kernel source (.cu) replaces its own object; a shared
# header (row_groups.cuh) is found first, from a folder of its own, by the
# kernel sources that include it, which are compiled again. breaks.tsv lists
# them for the script: name, build, family, what the failing run must print
# (a regular expression), and why.
set(cuda_on_cpu_manifest "")
# tf_ops_selftest_break(<name> <build> <family> <file> <expect> <why> <from>
#                       <to>): positional, so that <from> and <to> (C++ with
# semicolons) reach the patch script unchanged.
function(tf_ops_selftest_break name build family file expect why from to)
  get_filename_component(stem ${file} NAME_WE)
  set(patched ${CMAKE_BINARY_DIR}/breaks/${name}/${file})
  add_custom_command(
    OUTPUT ${patched}
    COMMAND ${CMAKE_COMMAND} -DBREAK=${name}
            -DIN=${PROJECT_SOURCE_DIR}/${file} -DOUT=${patched}
            -P ${PROJECT_SOURCE_DIR}/cmake/TfOpsApplyBreak.cmake
    DEPENDS ${PROJECT_SOURCE_DIR}/${file} ${cuda_on_cpu_dir}/breaks.cmake
            ${PROJECT_SOURCE_DIR}/cmake/TfOpsApplyBreak.cmake
    VERBATIM)
  # The kernel objects the break replaces, and the patched ones.
  set(replaced tf_ops_cpu_${build}_${stem})
  set(patched_objects)
  if(file MATCHES "\\.cu$")
    tf_ops_cuda_on_cpu_objects(tf_ops_cpu_break_${name} ${build} ${patched})
    list(APPEND patched_objects tf_ops_cpu_break_${name})
  else()
    set(replaced)
    add_custom_target(tf_ops_break_${name}_header DEPENDS ${patched})
    foreach(source IN LISTS tf_ops_cuda_sources)
      file(READ ${PROJECT_SOURCE_DIR}/${source} text)
      string(FIND "${text}" "#include \"${file}\"" at)
      if(at EQUAL -1)
        continue()
      endif()
      get_filename_component(source_stem ${source} NAME_WE)
      set(library tf_ops_cpu_break_${name}_${source_stem})
      tf_ops_cuda_on_cpu_objects(${library} ${build}
                                 ${PROJECT_SOURCE_DIR}/${source})
      target_include_directories(${library} BEFORE PRIVATE
                                 ${CMAKE_BINARY_DIR}/breaks/${name})
      add_dependencies(${library} tf_ops_break_${name}_header)
      list(APPEND replaced tf_ops_cpu_${build}_${source_stem})
      list(APPEND patched_objects ${library})
    endforeach()
    if(NOT patched_objects)
      message(FATAL_ERROR "break ${name}: no kernel source includes ${file}")
    endif()
  endif()
  set(objects)
  foreach(library IN LISTS kernels_${build})
    if(NOT library IN_LIST replaced)
      list(APPEND objects ${library})
    endif()
  endforeach()
  tf_ops_cuda_on_cpu_program(tf_ops_gpu_selftest_cpu_break_${name} ${build}
    ${patched_objects} tf_ops_cpu_${build}_harness
    tf_ops_cpu_${build}_runtime ${objects} tf_ops_cpu_engine)
  set_target_properties(tf_ops_gpu_selftest_cpu_break_${name} PROPERTIES
                        EXCLUDE_FROM_ALL ON)
  set(cuda_on_cpu_manifest
      "${cuda_on_cpu_manifest}${name}\t${build}\t${family}\t${expect}\t${why}\n"
      PARENT_SCOPE)
endfunction()
include(${cuda_on_cpu_dir}/breaks.cmake)
file(WRITE ${CMAKE_BINARY_DIR}/breaks.tsv "${cuda_on_cpu_manifest}")
message(STATUS "tf_ops: the GPU self-test on the CPU (CUDA-on-CPU layer), "
               "builds: ${cuda_on_cpu_builds}")
