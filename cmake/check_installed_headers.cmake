# cmake -DROOT=<source dir> -P check_installed_headers.cmake
# detail/ and kernels/ are not installed, so no installed header may include one of their headers; and every
# installed header that declares something wraps it in TAPEGRAD_API_BEGIN/END. Fails naming the header.
file(GLOB_RECURSE headers RELATIVE "${ROOT}" "${ROOT}/tapegrad/framework/*.h" "${ROOT}/tapegrad/layers/*.h" "${ROOT}/tapegrad/optim/*.h")
list(APPEND headers tapegrad/tapegrad.h tapegrad/testing.h)
list(FILTER headers EXCLUDE REGEX "(^|/)(detail|kernels)/")
set(bad "")
foreach(header ${headers})
  file(STRINGS "${ROOT}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]*(detail|kernels)/")
  foreach(line ${lines})
    string(APPEND bad "  ${header}: ${line}\n")
  endforeach()
  # Note: the shared library is built with hidden visibility; a public header outside the markers would declare
  # functions that compile for a user and then fail to link. The testing kit is header-only, the umbrella
  # headers declare nothing.
  if(NOT header MATCHES "(^|/)testing/" AND NOT header MATCHES "^tapegrad/(tapegrad|testing)\\.h$")
    file(READ "${ROOT}/${header}" text)
    if(NOT text MATCHES "\nTAPEGRAD_API_BEGIN\n" OR NOT text MATCHES "\nTAPEGRAD_API_END\n*$")
      string(APPEND bad "  ${header}: no TAPEGRAD_API_BEGIN line after its includes and TAPEGRAD_API_END at its end\n")
    endif()
  endif()
endforeach()
if(bad)
  message(FATAL_ERROR "installed headers that would break a consumer (an include of an uninstalled detail/ or "
                      "kernels/ header: move it into the .cpp; a missing export marker: see tapegrad/export.h):\n${bad}")
endif()
list(LENGTH headers count)
message(STATUS "${count} installed headers, none includes an internal header, each exports what it declares")
