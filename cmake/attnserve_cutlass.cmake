# CUTLASS/CuTe headers for the Hopper kernels: the pinned PyPI wheel nvidia-cutlass==4.2.0.0
# (installed by scripts/setup.sh; pure headers for C++ use). Looked up once here, required only by
# the targets that call attnserve_use_cutlass(<target>): CPU builds and builds without sm_90 never
# need it. Where to look, first match wins:
#   -DATTNSERVE_CUTLASS_DIR=<dir>   a folder holding cute/ and cutlass/ (or its parent with include/);
#                                   the GPU machine passes $DEPS/cutlass/include (scripts/gpu_check.sh)
#   -DCUTLASS_INCLUDE_DIR=<dir>     the same, under the name other projects use
#   python3 scripts/cutlass_include_dir.py   the installed wheel's cutlass_library/source/include
set(ATTNSERVE_CUTLASS_DIR "" CACHE PATH "CUTLASS include folder (cute/, cutlass/); empty: the nvidia-cutlass wheel")
set(CUTLASS_INCLUDE_DIR "" CACHE PATH "CUTLASS include folder (cute/, cutlass/); ATTNSERVE_CUTLASS_DIR wins")
set(ATTNSERVE_CUTLASS_PINNED "4.2.0")  # scripts/setup.sh installs nvidia-cutlass==4.2.0.0

set(_cutlass_candidates)
if(ATTNSERVE_CUTLASS_DIR)
  list(APPEND _cutlass_candidates "${ATTNSERVE_CUTLASS_DIR}" "${ATTNSERVE_CUTLASS_DIR}/include")
elseif(CUTLASS_INCLUDE_DIR)
  list(APPEND _cutlass_candidates "${CUTLASS_INCLUDE_DIR}" "${CUTLASS_INCLUDE_DIR}/include")
else()
  # Asked on every configure (not cached), so a reinstalled or moved wheel is picked up.
  find_program(ATTNSERVE_PYTHON3 NAMES python3 python)
  if(ATTNSERVE_PYTHON3)
    execute_process(COMMAND "${ATTNSERVE_PYTHON3}" "${PROJECT_SOURCE_DIR}/scripts/cutlass_include_dir.py"
      OUTPUT_VARIABLE _cutlass_from_python OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
    list(APPEND _cutlass_candidates "${_cutlass_from_python}")
  endif()
endif()

set(ATTNSERVE_CUTLASS_INCLUDE "")
foreach(_dir IN LISTS _cutlass_candidates)
  if(_dir AND EXISTS "${_dir}/cute/tensor.hpp" AND EXISTS "${_dir}/cutlass/version.h")
    set(ATTNSERVE_CUTLASS_INCLUDE "${_dir}")
    break()
  endif()
endforeach()

if(ATTNSERVE_CUTLASS_INCLUDE)
  file(STRINGS "${ATTNSERVE_CUTLASS_INCLUDE}/cutlass/version.h" _cutlass_version_lines
    REGEX "^#define CUTLASS_(MAJOR|MINOR|PATCH) ")
  string(REGEX REPLACE ".*CUTLASS_MAJOR ([0-9]+).*CUTLASS_MINOR ([0-9]+).*CUTLASS_PATCH ([0-9]+).*" "\\1.\\2.\\3"
    ATTNSERVE_CUTLASS_VERSION "${_cutlass_version_lines}")
  message(STATUS "attnserve: CUTLASS ${ATTNSERVE_CUTLASS_VERSION} at ${ATTNSERVE_CUTLASS_INCLUDE}")
  if(NOT ATTNSERVE_CUTLASS_VERSION VERSION_EQUAL ATTNSERVE_CUTLASS_PINNED)
    message(WARNING "attnserve: CUTLASS ${ATTNSERVE_CUTLASS_VERSION} found, ${ATTNSERVE_CUTLASS_PINNED} is pinned "
      "(scripts/setup.sh); the Hopper kernels are tested with the pinned version only")
  endif()
else()
  string(REPLACE ";" ", " _cutlass_looked "${_cutlass_candidates}")
  message(STATUS "attnserve: CUTLASS not found (looked in: ${_cutlass_looked}); needed only by the CuTe "
    "Hopper code, scripts/setup.sh installs it")
endif()

# Adds the CUTLASS/CuTe headers to a target, or stops the configure saying how to get them. SYSTEM:
# CuTe's own warnings stay out of the -Wall output. PRIVATE: CuTe never reaches a public header.
function(attnserve_use_cutlass target)
  if(NOT ATTNSERVE_CUTLASS_INCLUDE)
    string(REPLACE ";" ", " _cutlass_looked "${_cutlass_candidates}")
    message(FATAL_ERROR
      "attnserve: ${target} needs the CUTLASS/CuTe headers (nvidia-cutlass==4.2.0.0): no cute/tensor.hpp and "
      "cutlass/version.h in '${_cutlass_looked}'.\n"
      "  Install them: scripts/setup.sh (pip install --no-deps nvidia-cutlass==4.2.0.0), or\n"
      "  point at a copy: -DATTNSERVE_CUTLASS_DIR=<folder with cute/ and cutlass/>\n"
      "  (on the GPU machine: DEPS=<deps> scripts/gpu_check.sh with <deps>/cutlass/include from\n"
      "  scripts/prepare_device_deps.sh), or build without sm_90: -DATTNSERVE_CUDA_ARCHS=80.")
  endif()
  target_include_directories(${target} SYSTEM PRIVATE "${ATTNSERVE_CUTLASS_INCLUDE}")
endfunction()
