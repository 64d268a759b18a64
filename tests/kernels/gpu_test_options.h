// The BackendOptions the GPU tests' default CUDA backends are made with: the defaults, overridden by
// the FLASHDLLM_* variables through the one registry that reads them (apps/cli/env_registry.h), as for
// the flashdllm command. The tests themselves never set the environment; scripts/gpu_check.sh does,
// per run: FLASHDLLM_CUDNN_ATTENTION=all (test_cuda_forward on cuDNN's route for every tile),
// FLASHDLLM_CUDNN_ATTENTION=off under racecheck (which misreads cuDNN's TMA synchronisation) and
// FLASHDLLM_CUDA_SYNC=1 under compute-sanitizer. Tests that need one choice pass their own options.
#pragma once

#include "env_registry.h"
#include "flashdllm/backend_options.h"

namespace flashdllm {

/// The registry's BackendOptions for this process. Throws Error(kInvalidArgument) naming a variable
/// set to an invalid value.
inline BackendOptions gpu_test_backend_options() { return cli::env_settings().backend; }

}  // namespace flashdllm
