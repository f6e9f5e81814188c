# Rewrites one .cu file of src/backend/cuda for the emulated build (nanovllm_cuda_emu.h):
#   kernel<<<grid, block, smem, stream>>>(args)  ->  kernel % Launch(grid, block, smem, stream)(args)
#   extern __shared__ [__align__(N)] T name[];   ->  T* name = <the launch's dynamic shared memory>;
# A #line directive keeps compiler messages pointing at the .cu file.
# Usage: cmake -DIN=file.cu -DOUT=file.cpp -P rewrite_launches.cmake
file(READ "${IN}" text)
string(REPLACE "<<<" " % Launch(" text "${text}")
string(REPLACE ">>>" ")" text "${text}")
string(REGEX REPLACE
  "extern __shared__ (__align__\\([0-9]+\\) )?([A-Za-z_0-9]+( [A-Za-z_0-9]+)*) ([A-Za-z_0-9]+)\\[\\];"
  "\\2* \\4 = reinterpret_cast<\\2*>(::nanovllm::cuda_emu::emu::dynamic_shared());"
  text "${text}")
if(text MATCHES "extern __shared__")
  message(FATAL_ERROR "${IN}: an `extern __shared__` declaration this script cannot rewrite")
endif()
file(WRITE "${OUT}.tmp" "#line 1 \"${IN}\"\n${text}")
configure_file("${OUT}.tmp" "${OUT}" COPYONLY)
