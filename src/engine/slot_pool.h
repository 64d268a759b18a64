// The engine's slot pools: a request's resolved parameters and the denoiser of a decoding mode
// over a pool of slots (the one place that maps DecodeSettings onto the denoisers' own options).
#pragma once

#include <memory>
#include <span>

#include "backend/backend.h"
#include "denoise/denoiser.h"
#include "flashdllm/params.h"
#include "model/llada.h"

namespace flashdllm {

/// A request's SlotParams under `d`: the canvas is gen_length (exact_blocks, or flash) or
/// gen_length rounded up to the block (the block samplers need whole blocks); steps default to
/// default_steps(canvas, block), the threshold to effective_threshold(d, s).
SlotParams resolve_params(const SamplingParams& s, const DecodeSettings& d, bool exact_blocks);

/// The denoiser of d.cache over `pool` (allocated now): LladaSampler, FastDllmCacheSampler or
/// FlashCacheDenoiser with d's settings; `defaults` fills the options' per-request fields (the
/// requests bring their own); eot = the EOT id (-1 = none). Throws what the denoisers' pool
/// constructors throw (Error(kInvalidArgument), Error(kOutOfMemory)).
std::unique_ptr<Denoiser> make_denoiser(Backend& backend, const LladaModel& model, const DecodeSettings& d,
                                        int32_t eot, const SlotParams& defaults, const SlotPool& pool);

/// One tensor-parallel rank: its backend and its shard of the model (model->tp says which).
struct ModelRank {
  Backend* backend = nullptr;
  const LladaModel* model = nullptr;
};

/// The denoiser of d.cache over the ranks of a model: one rank = make_denoiser above; N ranks = a
/// TensorParallelDenoiser (engine/tensor_parallel.h) over one such denoiser per rank, with the same
/// settings and pool. Throws as above, Error(kInvalidArgument) for no ranks.
std::unique_ptr<Denoiser> make_denoiser(std::span<const ModelRank> ranks, const DecodeSettings& d, int32_t eot,
                                        const SlotParams& defaults, const SlotPool& pool);

}  // namespace flashdllm
