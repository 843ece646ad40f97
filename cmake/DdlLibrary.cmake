# ddl_add_library(NAME name SOURCES a.cpp ... [HEADERS a.h ...] [PUBLIC dep ...] [PRIVATE dep ...]
#                 [INTERNAL])
#
# One static library of this project. In the tree every target includes headers by their path
# from the source root ("store/tcp_store.h"); that root is set once, for the whole tree, in the
# top-level CMakeLists.txt, and is not part of any target's interface. What a library exports is
# the installed include folder, which holds only the headers listed in HEADERS: a header left out
# of that list (a detail header, a .cpp's helper) cannot be reached by a program outside the tree.
# INTERNAL libraries (the launcher's parts) are not installed at all.
include(GNUInstallDirs)
set(DDL_INSTALL_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR}/ddl)

function(ddl_add_library)
  cmake_parse_arguments(L "INTERNAL" "NAME" "SOURCES;HEADERS;PUBLIC;PRIVATE" ${ARGN})
  add_library(${L_NAME} ${L_SOURCES})
  target_include_directories(${L_NAME} INTERFACE $<INSTALL_INTERFACE:${DDL_INSTALL_INCLUDEDIR}>)
  target_compile_options(${L_NAME} PRIVATE ${DDL_WARNINGS})
  if(L_PUBLIC)
    target_link_libraries(${L_NAME} PUBLIC ${L_PUBLIC})
  endif()
  if(L_PRIVATE)
    target_link_libraries(${L_NAME} PRIVATE ${L_PRIVATE})
  endif()
  if(L_INTERNAL)
    return()
  endif()
  ddl_install_targets(${L_NAME})
  file(RELATIVE_PATH folder ${PROJECT_SOURCE_DIR} ${CMAKE_CURRENT_SOURCE_DIR})
  foreach(header ${L_HEADERS})
    install(FILES ${header} DESTINATION ${DDL_INSTALL_INCLUDEDIR}/${folder})
  endforeach()
endfunction()

# Adds targets (libraries, or the interface targets wrapping third-party ones) to the exported set
# that cmake/ddlaunchConfig.cmake.in loads.
function(ddl_install_targets)
  install(TARGETS ${ARGN} EXPORT ddlaunchTargets
          ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
          LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
          RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endfunction()
