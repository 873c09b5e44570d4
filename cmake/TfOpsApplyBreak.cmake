# cmake -DBREAK=<name> -DIN=<source> -DOUT=<copy> -P TfOpsApplyBreak.cmake
# Writes <copy>: <source> with break <name> of
# tests/gpu/cuda_on_cpu/breaks.cmake applied. Fails, naming the break, when
# the text it replaces is not in the source exactly once (the kernel
# changed: update the break), so that no break can silently stop breaking.
function(tf_ops_selftest_break name build family file expect why from to)
  if(NOT name STREQUAL BREAK)
    return()
  endif()
  file(READ ${IN} text)
  string(FIND "${text}" "${from}" first)
  string(FIND "${text}" "${from}" last REVERSE)
  if(first EQUAL -1)
    message(FATAL_ERROR "break ${name}: ${IN} no longer contains the text "
      "it replaces; update tests/gpu/cuda_on_cpu/breaks.cmake")
  elseif(NOT first EQUAL last)
    message(FATAL_ERROR "break ${name}: the text it replaces is in ${IN} "
      "more than once; make it longer in tests/gpu/cuda_on_cpu/breaks.cmake")
  endif()
  string(REPLACE "${from}" "${to}" text "${text}")
  file(WRITE ${OUT} "${text}")
  set(applied TRUE PARENT_SCOPE)
endfunction()

set(applied FALSE)
get_filename_component(root ${CMAKE_CURRENT_LIST_DIR} DIRECTORY)
include(${root}/tests/gpu/cuda_on_cpu/breaks.cmake)
if(NOT applied)
  message(FATAL_ERROR "no break named ${BREAK} in tests/gpu/cuda_on_cpu/breaks.cmake")
endif()
