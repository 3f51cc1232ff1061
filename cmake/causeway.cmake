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
# Every library is installed and exported as causeway::<name> (see
# cmake/causewayConfig.cmake.in).
function(causeway_library name)
  cmake_parse_arguments(ARG "" "" "SRCS;DEPS" ${ARGN})
  add_library(causeway_${name} STATIC ${ARG_SRCS})
  add_library(causeway::${name} ALIAS causeway_${name})
  target_include_directories(causeway_${name} PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}>
                                                     $<INSTALL_INTERFACE:include>)
  target_compile_options(causeway_${name} PRIVATE ${CAUSEWAY_WARNINGS})
  target_link_libraries(causeway_${name} PUBLIC ${ARG_DEPS})
  causeway_install_library(causeway_${name} ${name})
endfunction()

# Installs a library target into the causeway export set as causeway::<export_name>.
function(causeway_install_library target export_name)
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${export_name})
  install(TARGETS ${target} EXPORT causewayTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR})
endfunction()

# Links an executable with the allocator chosen at configure time.
function(causeway_link_allocator target)
  if(CAUSEWAY_USE_TCMALLOC)
    target_link_libraries(${target} PRIVATE ${CAUSEWAY_TCMALLOC_LIBRARY})
  endif()
endfunction()

# causeway_test(NAME SRCS a_test.cc DEPS causeway::x [LABELS stress] [TIMEOUT 120])
# Nothing when BUILD_TESTING is off.
function(causeway_test name)
  if(NOT BUILD_TESTING)
    return()
  endif()
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
