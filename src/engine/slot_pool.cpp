// The engine's slot pools (slot_pool.h).
#include "engine/slot_pool.h"

#include "core/check.h"
#include "denoise/fastdllm_cache.h"
#include "denoise/flash_cache.h"
#include "denoise/llada_sampler.h"
#include "engine/tensor_parallel.h"

namespace flashdllm {
namespace {

/// A block sampler's options: blocks of B, the per-request defaults of `r` (the inverse of slot_params_of).
template <class Options>
void set_block_defaults(Options& o, const SlotParams& r, int64_t B) {
  o.gen_length = r.gen_length;
  o.block_length = B;
  o.steps = r.steps;
  o.threshold = r.threshold;
  o.temperature = r.temperature;
  o.seed = r.seed;
}

}  // namespace

/// A request's SlotParams: the canvas is gen_length (exact_blocks) or gen_length rounded up to the
/// block (the block samplers need whole blocks), steps and threshold defaulted.
SlotParams resolve_params(const SamplingParams& s, const DecodeSettings& d, bool exact_blocks) {
  SlotParams p;
  const int64_t B = d.effective_block_length();
  p.gen_length = d.cache == CacheMode::kFlash || exact_blocks ? s.gen_length : (s.gen_length + B - 1) / B * B;
  p.threshold = effective_threshold(d, s);
  p.steps = s.steps > 0 ? s.steps : default_steps(p.gen_length, B);
  p.temperature = s.temperature;
  p.seed = s.seed;
  return p;
}

/// The denoiser of a decoding mode over a slot pool; `request` gives the options' per-request
/// defaults (the denoisers validate them).
std::unique_ptr<Denoiser> make_denoiser(Backend& be, const LladaModel& m, const DecodeSettings& d, int32_t eot,
                                        const SlotParams& request, const SlotPool& pool) {
  const int64_t B = d.effective_block_length();
  switch (d.cache) {
    case CacheMode::kNone: {
      LladaSamplerOptions so;
      set_block_defaults(so, request, B);
      so.cfg_scale = d.cfg_scale;
      so.remasking = d.remasking;
      so.logits_eos_inf = d.logits_eos_inf;
      so.confidence_eos_eot_inf = d.confidence_eos_eot_inf;
      so.reference_quirks = d.reference_quirks;
      so.confidence_f64 = !d.confidence_f32;
      so.eot_token_id = eot;
      so.eos_pad_tile = d.eos_pad_tile;
      return std::make_unique<LladaSampler>(be, m, so, pool);
    }
    case CacheMode::kPrefix:
    case CacheMode::kDual: {
      FastDllmCacheOptions fo;
      fo.mode = d.cache == CacheMode::kPrefix ? FastDllmCacheMode::kPrefix : FastDllmCacheMode::kDual;
      set_block_defaults(fo, request, B);
      fo.remasking = d.remasking;
      fo.confidence_f64 = !d.confidence_f32;
      return std::make_unique<FastDllmCacheSampler>(be, m, fo, pool);
    }
    case CacheMode::kFlash: {
      FlashCacheOptions fo;
      fo.gen_length = request.gen_length;
      fo.block_length = B;
      fo.threshold = request.threshold.value_or(0.9);
      fo.track_num = d.track_num;
      fo.mask_num = d.mask_num;
      fo.n_slots = pool.n_slots;
      if (d.tokens_per_step > 0) {
        fo.rule = FlashDecodeRule::kFixedCount;
        fo.tokens_per_step = d.tokens_per_step;
      }
      fo.forced_schedule = d.forced_schedule;
      fo.reference_quirks = d.reference_quirks;
      fo.importance_probability_mass = d.importance_probability_mass;
      fo.max_forward_rows = d.max_forward_rows;
      fo.query_tile_rows = d.query_tile_rows;
      fo.verify = d.verify;
      fo.gamma = d.gamma;
      fo.verify_rule = d.verify_rule;
      fo.max_candidates = d.max_candidates;
      fo.verify_kept = d.verify_kept;
      fo.forced_acceptance = d.forced_acceptance;
      return std::make_unique<FlashCacheDenoiser>(be, m, fo, pool);
    }
  }
  FDLLM_FAIL(ErrorCode::kInternal, "unknown cache mode {}", static_cast<int>(d.cache));
}

std::unique_ptr<Denoiser> make_denoiser(std::span<const ModelRank> ranks, const DecodeSettings& d, int32_t eot,
                                        const SlotParams& request, const SlotPool& pool) {
  FDLLM_CHECK_ARG(!ranks.empty(), "make_denoiser: no model ranks");
  if (ranks.size() == 1) return make_denoiser(*ranks[0].backend, *ranks[0].model, d, eot, request, pool);
  std::vector<std::unique_ptr<Denoiser>> dens;
  std::vector<Communicator*> comms;
  for (const ModelRank& r : ranks) {
    dens.push_back(make_denoiser(*r.backend, *r.model, d, eot, request, pool));
    comms.push_back(r.model->tp.comm);
  }
  return std::make_unique<TensorParallelDenoiser>(std::move(dens), std::move(comms));
}

}  // namespace flashdllm
