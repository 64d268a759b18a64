# The CUDA architectures a build makes code for (FLASHDLLM_CUDA_ARCHS, issue 48 item 3).
#   native    the compute capabilities nvidia-smi reports on this machine (e.g. 8.6 -> 86); without a
#             GPU (a CI or packaging machine) 90, the H100/H200 the engine is measured on
#   portable  machine code for sm_80 (A100), 86 (RTX 30xx, A10, A40), 89 (L4, L40S, RTX 40xx) and 90
#             (H100/H200), plus compute_90 PTX that newer drivers compile for later GPUs
#   a list    passed to CMake as is (86, "80;90", "89-real", ...)
# The Hopper kernels (wgmma attention, src/kernels/cuda/CMakeLists.txt) are built when the list has 90.

# out_var = the CMake CUDA_ARCHITECTURES list for the setting `spec`.
function(flashdllm_resolve_cuda_archs spec out_var)
  if(spec STREQUAL "portable")
    set(archs 80-real 86-real 89-real 90-real 90-virtual)
  elseif(spec STREQUAL "native" OR spec STREQUAL "")
    set(archs "")
    find_program(FLASHDLLM_NVIDIA_SMI nvidia-smi)
    if(FLASHDLLM_NVIDIA_SMI)
      execute_process(COMMAND ${FLASHDLLM_NVIDIA_SMI} --query-gpu=compute_cap --format=csv,noheader
                      OUTPUT_VARIABLE caps RESULT_VARIABLE rc ERROR_QUIET TIMEOUT 20)
      if(rc EQUAL 0)
        string(REPLACE "\n" ";" caps "${caps}")
        foreach(cap IN LISTS caps)
          string(STRIP "${cap}" cap)
          if(cap MATCHES "^([0-9]+)\\.([0-9]+)$")
            list(APPEND archs "${CMAKE_MATCH_1}${CMAKE_MATCH_2}")
          endif()
        endforeach()
      endif()
    endif()
    list(REMOVE_DUPLICATES archs)
    if(NOT archs)
      message(STATUS "FLASHDLLM_CUDA_ARCHS=native: no GPU found (nvidia-smi), building for sm_90; "
                     "-DFLASHDLLM_CUDA_ARCHS=portable builds for every GPU from sm_80")
      set(archs 90)
    endif()
    foreach(a IN LISTS archs)
      if(a LESS 80)
        message(FATAL_ERROR "FLASHDLLM_CUDA_ARCHS=native: this machine has an sm_${a} GPU; the CUDA backend "
                            "needs compute capability 8.0 or newer (build with -DFLASHDLLM_CUDA=OFF)")
      endif()
    endforeach()
  else()
    set(archs ${spec})
    foreach(a IN LISTS archs)
      string(REGEX REPLACE "-(real|virtual)$" "" n "${a}")
      if(NOT n MATCHES "^[0-9]+a?$" OR n LESS 80)
        message(FATAL_ERROR "FLASHDLLM_CUDA_ARCHS: '${a}' is not a CUDA architecture of 80 or newer "
                            "(native, portable, or a list such as 86 or 80;90)")
      endif()
    endforeach()
  endif()
  set(${out_var} ${archs} PARENT_SCOPE)
endfunction()
