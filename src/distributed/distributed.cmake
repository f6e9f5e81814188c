# Communicators (src/distributed), included at the end of the top-level CMakeLists.txt.
# threads: always. MPI: when find_package(MPI) succeeds (scripts/install_deps.sh installs Open
# MPI, so CI always builds it). NCCL: with the CUDA backend when nccl.h and libnccl are found.
set(NANOVLLM_DIST_DIR ${CMAKE_CURRENT_SOURCE_DIR}/src/distributed)
set(MPI_CXX_SKIP_MPICXX ON)  # the C API only: no deprecated C++ bindings
find_package(MPI COMPONENTS CXX)
if(MPI_CXX_FOUND)
  target_sources(nanovllm PRIVATE ${NANOVLLM_DIST_DIR}/mpi_communicator.cpp)
  target_link_libraries(nanovllm PUBLIC MPI::MPI_CXX)
else()
  target_sources(nanovllm PRIVATE ${NANOVLLM_DIST_DIR}/mpi_stub.cpp)
endif()
message(STATUS "nanovllm: MPI communicator ${MPI_CXX_FOUND}")

set(NANOVLLM_WITH_NCCL OFF)
if(NANOVLLM_WITH_CUDA)
  find_path(NANOVLLM_NCCL_INCLUDE_DIR nccl.h HINTS ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  find_library(NANOVLLM_NCCL_LIBRARY nccl HINTS ${CUDAToolkit_LIBRARY_DIR} /usr/local/cuda/lib64)
  if(NANOVLLM_NCCL_INCLUDE_DIR AND NANOVLLM_NCCL_LIBRARY)
    set(NANOVLLM_WITH_NCCL ON)
  endif()
endif()
if(NANOVLLM_WITH_NCCL)
  target_sources(nanovllm PRIVATE ${NANOVLLM_DIST_DIR}/nccl_communicator.cpp)
  target_include_directories(nanovllm PRIVATE ${NANOVLLM_NCCL_INCLUDE_DIR})
  target_link_libraries(nanovllm PUBLIC CUDA::cudart ${NANOVLLM_NCCL_LIBRARY})
else()
  target_sources(nanovllm PRIVATE ${NANOVLLM_DIST_DIR}/nccl_stub.cpp)
endif()
message(STATUS "nanovllm: NCCL communicator ${NANOVLLM_WITH_NCCL}")

if(NANOVLLM_TESTS)
  include(${CMAKE_CURRENT_SOURCE_DIR}/tests/distributed/mpi_tests.cmake)
endif()
