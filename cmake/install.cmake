# SPDX-License-Identifier: Apache-2.0
# What `cmake --install build --prefix P` puts under P: the static libraries of the three layers
# and their headers, each layer an install component (core, train, app: `cmake --install build
# --component core` installs that layer alone), the CLI, a CMake package
# (find_package(multihead 0.1 COMPONENTS core) gives multihead::core; without components every
# layer, and multihead::multihead links them all) and a pkg-config file a layer
# (multihead-core, multihead-train, multihead-app; multihead is all of them). The Python
# package is not part of it: `pip install .` builds and installs that (setup.py), and
# `cmake --install build --component python` copies the build's module into the interpreter's
# site packages.
include(CMakePackageConfigHelpers)
set(MULTIHEAD_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/multihead)

# Each layer's headers: core (core, io, kernels, nn; multihead/multihead.h includes its public
# API), train (data, train; multihead/train.h), app (tasks, serve, experiments, bench, report;
# multihead/app.h).
set(MULTIHEAD_HEADERS_core core io kernels nn)
set(MULTIHEAD_HEADERS_train data train)
set(MULTIHEAD_HEADERS_app tasks serve experiments bench report)
set(MULTIHEAD_UMBRELLA_core multihead.h)
set(MULTIHEAD_UMBRELLA_train train.h)
set(MULTIHEAD_UMBRELLA_app app.h)
foreach(layer core train app)
  # An export set a layer, so that a layer installed alone is a complete package.
  install(TARGETS multihead_${layer} EXPORT multihead_${layer}_targets COMPONENT ${layer}
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
  foreach(dir ${MULTIHEAD_HEADERS_${layer}})
    install(DIRECTORY include/multihead/${dir} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/multihead COMPONENT ${layer})
  endforeach()
  install(FILES include/multihead/${MULTIHEAD_UMBRELLA_${layer}} DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/multihead
          COMPONENT ${layer})
endforeach()
install(FILES ${CMAKE_BINARY_DIR}/include/multihead/version.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/multihead
        COMPONENT core)
install(TARGETS multihead_all EXPORT multihead_app_targets COMPONENT app)
install(TARGETS multihead RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR} COMPONENT app)
# The licence travels with every component (Apache-2.0, the file at the root).
install(FILES LICENSE DESTINATION ${CMAKE_INSTALL_DATADIR}/doc/multihead COMPONENT core)
foreach(layer core train app)
  install(EXPORT multihead_${layer}_targets NAMESPACE multihead:: DESTINATION ${MULTIHEAD_CMAKE_DIR}
          FILE multihead-${layer}-targets.cmake COMPONENT ${layer})
endforeach()

# 0.x: a minor version may change the API, so only the same minor version is compatible.
write_basic_package_version_file(${CMAKE_BINARY_DIR}/multiheadConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
configure_package_config_file(cmake/multiheadConfig.cmake.in ${CMAKE_BINARY_DIR}/multiheadConfig.cmake
                              INSTALL_DESTINATION ${MULTIHEAD_CMAKE_DIR})
install(FILES ${CMAKE_BINARY_DIR}/multiheadConfig.cmake ${CMAKE_BINARY_DIR}/multiheadConfigVersion.cmake
        DESTINATION ${MULTIHEAD_CMAKE_DIR} COMPONENT core)

# pkg-config, a file a layer: the libraries are static, so everything a layer links is in its Libs
# and Requires (a plain `pkg-config --libs multihead-core` links), and the prefix is found from the
# file's own place. multihead.pc is every layer.
file(RELATIVE_PATH MULTIHEAD_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
set(MULTIHEAD_PC_DESCRIPTION_core "Transformer multi-head attention on the CPU: tensors, kernels, layers, state_dict I/O")
set(MULTIHEAD_PC_REQUIRES_core "fmt nlohmann_json libhwy zlib")
set(MULTIHEAD_PC_LIBS_core "-lmultihead_core ${OPENBLAS_LIBRARY} -ldnnl -fopenmp")
set(MULTIHEAD_PC_DESCRIPTION_train "multihead's training: data, tokenizers, the training loop, checkpoints")
set(MULTIHEAD_PC_REQUIRES_train "multihead-core sentencepiece icu-uc libzip zlib libcrypto")
if(MULTIHEAD_HAVE_MPI)
  string(APPEND MULTIHEAD_PC_REQUIRES_train " ompi-c")
endif()
set(MULTIHEAD_PC_LIBS_train "-lmultihead_train")
set(MULTIHEAD_PC_DESCRIPTION_app "multihead's applications: tasks, trained runs, serving, experiments, reports")
set(MULTIHEAD_PC_REQUIRES_app "multihead-train cairo")
set(MULTIHEAD_PC_LIBS_app "-lmultihead_app")
set(MULTIHEAD_PC_DESCRIPTION_all "Transformer multi-head attention on the CPU: layers, training, inspection")
set(MULTIHEAD_PC_REQUIRES_all "multihead-app")
set(MULTIHEAD_PC_LIBS_all "")
foreach(layer core train app all)
  if(layer STREQUAL "all")
    set(MULTIHEAD_PC_NAME multihead)
  else()
    set(MULTIHEAD_PC_NAME multihead-${layer})
  endif()
  set(MULTIHEAD_PC_DESCRIPTION ${MULTIHEAD_PC_DESCRIPTION_${layer}})
  set(MULTIHEAD_PC_REQUIRES ${MULTIHEAD_PC_REQUIRES_${layer}})
  set(MULTIHEAD_PC_LIBS ${MULTIHEAD_PC_LIBS_${layer}})
  configure_file(cmake/multihead.pc.in ${CMAKE_BINARY_DIR}/${MULTIHEAD_PC_NAME}.pc @ONLY)
  if(layer STREQUAL "all")
    install(FILES ${CMAKE_BINARY_DIR}/${MULTIHEAD_PC_NAME}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT app)
  else()
    install(FILES ${CMAKE_BINARY_DIR}/${MULTIHEAD_PC_NAME}.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig
            COMPONENT ${layer})
  endif()
endforeach()
