# The library targets (included from the top-level CMakeLists.txt):
#   tapegrad              the core library, shared by default (TAPEGRAD_SHARED), exported as tapegrad::tapegrad
#   tapegrad_distributed  data-parallel training over MPI, exported as tapegrad::distributed
#   tapegrad_testing      the header-only property-testing kit, exported as tapegrad::testing
#   tapegrad_onnx         ONNX export over ONNX's own protobuf classes, exported as tapegrad::onnx
#   tapegrad_internal     the same objects as a static library, never installed: for the tests, tools and fuzz
#                         targets that reach internal kernels and readers, which the shared library hides
# Note: the sources compile once, into tapegrad_objects, with hidden visibility; the public headers mark what
# they declare as exported (TAPEGRAD_API_BEGIN/END from the generated <tapegrad/export.h>), so the shared
# library's dynamic symbol table is the public API and nothing else.

file(GLOB_RECURSE TAPEGRAD_SOURCES CONFIGURE_DEPENDS
  ${PROJECT_SOURCE_DIR}/tapegrad/framework/*.cpp
  ${PROJECT_SOURCE_DIR}/tapegrad/layers/*.cpp
  ${PROJECT_SOURCE_DIR}/tapegrad/optim/*.cpp)
list(FILTER TAPEGRAD_SOURCES EXCLUDE REGEX "^${PROJECT_SOURCE_DIR}/tapegrad/framework/(distributed|onnx)/")

if(TAPEGRAD_SHARED)
  set(TAPEGRAD_LIBRARY_TYPE SHARED)
else()
  set(TAPEGRAD_LIBRARY_TYPE STATIC)
endif()

# Generated public headers: <tapegrad/export.h> and <tapegrad/version.h>.
set(TAPEGRAD_GENERATED_INCLUDE_DIR ${PROJECT_BINARY_DIR}/include)
configure_file(${PROJECT_SOURCE_DIR}/cmake/version.h.in ${TAPEGRAD_GENERATED_INCLUDE_DIR}/tapegrad/version.h @ONLY)

# Eigen, OpenMP, oneDNN, Boost, zlib, libzip, nlohmann_json, libpng and libjpeg are implementation details: no
# public header includes them, so they are PRIVATE and nothing of them (include paths, -fopenmp) reaches a
# consumer. fmt is PUBLIC: error.h's formatting helpers and fmt::formatter<Tensor> are part of the API.
set(TAPEGRAD_PRIVATE_DEPENDENCIES Eigen3::Eigen OpenMP::OpenMP_CXX ${TAPEGRAD_DNNL_LIBRARY} Boost::serialization
    ZLIB::ZLIB libzip::zip nlohmann_json::nlohmann_json PNG::PNG JPEG::JPEG)

add_library(tapegrad_objects OBJECT ${TAPEGRAD_SOURCES})
target_include_directories(tapegrad_objects PUBLIC ${PROJECT_SOURCE_DIR} ${TAPEGRAD_GENERATED_INCLUDE_DIR})
target_include_directories(tapegrad_objects SYSTEM PRIVATE ${TAPEGRAD_DNNL_INCLUDE_DIR})
target_link_libraries(tapegrad_objects PUBLIC fmt::fmt PRIVATE ${TAPEGRAD_PRIVATE_DEPENDENCIES})
set_target_properties(tapegrad_objects PROPERTIES POSITION_INDEPENDENT_CODE ON CXX_VISIBILITY_PRESET hidden
                                                  VISIBILITY_INLINES_HIDDEN ON)
target_compile_definitions(tapegrad_objects PRIVATE tapegrad_EXPORTS)
# Note: without -fno-math-errno GCC must keep std::sqrt (and friends) as a call that may set errno, so loops
# such as Adam's update do not vectorise. Nothing in the library reads errno after a math function (it is
# only read after failed file operations, which -fno-math-errno does not touch).
# Note: -fno-trapping-math likewise: nothing enables floating-point traps, and with trapping math GCC keeps a
# comparison turned into a number (relu's derivative, max pool's selection) as a branch at the x86-64-v2
# baseline instead of vectorising it; values are unchanged (no reassociation, unlike -ffast-math).
target_compile_options(tapegrad_objects PRIVATE $<$<CXX_COMPILER_ID:GNU,Clang>:-fno-math-errno -fno-trapping-math>)
# Note: BatchNorm's loops round every operation once (no FMA contraction): the fused BatchNorm+ReLU backward
# recomputes ReLU's input and needs the forward's bits (framework/kernels/batch_norm_runs.cpp says why).
set_source_files_properties(${PROJECT_SOURCE_DIR}/tapegrad/framework/kernels/batch_norm_runs.cpp
                            ${PROJECT_SOURCE_DIR}/tapegrad/framework/kernels/batch_norm_tiles.cpp
                            PROPERTIES COMPILE_OPTIONS $<$<CXX_COMPILER_ID:GNU,Clang>:-ffp-contract=off>)
# Note: CI compiles the library four times (Release, the sanitizers, the clang fuzz build and check_package's
# Debug subproject), and most of a file's compile time is parsing the same headers (Eigen, oneDNN, the
# framework's own): batches of 8 files per translation unit parse them once per batch (measured 246 -> 112 s of
# CPU on 8 batches). A file stays alone when it cannot share a translation unit: a file-wide pragma or macro
# that would reach the files after it (no FMA contraction, diagnostics, SIMD switches, a using-directive), or
# internal names another file also defines (a batch would clash, or worse, silently merge overloads).
if(TAPEGRAD_UNITY_BUILD)
  set_target_properties(tapegrad_objects PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  set(TAPEGRAD_UNITY_ALONE
    # file-wide pragmas or macros
    optim/lr_scheduler.cpp optim/one_cycle_lr.cpp framework/kernels/batch_norm_runs.cpp
    framework/kernels/batch_norm_tiles.cpp framework/kernels/max_pool_2x2_nhwc.cpp
    framework/kernels/max_pool_2x2.cpp framework/kernels/bfloat16_convert.cpp framework/kernels/pool_nhwc.cpp
    framework/kernels/vector_math.cpp framework/kernels/conv2d_im2col.cpp
    # a lambda capturing an internal type in a template: -Wsubobject-linkage once the file is not the main file
    framework/kernels/batch_norm_passes.cpp
    # internal names defined by another file too (one of each pair)
    framework/kernels/batch_norm_row_passes.cpp
    framework/ops/shape_ops_index.cpp framework/ops/max_pool_nhwc.cpp framework/kernels/conv2d_bf16.cpp
    framework/kernels/conv2d.cpp framework/kernels/conv2d_onednn.cpp framework/kernels/column_sums.cpp
    framework/ops/conv_transpose.cpp framework/ops/recurrent.cpp framework/ops/index.cpp)
  list(TRANSFORM TAPEGRAD_UNITY_ALONE PREPEND ${PROJECT_SOURCE_DIR}/tapegrad/)
  set_source_files_properties(${TAPEGRAD_UNITY_ALONE} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
endif()
if(TAPEGRAD_SANITIZE)
  # Note: the caching allocator (framework/storage.cpp) would hide a use after free from ASan.
  target_compile_definitions(tapegrad_objects PRIVATE TAPEGRAD_NO_CACHING_ALLOCATOR)
endif()
# Note: run-time dispatch (framework/kernels/dispatch.h) is pointless in a native build, and its load-time
# resolvers run before the sanitizers' runtime is up, so those builds get one plain copy of each kernel.
if(TAPEGRAD_NATIVE OR TAPEGRAD_SANITIZE OR TAPEGRAD_FUZZ)
  target_compile_definitions(tapegrad_objects PRIVATE TAPEGRAD_NO_DISPATCH)
endif()
if(NOT TAPEGRAD_SHARED)
  target_compile_definitions(tapegrad_objects PUBLIC TAPEGRAD_STATIC_DEFINE)
endif()

add_library(tapegrad ${TAPEGRAD_LIBRARY_TYPE} $<TARGET_OBJECTS:tapegrad_objects>)
add_library(tapegrad::tapegrad ALIAS tapegrad)
target_include_directories(tapegrad PUBLIC
  $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
  $<BUILD_INTERFACE:${TAPEGRAD_GENERATED_INCLUDE_DIR}>
  $<INSTALL_INTERFACE:${CMAKE_INSTALL_INCLUDEDIR}>)
target_compile_features(tapegrad PUBLIC cxx_std_20)
target_link_libraries(tapegrad PUBLIC fmt::fmt PRIVATE ${TAPEGRAD_PRIVATE_DEPENDENCIES})
if(NOT TAPEGRAD_SHARED)
  target_compile_definitions(tapegrad PUBLIC TAPEGRAD_STATIC_DEFINE)
endif()
set_target_properties(tapegrad PROPERTIES EXPORT_NAME tapegrad VERSION ${PROJECT_VERSION}
                                          SOVERSION ${PROJECT_VERSION_MAJOR})
if(TAPEGRAD_SHARED AND CMAKE_CXX_COMPILER_ID MATCHES "GNU|Clang")
  target_link_options(tapegrad PRIVATE "LINKER:--version-script=${PROJECT_SOURCE_DIR}/cmake/tapegrad.map")
  set_property(TARGET tapegrad APPEND PROPERTY LINK_DEPENDS ${PROJECT_SOURCE_DIR}/cmake/tapegrad.map)
endif()

include(GenerateExportHeader)
# Note: the visibility pragmas wrap whole headers, so a new declaration in a public header is exported without
# a per-declaration macro; cmake/check_installed_headers.cmake fails when an installed header lacks them.
set(TAPEGRAD_EXPORT_EXTRA [=[
/* Everything a public header declares between these two markers is part of the shared library's ABI. */
#if defined(TAPEGRAD_STATIC_DEFINE) || !(defined(__GNUC__) || defined(__clang__))
#  define TAPEGRAD_API_BEGIN
#  define TAPEGRAD_API_END
#else
#  define TAPEGRAD_API_BEGIN _Pragma("GCC visibility push(default)")
#  define TAPEGRAD_API_END _Pragma("GCC visibility pop")
#endif]=])
generate_export_header(tapegrad BASE_NAME tapegrad
                       EXPORT_FILE_NAME ${TAPEGRAD_GENERATED_INCLUDE_DIR}/tapegrad/export.h
                       CUSTOM_CONTENT_FROM_VARIABLE TAPEGRAD_EXPORT_EXTRA)

add_library(tapegrad_internal STATIC EXCLUDE_FROM_ALL $<TARGET_OBJECTS:tapegrad_objects>)
target_include_directories(tapegrad_internal PUBLIC ${PROJECT_SOURCE_DIR} ${TAPEGRAD_GENERATED_INCLUDE_DIR})
target_include_directories(tapegrad_internal SYSTEM PUBLIC ${TAPEGRAD_DNNL_INCLUDE_DIR})
target_compile_features(tapegrad_internal PUBLIC cxx_std_20)
target_link_libraries(tapegrad_internal PUBLIC fmt::fmt ${TAPEGRAD_PRIVATE_DEPENDENCIES})

if(TAPEGRAD_WITH_MPI)
  find_package(MPI REQUIRED COMPONENTS CXX)
  file(GLOB TAPEGRAD_DISTRIBUTED_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tapegrad/framework/distributed/*.cpp)
  add_library(tapegrad_distributed ${TAPEGRAD_LIBRARY_TYPE} ${TAPEGRAD_DISTRIBUTED_SOURCES})
  add_library(tapegrad::distributed ALIAS tapegrad_distributed)
  target_link_libraries(tapegrad_distributed PUBLIC tapegrad MPI::MPI_CXX PRIVATE OpenMP::OpenMP_CXX)
  set_target_properties(tapegrad_distributed PROPERTIES EXPORT_NAME distributed VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR} CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  message(STATUS "tapegrad: building tapegrad::distributed with MPI ${MPI_CXX_VERSION} (launch: ${MPIEXEC_EXECUTABLE})")
else()
  message(STATUS "tapegrad: no MPI (or TAPEGRAD_WITH_MPI=OFF): framework/distributed is not built")
endif()

# tapegrad::testing: the header-only property-testing kit (testing.h, framework/testing/) for users' layers.
# Note: only this target links Catch2 and RapidCheck; the core library never does. It is built when both are
# found, has its own export set, and find_package(tapegrad COMPONENTS testing) is what loads it.
find_package(Catch2 2.13 QUIET)
find_package(rapidcheck QUIET)
if(Catch2_FOUND AND rapidcheck_FOUND)
  add_library(tapegrad_testing INTERFACE)
  add_library(tapegrad::testing ALIAS tapegrad_testing)
  target_link_libraries(tapegrad_testing INTERFACE tapegrad Catch2::Catch2 rapidcheck rapidcheck_catch)
  set_target_properties(tapegrad_testing PROPERTIES EXPORT_NAME testing)
else()
  message(STATUS "tapegrad: Catch2 or RapidCheck not found: tapegrad::testing is not built")
endif()

# tapegrad::onnx: ONNX export (framework/onnx), built when ONNX 1.12's C++ library (Debian's libonnx-dev: its
# protobuf classes, checker and shape inference) and protobuf are found.
# Note: only this target links ONNX and protobuf, PRIVATE: its public header includes neither, and the core
# library never does.
find_package(Protobuf QUIET)
if(Protobuf_FOUND)
  find_package(ONNX QUIET CONFIG)
endif()
option(TAPEGRAD_WITH_ONNX "Build tapegrad::onnx (framework/onnx) when ONNX is found" ON)
if(TAPEGRAD_WITH_ONNX AND ONNX_FOUND AND TARGET onnx AND TARGET onnx_proto)
  file(GLOB_RECURSE TAPEGRAD_ONNX_SOURCES CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/tapegrad/framework/onnx/*.cpp)
  add_library(tapegrad_onnx ${TAPEGRAD_LIBRARY_TYPE} ${TAPEGRAD_ONNX_SOURCES})
  add_library(tapegrad::onnx ALIAS tapegrad_onnx)
  target_link_libraries(tapegrad_onnx PUBLIC tapegrad PRIVATE onnx onnx_proto)
  set_target_properties(tapegrad_onnx PROPERTIES EXPORT_NAME onnx VERSION ${PROJECT_VERSION}
                        SOVERSION ${PROJECT_VERSION_MAJOR} CXX_VISIBILITY_PRESET hidden VISIBILITY_INLINES_HIDDEN ON)
  message(STATUS "tapegrad: building tapegrad::onnx with ONNX ${ONNX_VERSION}")
else()
  message(STATUS "tapegrad: no ONNX (libonnx-dev) or TAPEGRAD_WITH_ONNX=OFF: framework/onnx is not built")
endif()
