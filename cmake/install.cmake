# What `cmake --install build --prefix P` puts under P: the static library, the public headers
# (include/multihead and the generated version.h), the CLI, a CMake package
# (find_package(multihead 0.1) gives multihead::multihead) and a pkg-config file. The Python
# package is not part of it: `pip install .` builds and installs that (setup.py), and
# `cmake --install build --component python` copies the build's module into the interpreter's
# site packages.
include(CMakePackageConfigHelpers)
set(MULTIHEAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/multihead)

install(TARGETS multihead_lib EXPORT multiheadTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS multihead RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(DIRECTORY include/multihead ${CMAKE_BINARY_DIR}/include/multihead DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT multiheadTargets NAMESPACE multihead:: DESTINATION ${MULTIHEAD_CMAKE_DIR})

# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/multiheadConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
configure_package_config_file(cmake/multiheadConfig.cmake.in ${CMAKE_BINARY_DIR}/multiheadConfig.cmake
                              INSTALL_DESTINATION ${MULTIHEAD_CMAKE_DIR})
install(FILES ${CMAKE_BINARY_DIR}/multiheadConfig.cmake ${CMAKE_BINARY_DIR}/multiheadConfigVersion.cmake
        DESTINATION ${MULTIHEAD_CMAKE_DIR})

# pkg-config: the library is static, so everything it links is in Libs and Requires (a plain
# `pkg-config --libs multihead` links), and the prefix is found from the file's own place.
set(MULTIHEAD_PC_REQUIRES "fmt nlohmann_json libhwy sentencepiece cairo zlib")
if(MULTIHEAD_HAVE_MPI)
  string(APPEND MULTIHEAD_PC_REQUIRES " ompi-c")
endif()
file(RELATIVE_PATH MULTIHEAD_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
configure_file(cmake/multihead.pc.in ${CMAKE_BINARY_DIR}/multihead.pc @ONLY)
install(FILES ${CMAKE_BINARY_DIR}/multihead.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
