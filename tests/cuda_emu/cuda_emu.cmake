# Label cuda_emu: the CUDA backend's own sources (src/backend/cuda), compiled by the host C++
# compiler against the emulator in tests/cuda_emu, run the tests of tests/cuda on the CPU. Needs
# no GPU and no CUDA toolkit. Included from CMakeLists.txt when tests are built.
set(NANOVLLM_EMU_DIR ${CMAKE_CURRENT_SOURCE_DIR}/tests/cuda_emu)
set(NANOVLLM_EMU_GEN ${CMAKE_CURRENT_BINARY_DIR}/generated/cuda_emu)
file(GLOB NANOVLLM_EMU_CU CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/backend/cuda/*.cu)
file(GLOB NANOVLLM_EMU_HOST CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/src/backend/cuda/*.cpp)
set(NANOVLLM_EMU_SOURCES ${NANOVLLM_EMU_HOST} ${NANOVLLM_EMU_DIR}/emu_runtime.cpp
  ${NANOVLLM_EMU_DIR}/emu_cublaslt.cpp ${NANOVLLM_EMU_DIR}/emu_nccl.cpp)
foreach(cu ${NANOVLLM_EMU_CU})
  get_filename_component(stem ${cu} NAME_WE)
  set(out ${NANOVLLM_EMU_GEN}/${stem}.cpp)
  add_custom_command(OUTPUT ${out}
    COMMAND ${CMAKE_COMMAND} -DIN=${cu} -DOUT=${out} -P ${NANOVLLM_EMU_DIR}/rewrite_launches.cmake
    DEPENDS ${cu} ${NANOVLLM_EMU_DIR}/rewrite_launches.cmake VERBATIM)
  list(APPEND NANOVLLM_EMU_SOURCES ${out})
endforeach()
add_library(nanovllm_cuda_emu STATIC ${NANOVLLM_EMU_SOURCES})
# The emulator's cuda_runtime.h & co. come before any CUDA toolkit on the include path.
target_include_directories(nanovllm_cuda_emu BEFORE PUBLIC ${NANOVLLM_EMU_DIR}/include)
target_include_directories(nanovllm_cuda_emu PUBLIC include src)
target_compile_definitions(nanovllm_cuda_emu PUBLIC cuda=cuda_emu NANOVLLM_CUDA_EMU)
# No FMA contraction (the GPU code rounds each product where it says so); no strict aliasing
# (kernels read bf16 rows as uint4, as CUDA code does); #pragma unroll is nvcc's.
target_compile_options(nanovllm_cuda_emu PRIVATE -ffp-contract=off -fno-strict-aliasing
  -Wno-unknown-pragmas)
target_link_libraries(nanovllm_cuda_emu PUBLIC nanovllm_test_support)

# Each executable links, as objects ahead of libnanovllm.a, the registry and NCCL communicator
# built on the emulator (emu_registry.cpp, emu_nccl_communicator.cpp).
file(GLOB NANOVLLM_EMU_TESTS CONFIGURE_DEPENDS tests/cuda/*_test.cpp)
foreach(src ${NANOVLLM_EMU_TESTS})
  get_filename_component(name ${src} NAME_WE)
  add_executable(emu_${name} ${src} ${NANOVLLM_EMU_DIR}/emu_registry.cpp
    ${NANOVLLM_EMU_DIR}/emu_nccl_communicator.cpp)
  target_include_directories(emu_${name} PRIVATE tests)
  target_compile_options(emu_${name} PRIVATE -Wno-unknown-pragmas)
  target_link_libraries(emu_${name} PRIVATE nanovllm_cuda_emu nanovllm_test_support
    GTest::gtest_main)
  # Qwen3-0.6B-shaped layers take minutes in emulation: label heavy there. So do the MoE presets'
  # prefix-cache and fp8 suites (30 to 80 s each here; their other suites stay in cuda_emu), and
  # structured outputs over Qwen3's whole vocabulary.
  set(heavy_cases "CudaFp8Kv.Qwen3ShapesNearBf16:TinyShapesMoe/CudaEngine.PrefixCache*:TinyShapesMoe/CudaEngine.Fp8*:CudaStructured.*")
  # The two-rank tests are the label's longest (140-260 s each under ASan on a first-generation
  # Zen). On a fresh clone CTest has no measured costs and runs in listed order, which left them
  # running alone at the end of the ASan run; a cost starts them first, beside the others.
  set(cost 0)
  if(name STREQUAL "tp_cuda_test")
    set(cost 1000)
  endif()
  gtest_discover_tests(emu_${name} TEST_PREFIX "emu." TEST_FILTER "-${heavy_cases}"
    PROPERTIES LABELS cuda_emu COST ${cost}
    DISCOVERY_TIMEOUT 60)
  if(name STREQUAL "cuda_engine_test" OR name STREQUAL "cuda_structured_test")
    gtest_discover_tests(emu_${name} TEST_PREFIX "emu." TEST_FILTER "${heavy_cases}"
      PROPERTIES LABELS heavy
      DISCOVERY_TIMEOUT 60)
  endif()
endforeach()

# The emulator's own checks (what it must catch, what it must preserve).
add_executable(emu_self_test ${NANOVLLM_EMU_DIR}/emu_self_test.cpp)
target_link_libraries(emu_self_test PRIVATE nanovllm_cuda_emu GTest::gtest_main)
gtest_discover_tests(emu_self_test PROPERTIES LABELS cuda_emu DISCOVERY_TIMEOUT 60)
