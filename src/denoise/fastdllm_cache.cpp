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
#include "core/philox.h"
#include "denoise/decode_rules.h"

namespace flashdllm {
namespace {

/// Mixes a sequence's model-call counter and a position into a 32-bit noise key (splitmix-style):
/// every (call, position) of a request draws independent noise regardless of batch composition.
uint32_t noise_key(uint64_t salt, int64_t nfe, int64_t pos) {
  uint64_t z = salt + 0x9e3779b97f4a7c15ull * static_cast<uint64_t>(nfe + 1) + static_cast<uint64_t>(pos);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return static_cast<uint32_t>(z ^ (z >> 31));
}

const char* mode_name(FastDllmCacheMode m) { return m == FastDllmCacheMode::kPrefix ? "prefix" : "dual"; }

}  // namespace

void validate_fastdllm_cache_options(const FastDllmCacheOptions& o, const LladaConfig& cfg) {
  FDLLM_CHECK_ARG(o.mode == FastDllmCacheMode::kPrefix || o.mode == FastDllmCacheMode::kDual,
                  "Fast-dLLM cache mode must be prefix or dual, got {}", static_cast<int>(o.mode));
  FDLLM_CHECK_ARG(o.gen_length > 0, "gen_length must be positive, got {}", o.gen_length);
  FDLLM_CHECK_ARG(o.block_length > 0, "block_length must be positive, got {}", o.block_length);
  FDLLM_CHECK_ARG(o.gen_length % o.block_length == 0,
                  "gen_length ({}) must be a multiple of block_length ({}) (Fast-dLLM generate.py asserts this)",
                  o.gen_length, o.block_length);
  const int64_t n_blocks = o.gen_length / o.block_length;
  if (!o.threshold) {
    FDLLM_CHECK_ARG(o.steps > 0, "steps must be positive, got {}", o.steps);
    FDLLM_CHECK_ARG(o.steps % n_blocks == 0,
                    "steps ({}) must be divisible by the number of blocks gen_length/block_length = {} "
                    "(Fast-dLLM generate.py asserts this)",
                    o.steps, n_blocks);
  } else {
    FDLLM_CHECK_ARG(std::isfinite(*o.threshold) && *o.threshold > 0.0 && *o.threshold <= 1.0,
                    "threshold must be in (0, 1], got {}", *o.threshold);
  }
  FDLLM_CHECK_ARG(o.temperature >= 0.0 && std::isfinite(o.temperature), "temperature must be >= 0, got {}",
                  o.temperature);
  FDLLM_CHECK_ARG(o.gen_length < cfg.max_sequence_length,
                  "gen_length {} does not fit the model's max_sequence_length {}", o.gen_length,
                  cfg.max_sequence_length);
}

FastDllmCacheSampler::FastDllmCacheSampler(Backend& backend, const LladaModel& model, FastDllmCacheOptions options)
    : backend_(backend), model_(model), opt_(std::move(options)) {
  validate_fastdllm_cache_options(opt_, model_.config);
}

CachedSequenceState FastDllmCacheSampler::init_state(std::span<const int32_t> prompt) const {
  const LladaConfig& c = model_.config;
  FDLLM_CHECK_ARG(!prompt.empty(), "the prompt is empty (LLaDA needs at least one prompt token)");
  const int64_t total = static_cast<int64_t>(prompt.size()) + opt_.gen_length;
  FDLLM_CHECK_ARG(total <= c.max_sequence_length,
                  "prompt of {} tokens + gen_length {} = {} exceeds the model's max_sequence_length {}",
                  prompt.size(), opt_.gen_length, total, c.max_sequence_length);
  for (size_t i = 0; i < prompt.size(); ++i) {
    FDLLM_CHECK_ARG(prompt[i] >= 0 && prompt[i] < c.embedding_size,
                    "prompt token {} at position {} is outside the vocabulary [0, {})", prompt[i], i,
                    c.embedding_size);
    FDLLM_CHECK_ARG(prompt[i] != c.mask_token_id,
                    "prompt position {} holds the mask token id {}; prompts must not contain masks", i,
                    c.mask_token_id);
  }
  CachedSequenceState s;
  s.prompt_len = static_cast<int64_t>(prompt.size());
  s.gen_length = opt_.gen_length;
  s.x.assign(prompt.begin(), prompt.end());
  s.x.resize(static_cast<size_t>(total), c.mask_token_id);
  prepare_block(s);
  return s;
}

void FastDllmCacheSampler::prepare_block(CachedSequenceState& s) const {
  s.step_in_block = 0;
  s.block_quota.clear();
  if (opt_.threshold) return;
  const int64_t b0 = s.prompt_len + s.block * opt_.block_length;
  int64_t n_masked = 0;
  for (int64_t p = b0; p < b0 + opt_.block_length; ++p) n_masked += s.x[p] == model_.config.mask_token_id;
  s.block_quota = quota_schedule(n_masked, opt_.steps / (opt_.gen_length / opt_.block_length));
}

void FastDllmCacheSampler::ensure_capacity(int64_t store_rows, int64_t tokens, int64_t logit_rows, int64_t tiles) {
  if (kv_.rows < store_rows) {
    // A new store loses every cached row: forget all epochs so stale states fail the check.
    kv_ = KvStore{};
    kv_ = make_kv_store(backend_, model_.config, store_rows, /*shared_across_layers=*/false);
    row_epoch_.assign(static_cast<size_t>(store_rows), 0);
  }
  if (ws_.max_tokens < tokens || ws_.max_logit_rows < logit_rows || ws_.max_tiles < tiles) {
    const int64_t t = std::max(tokens, ws_.max_tokens), r = std::max(logit_rows, ws_.max_logit_rows),
                  n_tiles = std::max(tiles, ws_.max_tiles);
    ws_ = ForwardWorkspace{};  // free the old one first
    ws_ = make_forward_workspace(backend_, model_.config, t, r, n_tiles);
    const int64_t R = ws_.max_logit_rows;
    const size_t bytes_x0 = static_cast<size_t>(R) * 4, pad = (bytes_x0 + 255) / 256 * 256;
    sel_buf_ = Buffer{};
    sel_buf_ = backend_.alloc(pad + static_cast<size_t>(R) * 8, "token selection outputs");
    x0_ = Tensor(sel_buf_.data(), DType::kI32, backend_.device(), {R});
    conf_ = Tensor(static_cast<char*>(sel_buf_.data()) + pad, DType::kF64, backend_.device(), {R});
  }
}

std::vector<StepCommit> FastDllmCacheSampler::step(std::vector<CachedSequenceState>& batch) {
  const LladaConfig& c = model_.config;
  const int32_t mask = c.mask_token_id;
  const int64_t B = opt_.block_length;
  const size_t n = batch.size();
  std::vector<StepCommit> commits(n);

  // --- store rows of every sequence (done ones included, so rows stay put while others finish)
  std::vector<int64_t> base(n);
  int64_t store_rows = 0;
  for (size_t i = 0; i < n; ++i) {
    base[i] = store_rows;
    store_rows += static_cast<int64_t>(batch[i].x.size());
  }

  // --- call kind per active sequence; cached calls must find their own block's rows intact
  std::vector<char> kind(n, 0);
  bool any_cached = false, any_active = false;
  for (size_t i = 0; i < n; ++i) {
    const CachedSequenceState& s = batch[i];
    if (s.done) continue;
    any_active = true;
    FDLLM_CHECK_ARG(s.block >= 0 && s.block < opt_.gen_length / B && s.prompt_len > 0 &&
                        static_cast<int64_t>(s.x.size()) == s.prompt_len + opt_.gen_length,
                    "Fast-dLLM {} cache: sequence {} is not a state of this sampler (block {}, prompt {}, length {})",
                    mode_name(opt_.mode), i, s.block, s.prompt_len, s.x.size());
    if (s.step_in_block == 0) {
      kind[i] = kCallFull;
      continue;
    }
    any_cached = true;
    kind[i] = opt_.mode == FastDllmCacheMode::kPrefix ? kCallSuffix : kCallBlock;
    const int64_t L = static_cast<int64_t>(s.x.size());
    bool intact = s.cache_block == s.block && s.kv_offset == base[i] && base[i] + L <= kv_.rows;
    for (int64_t r = base[i]; intact && r < base[i] + L; ++r) intact = row_epoch_[static_cast<size_t>(r)] == s.cache_epoch;
    FDLLM_CHECK_ARG(intact,
                    "Fast-dLLM {} cache: sequence {} is at step {} of block {} but its K/V cache {} (the batch must "
                    "keep its order and sequence lengths between the steps of a block)",
                    mode_name(opt_.mode), i, s.step_in_block, s.block,
                    s.cache_block != s.block ? "was built for another block" : "was overwritten or never built here");
  }
  if (!any_active) return commits;
  FDLLM_CHECK_ARG(!(any_cached && kv_.rows < store_rows),
                  "Fast-dLLM {} cache: the batch needs {} K/V rows but the cache holds {}; a batch cannot grow in "
                  "the middle of a block",
                  mode_name(opt_.mode), store_rows, kv_.rows);

  // --- plan: F = whole sequence; S = x[block_start:]; B = x[block_start : block_start + B].
  // Every call attends to the sequence's whole row range: rows it writes now are fresh, the others
  // are what the block's F call left there.
  ForwardBatch fb;
  std::vector<std::vector<int64_t>> cand(n);
  std::vector<int64_t> q_first(n, 0);  // first query row of each sequence in fb
  std::vector<int64_t> q_pos0(n, 0);   // position of that row
  for (size_t i = 0; i < n; ++i) {
    if (!kind[i]) continue;
    const CachedSequenceState& s = batch[i];
    const int64_t L = static_cast<int64_t>(s.x.size());
    const int64_t b0 = s.prompt_len + s.block * B, b1 = b0 + B;
    const int64_t p_begin = kind[i] == kCallFull ? 0 : b0;
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
    for (int64_t p = b0; p < b1; ++p)
      if (s.x[static_cast<size_t>(p)] == mask) cand[i].push_back(p);
  }
  for (size_t i = 0; i < n; ++i)
    for (int64_t p : cand[i]) {
      fb.logit_rows.push_back(static_cast<int32_t>(q_first[i] + p - q_pos0[i]));
      fb.row_keys.push_back(static_cast<int32_t>(noise_key(opt_.seed, batch[i].nfe, p)));
    }
  const int64_t R = static_cast<int64_t>(fb.logit_rows.size());
  ensure_capacity(store_rows, fb.n_tokens(), std::max<int64_t>(R, 1), static_cast<int64_t>(fb.tiles.size()));

  // F calls (re)write their sequence's rows: stamp them with a fresh epoch.
  for (size_t i = 0; i < n; ++i) {
    if (kind[i] != kCallFull) continue;
    CachedSequenceState& s = batch[i];
    const uint64_t epoch = next_epoch_++;
    std::fill(row_epoch_.begin() + base[i], row_epoch_.begin() + base[i] + static_cast<int64_t>(s.x.size()), epoch);
    s.cache_epoch = epoch;
    s.cache_block = s.block;
    s.kv_offset = base[i];
  }

  // --- forward and token choice on the device; only R ids + confidences come back
  std::vector<int32_t> x0(static_cast<size_t>(R));
  std::vector<double> conf(static_cast<size_t>(R));
  Tensor logits = llada_forward(backend_, model_, fb, kv_, ws_);
  if (R > 0) {
    SelectParams sp;
    sp.temperature = opt_.temperature;
    sp.seed = opt_.seed;
    sp.confidence_f64 = opt_.confidence_f64;
    Tensor x0_dev = x0_.slice_rows(0, R), conf_dev = conf_.slice_rows(0, R);
    backend_.select_tokens(logits, ws_.row_keys.slice_rows(0, R), sp, x0_dev, conf_dev);
    backend_.copy_to_host(x0.data(), x0_dev);
    backend_.copy_to_host(conf.data(), conf_dev);
  } else {
    backend_.synchronize();
  }

  // --- per-sequence decisions (Fast-dLLM get_transfer_index), commits only inside the block
  int64_t r0 = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!kind[i]) continue;
    CachedSequenceState& s = batch[i];
    const int64_t nc = static_cast<int64_t>(cand[i].size());
    std::span<const double> cs(conf.data() + r0, static_cast<size_t>(nc));
    std::vector<double> random_conf;
    if (opt_.remasking == Remasking::kRandom) {
      for (int64_t j = 0; j < nc; ++j)
        random_conf.push_back(philox_uniform(opt_.seed, 1, static_cast<uint32_t>(fb.row_keys[r0 + j]), 0xffffffffu));
      cs = random_conf;
    }
    std::vector<int64_t> pick;
    if (opt_.threshold) {
      pick = threshold_indices(cs, *opt_.threshold);
    } else {
      FDLLM_CHECK_ARG(s.step_in_block < static_cast<int64_t>(s.block_quota.size()),
                      "Fast-dLLM {} cache: sequence {} is at step {} of block {} but the block's quota schedule has "
                      "{} steps (masks were added to the block after it started?)",
                      mode_name(opt_.mode), i, s.step_in_block, s.block, s.block_quota.size());
      pick = top_k_indices(cs, s.block_quota[static_cast<size_t>(s.step_in_block)]);
    }
    std::sort(pick.begin(), pick.end());
    StepCommit& sc = commits[i];
    sc.candidates = cand[i];
    sc.confidences.assign(cs.begin(), cs.end());
    for (int64_t j : pick) {
      const int64_t pos = cand[i][static_cast<size_t>(j)];
      s.x[static_cast<size_t>(pos)] = x0[static_cast<size_t>(r0 + j)];
      sc.positions.push_back(pos);
      sc.tokens.push_back(s.x[static_cast<size_t>(pos)]);
    }
    r0 += nc;
    s.nfe += 1;
    s.step_in_block += 1;
    s.call_kinds.push_back(kind[i]);
    // Fast-dLLM loops until the block has no mask left (in quota mode that is after the last
    // step with a non-zero quota).
    const int64_t b0 = s.prompt_len + s.block * B;
    const bool block_done =
        std::none_of(s.x.begin() + b0, s.x.begin() + b0 + B, [mask](int32_t t) { return t == mask; });
    if (block_done) {
      s.block += 1;
      if (s.block == opt_.gen_length / B) {
        s.done = true;
      } else {
        prepare_block(s);
      }
    }
  }
  return commits;
}

std::vector<CachedSequenceState> FastDllmCacheSampler::generate(const std::vector<std::vector<int32_t>>& prompts,
                                                                const CachedStepObserver& observer) {
  std::vector<CachedSequenceState> batch;
  batch.reserve(prompts.size());
  for (const auto& p : prompts) batch.push_back(init_state(p));
  while (std::any_of(batch.begin(), batch.end(), [](const CachedSequenceState& s) { return !s.done; })) {
    std::vector<bool> was_done(batch.size());
    for (size_t i = 0; i < batch.size(); ++i) was_done[i] = batch[i].done;
    std::vector<StepCommit> commits = step(batch);
    if (observer)
      for (size_t i = 0; i < batch.size(); ++i)
        if (!was_done[i]) observer(i, batch[i], commits[i]);
  }
  return batch;
}

}  // namespace flashdllm
