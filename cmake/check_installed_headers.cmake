# cmake -DROOT=<source dir> -P check_installed_headers.cmake
# framework/detail/ is not installed, so no installed header may include a detail header; this fails
# (naming the header) when one does, before a user's build fails on a missing file.
file(GLOB_RECURSE headers RELATIVE "${ROOT}" "${ROOT}/tapegrad/framework/*.h" "${ROOT}/tapegrad/layers/*.h" "${ROOT}/tapegrad/optim/*.h")
list(APPEND headers tapegrad/tapegrad.h tapegrad/testing.h)
list(FILTER headers EXCLUDE REGEX "(^|/)detail/")
set(bad "")
foreach(header ${headers})
  file(STRINGS "${ROOT}/${header}" lines REGEX "^[ \t]*#[ \t]*include[ \t]*[\"<][^\">]*detail/")
  foreach(line ${lines})
    string(APPEND bad "  ${header}: ${line}\n")
  endforeach()
endforeach()
if(bad)
  message(FATAL_ERROR "installed headers include uninstalled detail/ headers (move the include into the .cpp, "
                      "or install that detail header in CMakeLists.txt):\n${bad}")
endif()
list(LENGTH headers count)
message(STATUS "${count} installed headers, none includes a detail/ header")
