# cmake -DROOT=<source dir> -P check_layout.cmake
# Keeps the layout showing the architecture (docs/architecture.md, "Levels"): fails, naming file and line, when
#  - a source file under tapegrad/, tests/, bench/, examples/, tools/ or fuzz/ is over 500 lines, or
#  - an #include <tapegrad/...> in a file of one level names a file of a higher level, or a file with no level.
cmake_minimum_required(VERSION 3.25)

set(max_lines 500)

# The levels, lowest first: a file may include files of its own level and of the levels below it, never above.
# One line per folder ("path/" covers everything under it); tapegrad/framework/ itself spans levels, so its
# files are listed by stem ("path/stem" is stem.h and stem.cpp). The longest matching line decides a file's level.
# tapegrad/export.h and tapegrad/version.h, when a build generates them, include nothing of tapegrad: base.
set(levels
  "0  base         tapegrad/export"
  "0  base         tapegrad/version"
  "0  base         tapegrad/framework/version"
  "0  base         tapegrad/framework/error"
  "0  base         tapegrad/framework/dtype"
  "0  base         tapegrad/framework/bfloat16"
  "0  base         tapegrad/framework/shape"
  "0  base         tapegrad/framework/checked_arithmetic"
  "0  base         tapegrad/framework/generator"
  "0  base         tapegrad/framework/parallel"
  "0  base         tapegrad/framework/memory_format"
  "0  base         tapegrad/framework/autocast"
  "1  tensor       tapegrad/framework/storage"
  "1  tensor       tapegrad/framework/tensor"
  "1  tensor       tapegrad/framework/tensor_memory_format"
  "1  tensor       tapegrad/framework/factory"
  "1  tensor       tapegrad/framework/print"
  "1  tensor       tapegrad/framework/file_io"
  "1  tensor       tapegrad/framework/detail/"
  "2  autograd     tapegrad/framework/autograd/"
  "3  kernels      tapegrad/framework/kernels/"
  "4  ops          tapegrad/framework/ops/"
  "5  module       tapegrad/framework/module"
  "5  module       tapegrad/framework/module_holder"
  "5  module       tapegrad/framework/init"
  "6  services     tapegrad/framework/data/"
  "6  services     tapegrad/framework/gradcheck/"
  "6  services     tapegrad/framework/serialize/"
  "7  testing      tapegrad/framework/testing/"
  "8  layers       tapegrad/layers/"
  "9  optim        tapegrad/optim/"
  "10 distributed  tapegrad/framework/distributed/"
  "10 onnx         tapegrad/framework/onnx/"
  "11 umbrella     tapegrad/tapegrad"
  "11 umbrella     tapegrad/testing"
  "12 programs     tests/"
  "12 programs     bench/"
  "12 programs     examples/"
  "12 programs     tools/"
  "12 programs     fuzz/"
)

# Sets <out_level> and <out_name> to the level of `path` (relative to ROOT), or to "" when no line matches.
function(level_of path out_level out_name)
  set(best_length -1)
  set(best_level "")
  set(best_name "")
  string(REGEX REPLACE "\\.(h|cpp)$" "" stem "${path}")
  foreach(entry ${levels})
    string(REGEX MATCH "^([0-9]+) +([a-z]+) +(.+)$" ignored "${entry}")
    set(level ${CMAKE_MATCH_1})
    set(name ${CMAKE_MATCH_2})
    set(key ${CMAKE_MATCH_3})
    string(LENGTH "${key}" key_length)
    set(matches FALSE)
    if(key MATCHES "/$")
      string(FIND "${path}" "${key}" at)
      if(at EQUAL 0)
        set(matches TRUE)
      endif()
    elseif(stem STREQUAL key)
      set(matches TRUE)
    endif()
    if(matches AND key_length GREATER best_length)
      set(best_length ${key_length})
      set(best_level ${level})
      set(best_name ${name})
    endif()
  endforeach()
  set(${out_level} "${best_level}" PARENT_SCOPE)
  set(${out_name} "${best_name}" PARENT_SCOPE)
endfunction()

set(folders tapegrad tests bench examples tools fuzz)
set(patterns "")
foreach(folder ${folders})
  list(APPEND patterns "${ROOT}/${folder}/*.h" "${ROOT}/${folder}/*.hpp" "${ROOT}/${folder}/*.cpp"
                       "${ROOT}/${folder}/*.py" "${ROOT}/${folder}/*.sh" "${ROOT}/${folder}/*.cmake"
                       "${ROOT}/${folder}/CMakeLists.txt")
endforeach()
file(GLOB_RECURSE files RELATIVE "${ROOT}" ${patterns})
list(SORT files)

set(problems "")
set(include_count 0)
foreach(file ${files})
  file(READ "${ROOT}/${file}" content)
  # Note: counted as wc -l counts, by newlines; file(STRINGS) would drop empty lines.
  string(REGEX REPLACE "[^\n]" "" newlines "${content}")
  string(LENGTH "${newlines}" line_count)
  if(line_count GREATER max_lines)
    string(APPEND problems "  ${file}:${line_count}: ${line_count} lines (at most ${max_lines}); split it along its seam\n")
  endif()

  if(NOT file MATCHES "\\.(h|hpp|cpp)$")
    continue()
  endif()
  string(REGEX MATCHALL "(^|\n)[ \t]*#[ \t]*include[ \t]*<tapegrad/[^>\n]*>" includes "${content}")
  if(NOT includes)
    continue()
  endif()
  level_of("${file}" file_level file_level_name)
  if(file_level STREQUAL "")
    string(APPEND problems "  ${file}:1: has no level; add its folder to the table in cmake/check_layout.cmake\n")
    continue()
  endif()
  set(search_from 0)
  foreach(include ${includes})
    math(EXPR include_count "${include_count} + 1")
    string(REGEX REPLACE "^\n" "" include "${include}")
    string(REGEX REPLACE ".*<(tapegrad/[^>]*)>.*" "\\1" target "${include}")
    # The line number: the newlines before this include (searched from the previous one, so repeats count).
    string(SUBSTRING "${content}" ${search_from} -1 rest)
    string(FIND "${rest}" "${include}" offset)
    math(EXPR at "${search_from} + ${offset}")
    string(SUBSTRING "${content}" 0 ${at} before)
    string(REGEX REPLACE "[^\n]" "" before_newlines "${before}")
    string(LENGTH "${before_newlines}" line)
    math(EXPR line "${line} + 1")
    string(LENGTH "${include}" include_length)
    math(EXPR search_from "${at} + ${include_length}")

    level_of("${target}" target_level target_level_name)
    if(target_level STREQUAL "")
      string(APPEND problems "  ${file}:${line}: includes <${target}>, which has no level in cmake/check_layout.cmake\n")
    elseif(target_level GREATER file_level)
      string(APPEND problems "  ${file}:${line}: includes <${target}> (level ${target_level}, ${target_level_name}) "
                             "from level ${file_level} (${file_level_name}); a file may include only its own "
                             "level and those below\n")
    endif()
  endforeach()
endforeach()

if(problems)
  message(FATAL_ERROR "the layout check failed (docs/architecture.md, \"Levels\"):\n${problems}")
endif()
list(LENGTH files file_count)
message(STATUS "${file_count} files, none over ${max_lines} lines; ${include_count} <tapegrad/...> includes, none upward")
