# Install and export (included from the top-level CMakeLists.txt). Three ways in for a consumer:
#   find_package(tapegrad 0.1 CONFIG REQUIRED [COMPONENTS distributed testing onnx]), then tapegrad::tapegrad
#   pkg-config --cflags --libs tapegrad
#   add_subdirectory / FetchContent of this source tree (the targets above, under the same names)
# Components of the Debian packages (cmake/packaging.cmake): "runtime" (libtapegrad0: the shared libraries)
# and "development" (libtapegrad-dev: headers, the .so links, CMake and pkg-config files, tapegrad-inspect).
include(CMakePackageConfigHelpers)

install(TARGETS tapegrad EXPORT tapegradTargets
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
install(DIRECTORY tapegrad/framework tapegrad/layers tapegrad/optim
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad COMPONENT development
        FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE PATTERN "kernels" EXCLUDE PATTERN "distributed" EXCLUDE
        PATTERN "testing" EXCLUDE PATTERN "onnx" EXCLUDE)
install(FILES tapegrad/tapegrad.h ${TAPEGRAD_GENERATED_INCLUDE_DIR}/tapegrad/export.h
              ${TAPEGRAD_GENERATED_INCLUDE_DIR}/tapegrad/version.h
        DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad COMPONENT development)
install(EXPORT tapegradTargets NAMESPACE tapegrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad
        COMPONENT development)
# Note: tapegrad::distributed has its own export set, so an install without MPI has no target that would make
# find_package(tapegrad) look for MPI; the config file loads it (and MPI) only when present, and
# find_package(tapegrad COMPONENTS distributed) fails clearly when it is not.
if(TAPEGRAD_WITH_MPI)
  install(TARGETS tapegrad_distributed EXPORT tapegradDistributedTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
  install(DIRECTORY tapegrad/framework/distributed DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad/framework
          COMPONENT development FILES_MATCHING PATTERN "*.h")
  install(EXPORT tapegradDistributedTargets NAMESPACE tapegrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad
          COMPONENT development)
endif()
# Note: tapegrad::onnx has its own export set too; it links ONNX and protobuf privately, so a consumer of the
# shared library needs neither (the config file looks for them only for a static install).
if(TARGET tapegrad_onnx)
  install(TARGETS tapegrad_onnx EXPORT tapegradOnnxTargets
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT runtime NAMELINK_COMPONENT development
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR} COMPONENT development)
  install(DIRECTORY tapegrad/framework/onnx DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad/framework
          COMPONENT development FILES_MATCHING PATTERN "*.h" PATTERN "detail" EXCLUDE)
  install(EXPORT tapegradOnnxTargets NAMESPACE tapegrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad
          COMPONENT development)
endif()
if(TARGET tapegrad_testing)
  install(TARGETS tapegrad_testing EXPORT tapegradTestingTargets COMPONENT development)
  install(FILES tapegrad/testing.h DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad COMPONENT development)
  install(DIRECTORY tapegrad/framework/testing DESTINATION ${CMAKE_INSTALL_INCLUDEDIR}/tapegrad/framework
          COMPONENT development FILES_MATCHING PATTERN "*.h")
  install(EXPORT tapegradTestingTargets NAMESPACE tapegrad:: DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad
          COMPONENT development)
endif()

configure_package_config_file(cmake/tapegradConfig.cmake.in ${PROJECT_BINARY_DIR}/tapegradConfig.cmake
                              INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad)
# Note: 0.x releases may break the API at every minor version, so 0.1 accepts 0.1.* only.
write_basic_package_version_file(${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/tapegradConfig.cmake ${PROJECT_BINARY_DIR}/tapegradConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/tapegrad COMPONENT development)

# pkg-config: the .pc file finds its prefix from its own location (${pcfiledir}), so an install moved or
# unpacked elsewhere (a .deb, a staging directory) stays right.
file(RELATIVE_PATH TAPEGRAD_PC_TO_PREFIX ${CMAKE_INSTALL_FULL_LIBDIR}/pkgconfig ${CMAKE_INSTALL_PREFIX})
string(REGEX REPLACE "/$" "" TAPEGRAD_PC_TO_PREFIX "${TAPEGRAD_PC_TO_PREFIX}")
if(TAPEGRAD_SHARED)
  set(TAPEGRAD_PC_LIBS_PRIVATE "")
else()
  # Note: a static libtapegrad brings its private dependencies to the final link.
  set(TAPEGRAD_PC_LIBS_PRIVATE "Libs.private: -ldnnl -lboost_serialization -lzip -lpng16 -ljpeg -lz -fopenmp")
endif()
configure_file(cmake/tapegrad.pc.in ${PROJECT_BINARY_DIR}/tapegrad.pc @ONLY)
install(FILES ${PROJECT_BINARY_DIR}/tapegrad.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig COMPONENT development)
