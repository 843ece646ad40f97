# Installs the worker runtime as a CMake package, so a training program outside this tree can
#   find_package(ddlaunch REQUIRED)
#   target_link_libraries(my_trainer PRIVATE ddlaunch::ddl_runtime)
# (or ddlaunch::ddl_rendezvous + ddlaunch::ddl_gloo without LibTorch). `launch` is installed too.
include(CMakePackageConfigHelpers)

# The interface targets that wrap third-party packages travel with ours.
ddl_install_targets(ddl_boost)
if(TARGET ddl_torch)
  ddl_install_targets(ddl_torch)
endif()
if(TARGET ddl_cuda_nccl)
  ddl_install_targets(ddl_cuda_nccl)
endif()
install(TARGETS launch RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
# launch's etcd control store, loaded only by jobs that use one (launcher/CMakeLists.txt).
install(TARGETS ddl_etcd_store LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}/ddlaunch)
# launch_ps (launcher/options/launch_ps.h): a relative link to launch beside it.
install(CODE "file(CREATE_LINK launch \"\$ENV{DESTDIR}\${CMAKE_INSTALL_PREFIX}/${CMAKE_INSTALL_BINDIR}/launch_ps\" SYMBOLIC)")

set(DDL_PACKAGE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ddlaunch)
install(EXPORT ddlaunchTargets NAMESPACE ddlaunch:: DESTINATION ${DDL_PACKAGE_DIR})
set(DDL_PACKAGE_WITH_TORCH ${WITH_TORCH})
configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ddlaunchConfig.cmake.in
                              ${CMAKE_BINARY_DIR}/ddlaunchConfig.cmake
                              INSTALL_DESTINATION ${DDL_PACKAGE_DIR})
write_basic_package_version_file(${CMAKE_BINARY_DIR}/ddlaunchConfigVersion.cmake
                                 COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_BINARY_DIR}/ddlaunchConfig.cmake ${CMAKE_BINARY_DIR}/ddlaunchConfigVersion.cmake
        DESTINATION ${DDL_PACKAGE_DIR})
