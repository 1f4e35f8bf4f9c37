#!/usr/bin/env python3
"""Prints the CUTLASS/CuTe include folder of the installed nvidia-cutlass wheel (holds cute/ and cutlass/).

Exit status 1 when the wheel is not installed. Finds the package without importing it: the package's
__init__ loads the Python CUTLASS generator, which C++ users do not need.
Used by CMake (cmake/attnserve_cutlass.cmake) and scripts/prepare_device_deps.sh.
"""
import importlib.util
import os
import sys

spec = importlib.util.find_spec("cutlass_library")
if spec is None or not spec.submodule_search_locations:
    sys.exit(1)
include = os.path.join(list(spec.submodule_search_locations)[0], "source", "include")
if not os.path.isfile(os.path.join(include, "cute", "tensor.hpp")):
    sys.exit(1)
print(include)
