# cmake -DREADME=README.md -DSOURCE=tests/test_readme_example.cpp -P check_readme_snippet.cmake
# Fails unless README.md contains, as a ```cpp block, exactly the code between `// README-BEGIN` and
# `// README-END` in SOURCE, so the README's example is the code the test compiles and runs.
file(READ "${SOURCE}" source)
file(READ "${README}" readme)
string(FIND "${source}" "// README-BEGIN\n" begin)
string(FIND "${source}" "// README-END" end)
if(begin EQUAL -1 OR end EQUAL -1 OR end LESS begin)
  message(FATAL_ERROR "${SOURCE}: expected a `// README-BEGIN` line followed by a `// README-END` line")
endif()
math(EXPR begin "${begin} + 16")
math(EXPR length "${end} - ${begin}")
string(SUBSTRING "${source}" ${begin} ${length} snippet)
string(FIND "${readme}" "```cpp\n${snippet}```" found)
if(found EQUAL -1)
  message(FATAL_ERROR "${README} does not contain the snippet of ${SOURCE} verbatim; paste this block:\n"
                      "```cpp\n${snippet}```")
endif()
message(STATUS "README snippet matches ${SOURCE}")
