// Flash-Cache's slot pool: the sizes of its buffers for n slots of T positions (pool_shape,
// flash_pool_bytes) and their allocation (allocate_pool: the flat K/V store, the main and verify
// passes' workspace, the selection outputs). The slot contract and step() are in flash_cache.cpp.
#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "core/check.h"
#include "denoise/flash_cache.h"
#include "denoise/flash_verify.h"

namespace flashdllm {

namespace {

size_t pad256(size_t b) { return (b + 255) / 256 * 256; }

/// The sizes of a pool's buffers for n slots of prompt + gen_length <= T: allocate_pool allocates
/// them, flash_pool_bytes adds them up.
struct PoolShape {
  int64_t L = 0, Ls = 0;  // L_max (host slot rows) and the K/V store rows per slot
  // Main-pass workspace: a slot queries at most Ls + bm rows (its prefill, or a full-recompute
  // window and tracked set); forward calls are cut at max_forward_rows unless one slot alone
  // exceeds it (flash_forward_groups).
  int64_t tokens = 0, logit_rows = 0, tiles = 0;
  size_t conf_offset = 0, scores_offset = 0, sel_bytes = 0;  // [x0 | conf | scores], 256-byte aligned parts
  // Verify pass: a tile of at most flash_verify_max_rows rows per slot, at most the cap's logit
  // rows, keys < seqlen_k <= Ls.
  int64_t v_tokens = 0, v_logit_rows = 0, v_tiles = 0, v_keys = 0;
  size_t v_x0 = 0, v_conf = 0, v_val = 0, v_drafts = 0;  // [x0 | conf | ℓ_draft, ℓ_argmax | drafts]
};

PoolShape pool_shape(const GenerateOptions& o, const FlashTiling& t, int64_t n, int64_t T, bool logit_shift) {
  FDLLM_CHECK_ARG(n >= 1 && T >= 2,
                  "flash-cache: a pool needs >= 1 slot and room for a prompt and a canvas, got {} "
                  "slots x {} positions",
                  n, T);
  const int64_t bm = o.decode.effective_block_length(), kt = t.key_tile;
  PoolShape p;
  // L_max and the store stride for prompt + gen_length = T (flash_max_length / flash_slot_length).
  // Host slot rows have L_max entries with reference_quirks (they shape the windows near the end);
  // the K/V store needs only the rows a slot can query. With reference_quirks the released code's
  // decoded EOS padding moves windows past that, so the store keeps L_max rows.
  p.L = (T + bm) / kt * kt + kt;
  p.Ls = o.decode.reference_quirks ? p.L : std::max(T / kt * kt + kt, T + bm);
  const int64_t slot_rows = p.Ls + bm;
  p.tokens = n * slot_rows;
  if (o.decode.max_forward_rows > 0) p.tokens = std::min(p.tokens, std::max(o.decode.max_forward_rows, slot_rows));
  const int64_t tile_rows = o.decode.query_tile_rows > 0 ? o.decode.query_tile_rows : slot_rows;
  // Per slot: its window tile (with query_tile_rows 0 the whole slot), its tracked tiles, its score tile.
  p.tiles = n * (2 + (slot_rows + tile_rows - 1) / tile_rows);
  p.logit_rows = n * bm;
  const auto R = static_cast<size_t>(p.logit_rows);
  p.conf_offset = pad256(R * 4);
  p.scores_offset = p.conf_offset + pad256(R * 8);
  p.sel_bytes = p.scores_offset + static_cast<size_t>(n * p.Ls + 1) * sizeof(float);
  p.v_tokens = n * flash_verify_max_rows(o, logit_shift);
  p.v_logit_rows = std::max<int64_t>(1, n * flash_verify_cap(o));
  p.v_tiles = n;
  p.v_keys = n * p.Ls;
  const auto VR = static_cast<size_t>(p.v_logit_rows);
  p.v_x0 = pad256(VR * 4);
  p.v_conf = pad256(VR * 8);
  p.v_val = pad256(2 * VR * 4);
  p.v_drafts = VR * 4;
  return p;
}

/// The one forward-workspace buffer of a pool: the main pass's layout, or the verify pass's if larger.
size_t pool_workspace_bytes(const PoolShape& p, const GenerateOptions& o, const ModelConfig& c, DType act,
                            const TensorParallel& tp) {
  const size_t main = forward_workspace_bytes(act, c, p.tokens, p.logit_rows, p.tiles, 0, tp);
  if (!o.decode.verify) return main;
  return std::max(main, forward_workspace_bytes(act, c, p.v_tokens, p.v_logit_rows, p.v_tiles, p.v_keys, tp));
}

}  // namespace

FlashPoolBytes flash_pool_bytes(const ModelConfig& cfg, DType act, const GenerateOptions& o, int64_t n_slots,
                                int64_t max_total_length, const TensorParallel& tp, const FlashTiling& t) {
  const PoolShape p = pool_shape(o, t, n_slots, max_total_length, cfg.logit_shift);
  FlashPoolBytes b;
  b.store_stride = p.Ls;
  b.forward_rows = p.tokens;
  b.kv = kv_store_bytes(act, cfg, n_slots * p.Ls + 1, /*shared_across_layers=*/false, tp);
  b.workspace = pool_workspace_bytes(p, o, cfg, act, tp);
  b.selection = p.sel_bytes;
  if (o.decode.verify) b.verify = p.v_x0 + p.v_conf + p.v_val + p.v_drafts;
  return b;
}

void FlashCacheDenoiser::allocate_pool(const SlotPool& pool) {
  const ModelConfig& c = model_.config;
  const int64_t n = pool.n_slots, T = pool.max_total_length, bm = bm_, kt = tiling_.key_tile;
  const PoolShape p = pool_shape(opt_, tiling_, n, T, c.logit_shift);
  const int64_t L = p.L, Ls = p.Ls;
  FDLLM_CHECK_ARG(L <= model_.rope.table.cos.rows(),
                  "flash-cache: slot length L_max = {} (prompt + gen_length {} + block_length {}, rounded up to the "
                  "{}-key tile) exceeds the model's RoPE table of {} positions",
                  L, T, bm, kt, model_.rope.table.cos.rows());
  FDLLM_CHECK_ARG(n * Ls + 1 < (int64_t{1} << 31), "flash-cache: {} slots × {} store rows (+ 1) exceed 2^31 store rows",
                  n, Ls);
  // Flat K/V cache: per layer [n_slots·Ls + 1, n_kv_heads·head_dim] (the last row: padding rows' K/V,
  // below); refuse what cannot fit. This rank's share: its heads (tensor parallelism splits the K/V
  // cache by heads).
  const auto world = static_cast<size_t>(model_.tp.world);
  const size_t kv_bytes = kv_store_bytes(backend_.activation_dtype(), c, n * Ls + 1, false, model_.tp);
  const size_t free_bytes = backend_.free_memory();
  if (kv_bytes > free_bytes) {
    const int64_t fit = flash_max_slots(c, backend_.activation_dtype(), Ls, free_bytes * world);
    FDLLM_FAIL(ErrorCode::kOutOfMemory,
               "flash-cache: the K/V cache for {} slots × {} rows needs {:.2f} GiB but only {:.2f} GiB are free on {}; "
               "at most {} slot(s) fit (pass fewer slots or a shorter gen_length)",
               n, Ls, static_cast<double>(kv_bytes) / (1 << 30), static_cast<double>(free_bytes) / (1 << 30),
               backend_.name(), fit);
  }
  kv_ = KvStore{};
  // The slots' rows, then one row no tile reads: the K/V of the main pass's padding rows
  // (ForwardBatch::pad_kv_row), so that passes of nearby row counts share a recorded graph.
  kv_ = make_kv_store(backend_, c, n * Ls + 1, /*shared_across_layers=*/false, model_.tp);
  store_scores_.assign(static_cast<size_t>(n * Ls), 0.f);
  scores_.assign(static_cast<size_t>(n * L), 0.f);
  L_ = L;
  Ls_ = Ls;
  pool_total_ = T;
  slots_.assign(static_cast<size_t>(n), FlashSlot{});
  done_.assign(static_cast<size_t>(n), FlashSlot{});
  results_.assign(static_cast<size_t>(n), FlashRequestResult{});
  stats_ = FlashRunStats{};
  stats_.n_slots = n;
  stats_.max_length = L;
  stats_.store_stride = Ls;
  stats_.kv_bytes = kv_.bytes;

  // Workspaces for the largest iteration the pool can make (pool_shape), the main and the verify
  // pass's in one buffer (never in use at the same time).
  ws_ = ForwardWorkspace{};
  vws_ = ForwardWorkspace{};
  ws_buf_ = Buffer{};
  ws_buf_ = backend_.alloc(pool_workspace_bytes(p, opt_, c, backend_.activation_dtype(), model_.tp),
                           "forward workspace (main and verify passes)");
  ws_ = make_forward_workspace(backend_, c, p.tokens, p.logit_rows, p.tiles, 0, model_.tp, &ws_buf_);
  const int64_t R = ws_.max_logit_rows;
  conf_offset_ = p.conf_offset;
  scores_offset_ = p.scores_offset;
  sel_buf_ = backend_.alloc(p.sel_bytes, "flash-cache selection outputs and importance");
  sel_host_.assign(p.sel_bytes, std::byte{0});
  char* sel = static_cast<char*>(sel_buf_.data());
  x0_ = Tensor(sel, DType::kI32, backend_.device(), {R});
  conf_ = Tensor(sel + conf_offset_, DType::kF64, backend_.device(), {R});
  scores_dev_ = Tensor(sel + scores_offset_, DType::kF32, backend_.device(), {n * Ls + 1});  // one per store row
  backend_.fill_zero(scores_dev_);
  stats_.pool_bytes = kv_.bytes + ws_buf_.bytes() + sel_buf_.bytes();
  if (!opt_.decode.verify) return;
  vws_ = make_forward_workspace(backend_, c, p.v_tokens, p.v_logit_rows, p.v_tiles, p.v_keys, model_.tp, &ws_buf_);
  const int64_t VR = vws_.max_logit_rows;
  vsel_buf_ = backend_.alloc(p.v_x0 + p.v_conf + p.v_val + p.v_drafts, "flash-verify selection outputs");
  char* base = static_cast<char*>(vsel_buf_.data());
  vx0_ = Tensor(base, DType::kI32, backend_.device(), {VR});
  vconf_ = Tensor(base + p.v_x0, DType::kF64, backend_.device(), {VR});
  vconf_offset_ = p.v_x0;
  vval_offset_ = p.v_x0 + p.v_conf;
  vval_ = Tensor(base + vval_offset_, DType::kF32, backend_.device(), {2 * VR});
  vdrafts_ = Tensor(base + vval_offset_ + p.v_val, DType::kI32, backend_.device(), {VR});
  vsel_host_.assign(vval_offset_ + p.v_val, std::byte{0});
  stats_.pool_bytes += vsel_buf_.bytes();
}

}  // namespace flashdllm
