# Helpers that give every Causeway component the same shape: one library target
# per folder, named causeway_<name> with an alias causeway::<name>, and tests
# registered with CTest beside it.

# Designated initializers of option structs leave the other fields at their
# defaults on purpose, so missing-field-initializers is off.
set(CAUSEWAY_WARNINGS -Wall -Wextra -Werror -Wno-unused-parameter -Wno-missing-field-initializers)
if(CAUSEWAY_THREAD_SAFETY_ANALYSIS)
  list(APPEND CAUSEWAY_WARNINGS -Wthread-safety -Wno-thread-safety-negative)
endif()

# causeway_library(NAME SRCS a.cc b.cc DEPS causeway::base absl::status)
function(causeway_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(causeway_${name} STATIC ${ARG_SRCS})
  add_library(causeway::${name} ALIAS causeway_${name})
  target_include_directories(causeway_${name} PUBLIC ${PROJECT_SOURCE_DIR})
  target_compile_options(causeway_${name} PRIVATE ${CAUSEWAY_WARNINGS})
  target_link_libraries(causeway_${name} PUBLIC ${ARG_DEPS})
endfunction()

# Links an executable with the allocator chosen at configure time.
function(causeway_link_allocator target)
  if(CAUSEWAY_USE_TCMALLOC)
    target_link_libraries(${target} PRIVATE ${CAUSEWAY_TCMALLOC_LIBRARY})
  endif()
endfunction()

# causeway_test(NAME SRCS a_test.cc DEPS causeway::x [LABELS stress] [TIMEOUT 120])
function(causeway_test name)
  cmake_parse_arguments(ARG "" "TIMEOUT" "SRCS;DEPS;LABELS" ${ARGN})
  add_executable(${name} ${ARG_SRCS})
  target_compile_options(${name} PRIVATE ${CAUSEWAY_WARNINGS})
  target_link_libraries(${name} PRIVATE ${ARG_DEPS} GTest::gtest GTest::gtest_main GTest::gmock)
  causeway_link_allocator(${name})
  if(NOT ARG_TIMEOUT)
    set(ARG_TIMEOUT 120)
  endif()
  add_test(NAME ${name} COMMAND ${name})
  set_tests_properties(${name} PROPERTIES TIMEOUT ${ARG_TIMEOUT})
  if(ARG_LABELS)
    set_tests_properties(${name} PROPERTIES LABELS "${ARG_LABELS}")
  endif()
endfunction()
