# MPI tests (label distributed), included from src/distributed/distributed.cmake. CI runs as
# root, hence --allow-run-as-root; --oversubscribe lets 4 ranks share this machine's 2 cores.
if(MPI_CXX_FOUND)
  set(NANOVLLM_MPIRUN ${MPIEXEC_EXECUTABLE} --oversubscribe --allow-run-as-root)
  string(REPLACE ";" " " NANOVLLM_MPIRUN_LINE "${NANOVLLM_MPIRUN}")
  add_executable(mpi_collectives_main ${CMAKE_CURRENT_SOURCE_DIR}/tests/distributed/mpi_collectives_main.cpp)
  add_executable(mpi_failure_main ${CMAKE_CURRENT_SOURCE_DIR}/tests/distributed/mpi_failure_main.cpp)
  foreach(t mpi_collectives_main mpi_failure_main)
    target_include_directories(${t} PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
    target_link_libraries(${t} PRIVATE nanovllm)
  endforeach()
  foreach(np 2 3 4)
    add_test(NAME mpi_collectives_np${np}
             COMMAND ${NANOVLLM_MPIRUN} -np ${np} $<TARGET_FILE:mpi_collectives_main>)
    set_tests_properties(mpi_collectives_np${np} PROPERTIES LABELS distributed TIMEOUT 120)
  endforeach()
endif()
# mpi_failures_test (globbed from tests/distributed) launches mpirun itself; without MPI it
# fails saying how to install it.
if(TARGET mpi_failures_test AND MPI_CXX_FOUND)
  target_compile_definitions(mpi_failures_test PRIVATE
    NANOVLLM_MPIRUN="${NANOVLLM_MPIRUN_LINE}"
    NANOVLLM_MPI_FAILURE_MAIN="$<TARGET_FILE:mpi_failure_main>")
  add_dependencies(mpi_failures_test mpi_failure_main)
endif()
# Tensor-parallel Qwen3/Qwen2 under mpirun: mpi_tp_test launches mpi_tp_main.
if(TARGET mpi_tp_test AND MPI_CXX_FOUND)
  add_executable(mpi_tp_main ${CMAKE_CURRENT_SOURCE_DIR}/tests/distributed/mpi_tp_main.cpp)
  target_include_directories(mpi_tp_main PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/tests)
  target_link_libraries(mpi_tp_main PRIVATE nanovllm)
  target_compile_definitions(mpi_tp_test PRIVATE
    NANOVLLM_MPIRUN="${NANOVLLM_MPIRUN_LINE}"
    NANOVLLM_MPI_TP_MAIN="$<TARGET_FILE:mpi_tp_main>")
  add_dependencies(mpi_tp_test mpi_tp_main)
endif()
# The tensor-parallel engine under mpirun (mpi_engine_test runs `mpirun ... nanovllm generate`).
if(TARGET mpi_engine_test AND MPI_CXX_FOUND)
  target_compile_definitions(mpi_engine_test PRIVATE NANOVLLM_MPIRUN="${NANOVLLM_MPIRUN_LINE}")
  add_dependencies(mpi_engine_test nanovllm_cli)
endif()
