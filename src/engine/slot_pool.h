// The engine's slot pools: a request's resolved parameters and the denoiser of a decoding mode
// over a pool of slots (the one place that maps DecodeSettings onto the denoisers' own options).
#pragma once

#include <memory>
#include <span>

#include "backend/backend.h"
#include "denoise/denoiser.h"
#include "flashdllm/params.h"
#include "model/model.h"

namespace flashdllm {

/// The denoiser of d.cache over `pool` (allocated now): LladaSampler, FastDllmCacheSampler or
/// FlashCacheDenoiser with d's settings as they are (the requests bring their own parameters);
/// eot = the EOT id (-1 = none), set as d.eot_token_id. Throws what the denoisers' pool
/// constructors throw (Error(kInvalidArgument), Error(kOutOfMemory)).
std::unique_ptr<Denoiser> make_denoiser(Backend& backend, const Model& model, const DecodeSettings& d, int32_t eot,
                                        const SlotPool& pool);

/// One tensor-parallel rank: its backend and its shard of the model (model->tp says which).
struct ModelRank {
  Backend* backend = nullptr;
  const Model* model = nullptr;
};

/// The denoiser of d.cache over the ranks of a model: one rank = make_denoiser above; N ranks = a
/// TensorParallelDenoiser (engine/tensor_parallel.h) over one such denoiser per rank, with the same
/// settings and pool. Throws as above, Error(kInvalidArgument) for no ranks.
std::unique_ptr<Denoiser> make_denoiser(std::span<const ModelRank> ranks, const DecodeSettings& d, int32_t eot,
                                        const SlotPool& pool);

}  // namespace flashdllm
