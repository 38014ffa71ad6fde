# cmake -DINSPECT=<tapegrad-inspect> -DFILE=<file> -DEXPECT=<text> -P check_inspect_fails.cmake
# Passes when the tool exits with status 1, prints nothing on stdout and names the problem (EXPECT) on stderr.
execute_process(COMMAND ${INSPECT} ${FILE} RESULT_VARIABLE status OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(NOT status STREQUAL "1")
  message(FATAL_ERROR "tapegrad-inspect ${FILE}: expected exit status 1, got '${status}'\nstdout: ${out}\nstderr: ${err}")
endif()
if(NOT out STREQUAL "")
  message(FATAL_ERROR "tapegrad-inspect ${FILE}: expected no output on stdout, got:\n${out}")
endif()
string(FIND "${err}" "${EXPECT}" position)
if(position EQUAL -1)
  message(FATAL_ERROR "tapegrad-inspect ${FILE}: stderr does not say '${EXPECT}':\n${err}")
endif()
