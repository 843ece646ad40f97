# Finds every third-party dependency once; modules link the imported targets.
find_package(Threads REQUIRED)
find_package(ZLIB REQUIRED)
find_package(nlohmann_json 3.10 REQUIRED)
find_package(spdlog REQUIRED)
find_package(cxxopts REQUIRED)
# OpenSSL (libssl-dev): TLS between the launcher and etcd members that require it.
find_package(OpenSSL REQUIRED)

# Boost, header-only: Asio (net/'s framed transport and the store's server, the launcher's event
# loop) and the classic Boost.Process API (the supervisor's child processes). 1.81 is the newest
# Boost Debian 12 packages (libboost1.81-dev; the default libboost-dev is 1.74) and the version
# every build here has used; nothing in the code is known to need more than 1.74, which is untested.
find_package(Boost 1.81 REQUIRED)
add_library(ddl_boost INTERFACE)
target_link_libraries(ddl_boost INTERFACE Boost::headers Threads::Threads)
target_compile_definitions(ddl_boost INTERFACE BOOST_ASIO_NO_DEPRECATED)

# Gloo: CPU collectives (worker/comm/gloo_mesh.cpp), with or without LibTorch.
if(NOT DDL_FUZZ)
  find_package(Gloo REQUIRED)
endif()

# libmunge (Debian libmunge-dev): under Slurm, the launchers of a multi-node job admit each other
# with munge credentials instead of a shared DDL_JOB_SECRET (launcher/coord/munge_auth.h).
if(NOT DDL_FUZZ)
  find_path(DDL_MUNGE_INCLUDE_DIR munge.h)
  find_library(DDL_MUNGE_LIBRARY munge)
  if(NOT DDL_MUNGE_INCLUDE_DIR OR NOT DDL_MUNGE_LIBRARY)
    message(FATAL_ERROR "libmunge not found (munge.h: ${DDL_MUNGE_INCLUDE_DIR}, library: "
                        "${DDL_MUNGE_LIBRARY}); install Debian's libmunge-dev")
  endif()
  add_library(ddl_munge INTERFACE)
  target_include_directories(ddl_munge SYSTEM INTERFACE ${DDL_MUNGE_INCLUDE_DIR})
  target_link_libraries(ddl_munge INTERFACE ${DDL_MUNGE_LIBRARY})
endif()

if(WITH_TORCH)
  find_package(Torch REQUIRED)
  # Torch's imported flags are not SYSTEM; wrap them so our -Wall -Wextra only judges our code.
  add_library(ddl_torch INTERFACE)
  target_link_libraries(ddl_torch INTERFACE ${TORCH_LIBRARIES})
  target_include_directories(ddl_torch SYSTEM INTERFACE ${TORCH_INCLUDE_DIRS})
endif()

# --- CUDA + NCCL (optional) -------------------------------------------------------------------
set(DDL_HAVE_NCCL OFF)
if(NOT WITH_NCCL STREQUAL "OFF")
  set(_cuda_hints)
  if(DEFINED ENV{CUDA_HOME})
    list(APPEND _cuda_hints $ENV{CUDA_HOME})
  endif()
  list(APPEND _cuda_hints /usr/local/cuda)
  if(DEFINED NCCL_ROOT)
    list(APPEND _cuda_hints ${NCCL_ROOT})
  endif()
  find_path(DDL_CUDA_INCLUDE_DIR cuda_runtime_api.h HINTS ${_cuda_hints} PATH_SUFFIXES include)
  find_path(DDL_NCCL_INCLUDE_DIR nccl.h HINTS ${_cuda_hints} PATH_SUFFIXES include)
  find_library(DDL_CUDART_LIBRARY cudart HINTS ${_cuda_hints} PATH_SUFFIXES lib64 lib)
  find_library(DDL_NCCL_LIBRARY NAMES nccl libnccl.so.2 HINTS ${_cuda_hints} PATH_SUFFIXES lib64 lib)
  if(DDL_CUDA_INCLUDE_DIR AND DDL_NCCL_INCLUDE_DIR AND DDL_CUDART_LIBRARY AND DDL_NCCL_LIBRARY)
    set(DDL_HAVE_NCCL ON)
    add_library(ddl_cuda_nccl INTERFACE)
    target_include_directories(ddl_cuda_nccl SYSTEM INTERFACE ${DDL_CUDA_INCLUDE_DIR} ${DDL_NCCL_INCLUDE_DIR})
    target_link_libraries(ddl_cuda_nccl INTERFACE ${DDL_NCCL_LIBRARY} ${DDL_CUDART_LIBRARY})
    message(STATUS "NCCL: ${DDL_NCCL_LIBRARY} (CUDA runtime ${DDL_CUDART_LIBRARY})")
  elseif(WITH_NCCL STREQUAL "ON")
    message(FATAL_ERROR "WITH_NCCL=ON but CUDA/NCCL were not found under CUDA_HOME or /usr/local/cuda "
                        "(cuda_runtime_api.h: ${DDL_CUDA_INCLUDE_DIR}, nccl.h: ${DDL_NCCL_INCLUDE_DIR}, "
                        "cudart: ${DDL_CUDART_LIBRARY}, nccl: ${DDL_NCCL_LIBRARY})")
  else()
    message(STATUS "NCCL: not found, building without the NCCL communicator")
  endif()
endif()
