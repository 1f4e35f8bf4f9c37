# Install and export rules: `cmake --install build --prefix P` puts the library, the public headers
# and a CMake package under P, so that a consumer's find_package(attnserve) gives attnserve::attnserve.
# Included from CMakeLists.txt when ATTNSERVE_INSTALL is ON (the default for a top-level build).
include(CMakePackageConfigHelpers)

set(ATTNSERVE_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/attnserve)

install(TARGETS attnserve EXPORT attnserveTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(DIRECTORY include/attnserve DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/generated/attnserve/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/attnserve)
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/attnserve)

install(EXPORT attnserveTargets NAMESPACE attnserve:: DESTINATION ${ATTNSERVE_CMAKE_DIR})

# The config re-finds what the library's interface needs (OpenMP, DLPack headers, the CUDA runtime
# when built with CUDA); the version file accepts any request with the same major version.
set(ATTNSERVE_PACKAGE_WITH_CUDA ${_use_cuda})
configure_package_config_file(cmake/attnserveConfig.cmake.in
  ${CMAKE_CURRENT_BINARY_DIR}/attnserveConfig.cmake INSTALL_DESTINATION ${ATTNSERVE_CMAKE_DIR})
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/attnserveConfigVersion.cmake
  VERSION ${PROJECT_VERSION} COMPATIBILITY SameMajorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/attnserveConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/attnserveConfigVersion.cmake
        DESTINATION ${ATTNSERVE_CMAKE_DIR})
