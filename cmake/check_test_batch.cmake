# Run by cmake/test_unity.cmake after a test batch links:
#   cmake -DPROGRAM=<batch program> -DNAMES=<file1;file2...> -DSTAMP=<file> -P check_test_batch.cmake
# Catch2 refuses to list the cases of a program in which two cases share a name (and would refuse to run them,
# failing every ctest entry of the batch): fail the build instead. Every case must belong to exactly one file's
# selection, [#<name>]~[.] as its ctest entry runs it (a case defined in a header, tagged with the header's name,
# would run nowhere), and no file may select nothing. Writes STAMP, the case count of each file, when all is well.
# Note: Catch2 v2 exits with the number of cases listed, so the status says nothing; its error goes to stderr.
function(list_cases out_var)
  execute_process(COMMAND ${PROGRAM} ${ARGN} --list-test-names-only OUTPUT_VARIABLE cases ERROR_VARIABLE errors)
  if(NOT errors STREQUAL "")
    message(FATAL_ERROR "${PROGRAM} ${ARGN}: Catch2 refuses its test cases:\n${errors}")
  endif()
  # Note: one name a line; lines are counted, not made a list (a name may hold a ';').
  string(REGEX REPLACE "[^\n]" "" newlines "${cases}")
  string(LENGTH "${newlines}" count)
  set(${out_var} ${count} PARENT_SCOPE)
endfunction()

list_cases(total)
set(sum 0)
set(counts "")
foreach(name ${NAMES})
  list_cases(count "[#${name}]~[.]" --filenames-as-tags)
  if(count EQUAL 0)
    message(FATAL_ERROR "${PROGRAM}: [#${name}]~[.] selects no test case of ${name}.cpp")
  endif()
  math(EXPR sum "${sum} + ${count}")
  string(APPEND counts "${name} ${count}\n")
endforeach()
if(NOT sum EQUAL total)
  message(FATAL_ERROR "${PROGRAM}: its files select ${sum} test cases, but it holds ${total}:\n${counts}")
endif()
file(WRITE ${STAMP} "${counts}")
