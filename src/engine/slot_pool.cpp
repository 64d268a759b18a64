// The engine's slot pools (slot_pool.h).
#include "engine/slot_pool.h"

#include "core/check.h"
#include "denoise/dream_sampler.h"
#include "denoise/fastdllm_cache.h"
#include "denoise/flash_cache.h"
#include "denoise/llada_sampler.h"
#include "engine/tensor_parallel.h"

namespace flashdllm {

std::unique_ptr<Denoiser> make_denoiser(Backend& be, const Model& m, const DecodeSettings& d, int32_t eot,
                                        const SlotPool& pool) {
  // The settings go down as they are; only the EOT id is the engine's (the tokenizer's, or the
  // --eot-id override already in d), and the requests bring their own SamplingParams.
  GenerateOptions o;
  o.decode = d;
  if (eot >= 0) o.decode.eot_token_id = eot;
  switch (d.cache) {
    case CacheMode::kNone:
      if (effective_sampler(d, m.config) == Sampler::kDream)
        return std::make_unique<DreamSampler>(be, m, std::move(o), pool);
      return std::make_unique<LladaSampler>(be, m, std::move(o), pool);
    case CacheMode::kPrefix:
    case CacheMode::kDual: return std::make_unique<FastDllmCacheSampler>(be, m, std::move(o), pool);
    case CacheMode::kFlash: return std::make_unique<FlashCacheDenoiser>(be, m, std::move(o), pool);
  }
  FDLLM_FAIL(ErrorCode::kInternal, "unknown cache mode {}", static_cast<int>(d.cache));
}

std::unique_ptr<Denoiser> make_denoiser(std::span<const ModelRank> ranks, const DecodeSettings& d, int32_t eot,
                                        const SlotPool& pool) {
  FDLLM_CHECK_ARG(!ranks.empty(), "make_denoiser: no model ranks");
  if (ranks.size() == 1) return make_denoiser(*ranks[0].backend, *ranks[0].model, d, eot, pool);
  std::vector<std::unique_ptr<Denoiser>> dens;
  std::vector<Communicator*> comms;
  for (const ModelRank& r : ranks) {
    dens.push_back(make_denoiser(*r.backend, *r.model, d, eot, pool));
    comms.push_back(r.model->tp.comm);
  }
  return std::make_unique<TensorParallelDenoiser>(std::move(dens), std::move(comms));
}

}  // namespace flashdllm
