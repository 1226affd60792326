cmake_minimum_required(VERSION 3.25)
# Script mode: the C++ example in README.md is examples/quickstart.cpp (apart from that file's
# first comment line), and it compiles without a warning under -Wall -Wextra -Werror with
# kvphase's headers on a plain -I path, as a user who copies it compiles it.
#   -DREADME=… -DQUICKSTART=… -DINCLUDE=<kvphase include dir> -DCXX=… -DDEPS=<dirs;…>
#   -DFLAGS=<extra flags;…> -DIMPLICIT=<the compiler's own include dirs;…> -DOUT=<scratch dir>
file(READ ${README} text)
string(FIND "${text}" "```cpp\n" begin)
if(begin EQUAL -1)
  message(FATAL_ERROR "README.md has no ```cpp block")
endif()
math(EXPR begin "${begin} + 7")
string(SUBSTRING "${text}" ${begin} -1 rest)
string(FIND "${rest}" "```" end)
string(SUBSTRING "${rest}" 0 ${end} example)
file(READ ${QUICKSTART} quick)
string(REGEX REPLACE "^//[^\n]*\n" "" quick "${quick}")
if(NOT example STREQUAL quick)
  message(FATAL_ERROR "README.md's C++ example differs from examples/quickstart.cpp")
endif()
file(MAKE_DIRECTORY ${OUT})
file(WRITE ${OUT}/readme_example.cpp "${example}")
set(args -std=c++20 -Wall -Wextra -Werror -O2 -I${INCLUDE})
list(REMOVE_DUPLICATES DEPS)
foreach(d IN LISTS DEPS)
  if(NOT d IN_LIST IMPLICIT)   # -isystem /usr/include would break libstdc++'s #include_next
    list(APPEND args -isystem ${d})
  endif()
endforeach()
execute_process(COMMAND ${CXX} ${args} ${FLAGS} -c ${OUT}/readme_example.cpp -o ${OUT}/readme_example.o
                RESULT_VARIABLE rc ERROR_VARIABLE err)
if(NOT rc EQUAL 0)
  message(FATAL_ERROR "README example: ${CXX} ${args} ${FLAGS} failed:\n${err}")
endif()
message(STATUS "README example identical to quickstart.cpp, compiles warning-free")
