// Fast-dLLM prefix-cache and dual-cache denoisers (see fastdllm_cache.h for the algorithm and the
// store-row layout). Invariants kept here:
//   * a sequence's cached call reads only rows its own F call wrote in the current block
//     (row_epoch_ check), so a reordered or resized batch is an error, never a silent wrong read;
//   * per-layer stores (shared_across_layers = false): layer l's cached K/V must survive the other
//     layers of the same forward and the steps until the next F call;
//   * one forward per step for the whole batch; only candidate rows reach the LM head.
#include "denoise/fastdllm_cache.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace flashdllm {
namespace {

/// The one setting that picks this sampler; the rest are params.cpp's checks (validate).
void check_fastdllm_settings(const DecodeSettings& d) {
  FDLLM_CHECK_PARAM(d.cache == CacheMode::kPrefix || d.cache == CacheMode::kDual, "cache",
                    "the Fast-dLLM cache mode must be prefix or dual, got cache {}", cache_mode_name(d.cache));
}

}  // namespace

FastDllmCacheSampler::FastDllmCacheSampler(Backend& backend, const Model& model, GenerateOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  check_fastdllm_settings(opt_.decode);
  validate(opt_, model_.config);
  B_ = opt_.decode.effective_block_length();
  prefix_ = opt_.decode.cache == CacheMode::kPrefix;
}

FastDllmCacheSampler::FastDllmCacheSampler(Backend& backend, const Model& model, GenerateOptions options,
                                           const SlotPool& pool)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  check_fastdllm_settings(opt_.decode);
  validate(opt_.decode, model_.config);  // the requests are checked at admission (check_request)
  B_ = opt_.decode.effective_block_length();
  prefix_ = opt_.decode.cache == CacheMode::kPrefix;
  const char* mode = cache_mode_name(opt_.decode.cache);
  FDLLM_CHECK_ARG(pool.n_slots >= 1 && pool.max_total_length >= 1,
                  "Fast-dLLM {} cache: a pool needs >= 1 slot and a "
                  "positive max_total_length, got {} slots x {}",
                  mode, pool.n_slots, pool.max_total_length);
  FDLLM_CHECK_ARG(pool.n_slots * pool.max_total_length < (int64_t{1} << 31),
                  "Fast-dLLM {} cache: {} slots x {} positions exceed 2^31 store rows", mode, pool.n_slots,
                  pool.max_total_length);
  slots_.reset(pool.n_slots, pool.max_total_length);
  const int64_t rows = pool.n_slots * pool.max_total_length;
  const int64_t tokens = pool.max_step_rows > 0 ? std::min(pool.max_step_rows, rows) : rows;
  const int64_t logit_rows = pool.n_slots * B_;
  ensure_capacity(rows, tokens, logit_rows, pool.n_slots);
  selection_.reserve(backend_, logit_rows);
}

CachedSequenceState FastDllmCacheSampler::init_state(std::span<const int32_t> prompt) const {
  return init_state(prompt, resolve_params(opt_.sampling, opt_.decode, /*exact_blocks=*/true));
}

CachedSequenceState FastDllmCacheSampler::init_state(std::span<const int32_t> prompt, const SlotParams& params) const {
  CachedSequenceState s;
  init_sequence(s, prompt, params.gen_length, model_.config);
  set_state_params(s, params);
  validate_state_params(s, B_, model_.config, "Fast-dLLM generate.py");
  begin_block(s, s.schedule(B_), model_.config.mask_token_id);
  return s;
}

void FastDllmCacheSampler::ensure_capacity(int64_t store_rows, int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (kv_.rows < store_rows) {
    // A new store loses every cached row: forget all epochs so stale states fail the check.
    kv_ = KvStore{};
    kv_ = make_kv_store(backend_, model_.config, store_rows, /*shared_across_layers=*/false, model_.tp);
    row_epoch_.assign(static_cast<size_t>(store_rows), 0);
  }
  if (ws_.max_tokens < tokens || ws_.max_logit_rows < logit_rows || ws_.max_tiles < tiles) {
    const int64_t t = std::max(tokens, ws_.max_tokens), r = std::max(logit_rows, ws_.max_logit_rows),
                  n_tiles = std::max(tiles, ws_.max_tiles);
    ws_ = ForwardWorkspace{};  // free the old one first
    ws_ = make_forward_workspace(backend_, model_.config, t, r, n_tiles, 0, model_.tp);
  }
}

std::vector<StepCommit> FastDllmCacheSampler::step(std::vector<CachedSequenceState>& batch) {
  // Store rows of every sequence after the previous ones (done ones included, so rows stay put
  // while others finish).
  std::vector<int64_t> base(batch.size());
  int64_t store_rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    base[i] = store_rows;
    store_rows += static_cast<int64_t>(batch[i].x.size());
  }
  return step_at(batch, base, store_rows);
}

namespace {

/// The call kind of each active sequence (0 for a done one): F at a block's first step, else S
/// (prefix cache) or B (dual cache). A cached call must find the rows its block's F call wrote
/// intact (row_epoch); returns whether any sequence is active and sets any_cached.
bool plan_call_kinds(const std::vector<CachedSequenceState>& batch, const std::vector<int64_t>& base, int64_t B,
                     bool prefix, const char* mode, int64_t kv_rows, const std::vector<uint64_t>& row_epoch,
                     std::vector<char>& kind, bool& any_cached) {
  bool any_active = false;
  any_cached = false;
  for (size_t i = 0; i < batch.size(); ++i) {
    const CachedSequenceState& s = batch[i];
    if (s.done) continue;
    any_active = true;
    FDLLM_CHECK_ARG(s.block >= 0 && s.block < s.gen_length / B && s.prompt_len > 0 &&
                        static_cast<int64_t>(s.x.size()) == s.prompt_len + s.gen_length,
                    "Fast-dLLM {} cache: sequence {} is not a state of this sampler (block {}, prompt {}, length {})",
                    mode, i, s.block, s.prompt_len, s.x.size());
    if (s.step_in_block == 0) {
      kind[i] = kCallFull;
      continue;
    }
    any_cached = true;
    kind[i] = prefix ? kCallSuffix : kCallBlock;
    const int64_t L = static_cast<int64_t>(s.x.size());
    bool intact = s.cache_block == s.block && s.kv_offset == base[i] && base[i] + L <= kv_rows;
    for (int64_t r = base[i]; intact && r < base[i] + L; ++r)
      intact = row_epoch[static_cast<size_t>(r)] == s.cache_epoch;
    FDLLM_CHECK_ARG(intact,
                    "Fast-dLLM {} cache: sequence {} is at step {} of block {} but its K/V cache {} (the batch must "
                    "keep its order and sequence lengths between the steps of a block)",
                    mode, i, s.step_in_block, s.block,
                    s.cache_block != s.block ? "was built for another block" : "was overwritten or never built here");
  }
  return any_active;
}

/// The forward batch of one step: F = whole sequence; S = x[q0:]; B = x[q0 : block_start + B], where
/// q0 = logits_source(block_start): the block start, or under a logit shift the token before it,
/// whose row predicts the block's first position (Fast-dLLM's Dream variant instead commits that
/// position at the F call; docs/decisions.md). Every call attends to the sequence's whole row range:
/// rows it writes now are fresh, the others are what the block's F call left there. Fills cand[i]
/// with the block's candidate positions of sequence i and one logit row (that of
/// logits_source(p)) + noise key per candidate.
void plan_forward_batch(const std::vector<CachedSequenceState>& batch, const std::vector<int64_t>& base,
                        const std::vector<char>& kind, int64_t B, const ModelConfig& cfg, ForwardBatch& fb,
                        std::vector<std::vector<int64_t>>& cand) {
  const int32_t mask = cfg.mask_token_id;
  const size_t n = batch.size();
  std::vector<int64_t> q_first(n, 0);  // first query row of each sequence in fb
  std::vector<int64_t> q_pos0(n, 0);   // position of that row
  for (size_t i = 0; i < n; ++i) {
    if (!kind[i]) continue;
    const CachedSequenceState& s = batch[i];
    const int64_t L = static_cast<int64_t>(s.x.size());
    const int64_t b0 = s.prompt_len + s.block * B, b1 = b0 + B;
    const int64_t p_begin = kind[i] == kCallFull ? 0 : logits_source(cfg, b0);
    const int64_t p_end = kind[i] == kCallBlock ? b1 : L;
    q_first[i] = fb.n_tokens();
    q_pos0[i] = p_begin;
    for (int64_t p = p_begin; p < p_end; ++p) {
      fb.token_ids.push_back(s.x[static_cast<size_t>(p)]);
      fb.positions.push_back(static_cast<int32_t>(p));
      fb.kv_rows.push_back(static_cast<int32_t>(base[i] + p));
    }
    fb.tiles.push_back({static_cast<int32_t>(q_first[i]), static_cast<int32_t>(fb.n_tokens()),
                        static_cast<int32_t>(base[i]), static_cast<int32_t>(base[i] + L)});
    cand[i] = block_candidates(s, B, mask);
  }
  for (size_t i = 0; i < n; ++i)
    for (int64_t p : cand[i]) {
      fb.logit_rows.push_back(static_cast<int32_t>(q_first[i] + logits_source(cfg, p) - q_pos0[i]));
      fb.row_keys.push_back(static_cast<int32_t>(noise_key(batch[i].seed, batch[i].nfe, p)));
    }
}

/// F calls (re)write their sequence's rows: stamp them with a fresh epoch.
void stamp_full_calls(std::vector<CachedSequenceState>& batch, const std::vector<int64_t>& base,
                      const std::vector<char>& kind, std::vector<uint64_t>& row_epoch, uint64_t& next_epoch) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (kind[i] != kCallFull) continue;
    CachedSequenceState& s = batch[i];
    const uint64_t epoch = next_epoch++;
    std::fill(row_epoch.begin() + base[i], row_epoch.begin() + base[i] + static_cast<int64_t>(s.x.size()), epoch);
    s.cache_epoch = epoch;
    s.cache_block = s.block;
    s.kv_offset = base[i];
  }
}

/// One select call per run of sequences with equal parameters, over their candidate rows in order.
std::vector<SelectSegment> select_segments(const std::vector<CachedSequenceState>& batch,
                                           const std::vector<std::vector<int64_t>>& cand, bool confidence_f32,
                                           int32_t mask) {
  std::vector<SelectSegment> segments;
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    SelectParams sp;
    sp.temperature = batch[i].temperature;
    sp.seed = batch[i].seed;
    sp.confidence_f64 = !confidence_f32;
    sp.exclude_token = mask;  // a committed position never holds [MASK]
    const auto k = static_cast<int64_t>(cand[i].size());
    append_select_segment(segments, row, row + k, sp);
    row += k;
  }
  return segments;
}

}  // namespace

std::vector<StepCommit> FastDllmCacheSampler::step_at(std::vector<CachedSequenceState>& batch,
                                                      const std::vector<int64_t>& base, int64_t store_rows) {
  const ModelConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  const int64_t B = B_;
  const size_t n = batch.size();
  const char* mode = cache_mode_name(opt_.decode.cache);
  std::vector<StepCommit> commits(n);

  std::vector<char> kind(n, 0);
  bool any_cached = false;
  if (!plan_call_kinds(batch, base, B, prefix_, mode, kv_.rows, row_epoch_, kind, any_cached)) return commits;
  FDLLM_CHECK_ARG(!(any_cached && kv_.rows < store_rows),
                  "Fast-dLLM {} cache: the batch needs {} K/V rows but the cache holds {}; a batch cannot grow in "
                  "the middle of a block",
                  mode, store_rows, kv_.rows);

  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(n);
  plan_forward_batch(batch, base, kind, B, c, fb, cand);
  const int64_t R = static_cast<int64_t>(fb.logit_rows.size());
  ensure_capacity(store_rows, fb.n_tokens(), std::max<int64_t>(R, 1), static_cast<int64_t>(fb.tiles.size()));
  stamp_full_calls(batch, base, kind, row_epoch_, next_epoch_);

  // --- forward and token choice on the device; only R ids + confidences come back
  std::vector<int32_t> x0;
  std::vector<double> conf;
  Tensor logits = model_forward(backend_, model_, fb, kv_, ws_);
  ++passes_;
  const std::vector<SelectSegment> segments = select_segments(batch, cand, opt_.decode.confidence_f32, mask);
  selection_.run(backend_, logits, ws_.row_keys.slice_rows(0, R), segments, x0, conf);
  const std::vector<size_t> bad = check_selection(x0, conf, mask, "Fast-dLLM cache");
  if (R == 0) backend_.synchronize();

  // --- per-sequence decisions (Fast-dLLM get_transfer_index), commits only inside the block;
  // Fast-dLLM loops until the block has no mask left (in quota mode: after the last non-zero quota).
  size_t r0 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!kind[i]) continue;
    CachedSequenceState& s = batch[i];
    const size_t nc = cand[i].size();
    commits[i].error = nonfinite_error(bad, conf, r0, r0 + nc, "Fast-dLLM cache");
    if (!commits[i].error.empty()) {  // this sequence fails alone
      s.done = true;
      r0 += nc;
      continue;
    }
    FDLLM_CHECK_ARG(s.threshold || s.step_in_block < static_cast<int64_t>(s.block_quota.size()),
                    "Fast-dLLM {} cache: sequence {} is at step {} of block {} but the block's quota schedule has "
                    "{} steps (masks were added to the block after it started?)",
                    mode, i, s.step_in_block, s.block, s.block_quota.size());
    commits[i] = commit_step(s, cand[i], std::span<const int32_t>(x0).subspan(r0, nc),
                             std::span<const double>(conf).subspan(r0, nc),
                             std::span<const int32_t>(fb.row_keys).subspan(r0, nc), s.schedule(B),
                             opt_.decode.remasking, s.seed, BlockEnd::kWhenFull, mask);
    attach_logprobs(backend_, logits, r0, cand[i], s, LogprobIds{-1, mask}, commits[i]);
    s.call_kinds.push_back(kind[i]);
    r0 += nc;
  }
  return commits;
}

std::vector<CachedSequenceState> FastDllmCacheSampler::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                                const CachedStepObserver& observer) {
  return run_to_completion<CachedSequenceState>(*this, prompts, observer);
}

// ---------------------------------------------------------------------------------- slot contract

void FastDllmCacheSampler::check_request(std::span<const int32_t> prompt, const SlotParams& p) const {
  slots_.check_fits(prompt, p, "Fast-dLLM cache");
  (void)init_state(prompt, p);  // every other check
}

void FastDllmCacheSampler::admit(int64_t slot, std::span<const int32_t> prompt, const SlotParams& p) {
  FDLLM_CHECK_ARG(slot >= 0 && slot < n_slots() && !active(slot), "Fast-dLLM cache: slot {} is not a free slot", slot);
  check_request(prompt, p);
  slots_.states[static_cast<size_t>(slot)] = init_state(prompt, p);
}

std::vector<SlotStep> FastDllmCacheSampler::step() {
  const std::vector<bool> was_active = slots_.active_mask();
  std::vector<int64_t> base(slots_.states.size());
  for (size_t j = 0; j < base.size(); ++j) base[j] = static_cast<int64_t>(j) * slots_.max_total;
  std::vector<StepCommit> commits = step_at(slots_.states, base, slots_.size() * slots_.max_total);
  return slot_steps_of(slots_.states, commits, was_active);
}

SlotOutput FastDllmCacheSampler::output(int64_t slot) const {
  const CachedSequenceState& s = slots_.at(slot, "Fast-dLLM cache");
  SlotOutput o = state_output(s);
  o.call_kinds = s.call_kinds;
  return o;
}

}  // namespace flashdllm
