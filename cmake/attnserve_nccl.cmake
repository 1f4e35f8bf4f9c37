# NCCL for the context-parallel exchange (src/cp/nccl, NcclCommunicator). Included from
# CMakeLists.txt after the CUDA setup; sets ATTNSERVE_NCCL_FOUND_USE (ON/OFF).
#   ATTNSERVE_NCCL = AUTO (default: on when CUDA is on and NCCL is found), ON (required), OFF.
# Where it looks, in order (header and library from the first root that has them): ATTNSERVE_NCCL_DIR,
# $NCCL_ROOT / $NCCL_HOME, the nvidia-nccl-cu13/-cu12 wheel of the Python on PATH
# (site-packages/nvidia/nccl/{include,lib}; PyTorch pulls it in), the CUDA toolkit (CUDA 13 ships
# NCCL), then the system.
set(ATTNSERVE_NCCL AUTO CACHE STRING "Build the NCCL communicator (AUTO, ON, OFF)")
set(ATTNSERVE_NCCL_DIR "" CACHE PATH "NCCL root: include/nccl.h and lib/libnccl.so*")
set(ATTNSERVE_NCCL_FOUND_USE OFF)

if(NOT ATTNSERVE_NCCL STREQUAL "OFF")
  if(NOT _use_cuda)
    if(ATTNSERVE_NCCL STREQUAL "ON")
      message(FATAL_ERROR "ATTNSERVE_NCCL=ON needs a CUDA build (ATTNSERVE_CUDA)")
    endif()
  else()
    set(_nccl_hints ${ATTNSERVE_NCCL_DIR} $ENV{NCCL_ROOT} $ENV{NCCL_HOME})
    find_program(ATTNSERVE_NCCL_PYTHON NAMES python3 python)
    if(ATTNSERVE_NCCL_PYTHON)
      execute_process(
        COMMAND "${ATTNSERVE_NCCL_PYTHON}" -c "import nvidia.nccl as m; print(list(m.__path__)[0])"
        RESULT_VARIABLE _nccl_rc OUTPUT_VARIABLE _nccl_wheel ERROR_QUIET OUTPUT_STRIP_TRAILING_WHITESPACE)
      if(_nccl_rc EQUAL 0 AND _nccl_wheel)
        list(APPEND _nccl_hints "${_nccl_wheel}")
      endif()
    endif()
    get_filename_component(_cuda_root "${CUDAToolkit_BIN_DIR}" DIRECTORY)
    list(APPEND _nccl_hints "${_cuda_root}")
    find_path(ATTNSERVE_NCCL_INCLUDE_DIR nccl.h HINTS ${_nccl_hints} PATH_SUFFIXES include)
    # The library next to the header found first; the wheel ships only the versioned name
    # (libnccl.so.2); NAMES_PER_DIR keeps the hints' order ahead of the names' order.
    if(ATTNSERVE_NCCL_INCLUDE_DIR)
      get_filename_component(_nccl_root "${ATTNSERVE_NCCL_INCLUDE_DIR}" DIRECTORY)
      list(PREPEND _nccl_hints "${_nccl_root}")
    endif()
    find_library(ATTNSERVE_NCCL_LIBRARY NAMES nccl libnccl.so.2 NAMES_PER_DIR HINTS ${_nccl_hints}
                 PATH_SUFFIXES lib lib64)
    if(ATTNSERVE_NCCL_INCLUDE_DIR AND ATTNSERVE_NCCL_LIBRARY)
      set(ATTNSERVE_NCCL_FOUND_USE ON)
    elseif(ATTNSERVE_NCCL STREQUAL "ON")
      message(FATAL_ERROR "ATTNSERVE_NCCL=ON but NCCL was not found (nccl.h: ${ATTNSERVE_NCCL_INCLUDE_DIR}, "
                          "library: ${ATTNSERVE_NCCL_LIBRARY}); set ATTNSERVE_NCCL_DIR")
    endif()
  endif()
endif()
if(ATTNSERVE_NCCL_FOUND_USE)
  message(STATUS "attnserve: NCCL ON (${ATTNSERVE_NCCL_LIBRARY})")
else()
  message(STATUS "attnserve: NCCL OFF")
endif()
