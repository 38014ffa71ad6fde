# Debian packages (included from the top-level CMakeLists.txt):
#   cmake --preset release && cmake --build build/release && (cd build/release && cpack -G DEB)
# gives libtapegrad0_<version>_<arch>.deb (the shared libraries) and libtapegrad-dev_<version>_<arch>.deb
# (headers, CMake and pkg-config files, tapegrad-inspect); `apt-get install ./libtapegrad*.deb` pulls their
# dependencies. The packages install under /usr.
set(CPACK_PACKAGE_NAME tapegrad)
set(CPACK_PACKAGE_VENDOR "tapegrad developers")
set(CPACK_PACKAGE_CONTACT "tapegrad developers <tapegrad-dev@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "${PROJECT_DESCRIPTION}")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_PACKAGING_INSTALL_PREFIX /usr)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_COMPONENTS_ALL runtime development)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)

set(CPACK_DEBIAN_RUNTIME_PACKAGE_NAME libtapegrad${PROJECT_VERSION_MAJOR})
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SECTION libs)
set(CPACK_COMPONENT_RUNTIME_DESCRIPTION
    "tapegrad deep-learning library (shared libraries)\n tapegrad is a small deep-learning framework in C++20: tensors, tape-based autograd, layers,\n optimizers, checkpoints and PyTorch/safetensors interop.")
# Note: dpkg-shlibdeps derives the runtime dependencies (libdnnl2, libboost-serialization1.74.0, libfmt9,
# libzip4, zlib1g, libgomp1, libopenmpi3, ...) from the libraries' own NEEDED entries, so the list cannot drift.
set(CPACK_DEBIAN_RUNTIME_PACKAGE_SHLIBDEPS ON)

set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_NAME libtapegrad-dev)
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SECTION libdevel)
set(CPACK_COMPONENT_DEVELOPMENT_DESCRIPTION
    "tapegrad deep-learning library (development files)\n Headers (<tapegrad/...>), CMake package (find_package(tapegrad)), pkg-config file and\n the tapegrad-inspect checkpoint tool.")
# Note: fmt is the one public dependency (its headers are included by tapegrad's); MPI and Catch2 + RapidCheck
# are needed only for the distributed and testing components, so they are suggestions.
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_DEPENDS
    "libtapegrad${PROJECT_VERSION_MAJOR} (= ${PROJECT_VERSION}), libfmt-dev (>= 9)")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SUGGESTS "libopenmpi-dev, catch2, librapidcheck-dev, cmake, pkg-config")
set(CPACK_DEBIAN_DEVELOPMENT_PACKAGE_SHLIBDEPS ON)

include(CPack)
